"""Fresh-seed holdout: a stored corpus can be memorised, fresh seeds cannot.

Every gated run whose corpus contracts all passed draws K seeds and labels at run time (from the
OS entropy pool, so no candidate can predict them), generates them with the pinned BASELINE code
(the baseline commit's `mutable/`, checked out into a git worktree and built in a worker of its
own) and with the candidate, and applies the same per-item contracts as the corpus, under the run's
cumulative class. A broken contract is a DISCARD reason "holdout seed N: ...". A candidate that
recognises corpus items, or replays stored outputs, is caught here.
"""
from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Iterable, Protocol, Sequence, cast

from pytest_ditar.config.suite import CorpusItem
from pytest_ditar.core.errors import CandidateError
from pytest_ditar.core.outputs import ItemOutput
from pytest_ditar.core.quality import ContractResult, check_contract, compute_metrics
from pytest_ditar.core.regression import _FIELDS, tolerance
from pytest_ditar.core.requests import NUM_LABELS, SEED_RANGE
from pytest_ditar.loop.run.results import RunResults
from pytest_ditar.loop.run.session import DitarSession
from pytest_ditar.runtime.harness import batches, run_batch
from pytest_ditar.runtime.semantic import Evaluators, evaluators_for, pair_scores, wanted
from pytest_ditar.store.atomic import write_json_atomic


@dataclass(frozen=True)
class HoldoutReport:
    items: tuple[CorpusItem, ...]
    results: tuple[ContractResult, ...]
    failures: tuple[str, ...]
    seconds: float
    note: str = ""  # why it did not run, or did not finish
    reference: dict[str, float | None] | None = None  # the baseline outputs made early (Reference)

    def to_dict(self) -> dict[str, Any]:
        return {"items": [{"id": it.id, "seed": it.seed, "label": it.label, "steps": it.steps} for it in self.items],
                "failures": list(self.failures), "seconds": round(self.seconds, 4), "note": self.note,
                "reference": self.reference,
                "results": {r.item_id: {"passed": r.passed, "failures": list(r.failures), **r.metrics.as_dict()}
                            for r in self.results}}


def draw(corpus: Sequence[CorpusItem], count: int, steps: int | None,
         rng: random.Random | None = None) -> tuple[CorpusItem, ...]:
    """K fresh (seed, label) pairs; never a corpus seed."""
    rng = rng or random.SystemRandom()
    used = {it.seed for it in corpus}
    items: list[CorpusItem] = []
    while len(items) < count:
        seed = rng.randrange(1, SEED_RANGE)
        if seed in used:
            continue
        used.add(seed)
        items.append(CorpusItem(id=f"holdout-{seed}", label=rng.randrange(NUM_LABELS), seed=seed, steps=steps))
    return tuple(items)


def baseline_pipeline(sess: DitarSession, commit: str) -> Any:
    """Build the baseline commit's candidate package in a worker of its own (never the champion's)."""
    return sess.build_at_commit(commit, "holdout", role="holdout")


class Reference:
    """The baseline code's outputs for K fresh items, generated on a thread of the judge while the
    candidate's build and quality phase run (none of it is timed), so the holdout itself waits only
    for the candidate's calls. The items are drawn here, from the OS entropy pool: the candidate
    first sees them when it is asked for them, after its quality phase, as before. The thread uses
    only the baseline's worker, and whatever else would (the lanes: it may be the champion's) waits
    for it first (`wait`)."""

    def __init__(self, sess: DitarSession, commit: str, worker: Any, rng: random.Random | None = None):
        cfg = sess.cfg
        self.commit = commit
        self.worker = worker
        self.items = draw(sess.suite.corpus, cfg.holdout.count, cfg.holdout.steps, rng)
        self.outputs: dict[str, ItemOutput] = {}
        self.failure: str | None = None  # the holdout's failure, in its own words
        self.seconds = 0.0  # the thread's own time, off the judge's path
        self.started = time.time()  # epochs, for holdout.json: it starts as the builds are sent
        self.ended: float | None = None
        groups = batches(self.items, sess.suite, sess.suite.pipeline.batch)
        self._thread = threading.Thread(target=self._generate, name="ditar-holdout-reference", daemon=True,
                                        args=(groups, sess.suite, cfg.build_timeout_s, cfg.item_timeout_s))
        self._thread.start()

    def _generate(self, groups: list[Any], suite: Any, build_timeout_s: float | None,
                  item_timeout_s: float | None) -> None:
        t0 = time.perf_counter()
        try:
            try:
                self.worker.built(build_timeout_s)
            except Exception as exc:  # noqa: BLE001 - no trusted reference means no keep: fail closed
                self.failure = _unbuilt(self.commit, exc)
                return
            for group in groups:
                try:
                    self.outputs.update({o.item_id: o for o in run_batch(self.worker, group, suite, item_timeout_s)})
                except Exception as exc:  # noqa: BLE001 - a worker that died is a failed reference too
                    self.failure = _baseline_failed(group, exc.message if isinstance(exc, CandidateError)
                                                    else _one_line(exc))
                    return
        finally:
            self.seconds = time.perf_counter() - t0
            self.ended = time.time()

    def wait(self) -> "Reference":
        """Until the thread is done (the caller books the wait under its span)."""
        self._thread.join()
        return self

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def running(self) -> bool:
        return self._thread.is_alive()


def start_reference(sess: DitarSession, commit: str) -> None:
    """Draw the holdout's items and start their baseline outputs now (loop.perf.startup, once the builds
    are sent); `run` takes them from `sess.holdout_reference`."""
    if sess.cfg.holdout.count and sess.holdout_reference is None:
        build = sess.build_at_commit(commit, "holdout", start_only=True, role="holdout")
        sess.hold_reference(Reference(sess, commit, build))


def settle(sess: DitarSession) -> None:
    """Wait for the reference's thread, if one runs: before anything else uses its worker."""
    ref = sess.holdout_reference
    if ref is not None and ref.running():
        with sess.clock.span("holdout"):
            ref.wait()


def run(sess: DitarSession, results: RunResults, baseline_commit: str,
        rng: random.Random | None = None) -> HoldoutReport:
    """Generate fresh items with the baseline code (or take them from the reference started early)
    and with the candidate; judge them by the contracts. The candidate's errors go to `results`."""
    t0 = time.perf_counter()
    cfg = sess.cfg
    ref = sess.holdout_reference
    ref = ref.wait() if ref is not None and ref.commit == baseline_commit else None
    items = ref.items if ref is not None else draw(sess.suite.corpus, cfg.holdout.count, cfg.holdout.steps, rng)
    if not items:
        return HoldoutReport((), (), (), 0.0, "holdout disabled (holdout.count = 0)")

    made = None if ref is None else {"started": ref.started, "ended": ref.ended, "seconds": round(ref.seconds, 4)}

    def done(results: Iterable[Any] = (), failures: Iterable[str] = (), note: str = "") -> HoldoutReport:
        return HoldoutReport(items, tuple(results), tuple(failures), time.perf_counter() - t0, note, made)

    if ref is not None:
        sess.clock.note("holdout.reference", ref.seconds)
    if ref is not None and ref.failure:
        return done(failures=[ref.failure])
    try:
        # built already where the reference ran: this checks its worktree is still its commit
        base_pipe = baseline_pipeline(sess, baseline_commit)
    except Exception as exc:  # noqa: BLE001 - no trusted reference means no keep: fail closed
        return done(failures=[_unbuilt(baseline_commit, exc)])
    candidate = sess.get_candidate()
    base_outs: dict[str, ItemOutput] = dict(ref.outputs) if ref is not None else {}
    cand_outs: dict[str, ItemOutput] = {}
    for group in batches(items, sess.suite, sess.suite.pipeline.batch):
        seeds = ",".join(str(it.seed) for it in group)
        try:
            if not all(it.id in base_outs for it in group):
                base_outs.update({o.item_id: o for o in run_batch(base_pipe, group, sess.suite, cfg.item_timeout_s)})
        except CandidateError as exc:
            return done(failures=[_baseline_failed(group, exc.message)])
        try:
            cand_outs.update({o.item_id: o
                              for o in run_batch(sess.get_candidate(), group, sess.suite, cfg.item_timeout_s)})
        except CandidateError as exc:
            results.add_error(CandidateError(exc.kind, f"holdout seed {seeds}: {exc.message}", where=exc.where))
            return done(note="the candidate crashed on the holdout")
    del candidate
    scores: list[Any] = [None] * len(items)
    if wanted(sess):  # only runs that score book firewall time for it, as in the quality phase
        with sess.clock.span("semantic"):
            ev = cast(Evaluators, evaluators_for(sess))  # wanted(sess): never None
            scores = pair_scores(ev, items, [cand_outs[it.id].image for it in items],
                                 [base_outs[it.id].image for it in items])
    t = cfg.thresholds_for(sess.judged_class)
    judged, failures = [], []
    for it, extra in zip(items, scores):
        c, b = cand_outs[it.id], base_outs[it.id]
        m = compute_metrics(c.latents, c.image, b.latents, b.image)
        if extra:
            m = replace(m, **extra)
        res = check_contract(it.id, sess.judged_class, m, t)
        res = replace(res, failures=res.failures + _item_regressions(t, m))
        judged.append(res)
        if not m.finite:
            results.add_error(CandidateError("non_finite", f"non-finite output on holdout seed {it.seed}"))
        if not res.passed:
            failures.append(f"holdout seed {it.seed} (label {it.label}): {res.failures[0]}")
    return done(judged, failures)


def _item_regressions(t: Any, m: Any) -> tuple[str, ...]:
    """Zero regression's per-item rule on a fresh item (K is too small for the paired test)."""
    out = []
    for score in (t.required_scores if t.zero_regression else ()):
        cand_field, base_field, higher = _FIELDS[score]
        c, b = getattr(m, cand_field), getattr(m, base_field)
        if c is None or b is None:
            out.append(f"{score} unavailable (semantic evaluators not run)")
            continue
        drop = (b - c) if higher else (c - b)
        if drop > tolerance(t, score):
            out.append(f"{score} dropped {drop:.4g} (> {tolerance(t, score):g})")
    return tuple(out)


def _unbuilt(commit: str, exc: BaseException) -> str:
    return f"holdout: the baseline code ({commit[:7]}) could not be built: {_one_line(exc)}"


def _baseline_failed(group: Sequence[CorpusItem], message: str) -> str:
    return f"holdout seed {','.join(str(it.seed) for it in group)}: the baseline code failed: {message}"


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}"


class Gated(Protocol):
    """What the holdout reads of the gate (loop.judge.gate.Gate, which imports this module)."""

    @property
    def sess(self) -> DitarSession: ...

    @property
    def results(self) -> RunResults: ...

    @property
    def gated(self) -> bool: ...

    @property
    def baseline_commit(self) -> str | None: ...


def run_for_gate(gate: Gated) -> tuple[tuple[str, ...], str | None]:
    """The gate's hook: run only in a gated run whose corpus ran clean; record it. Returns the
    failures (DISCARD reasons) and the summary line that reports the holdout, if it ran."""
    sess = gate.sess
    results = list(gate.results.quality.values())
    if not gate.gated or gate.results.errors or not results or len(results) < len(sess.suite.corpus) \
            or any(not r.passed for r in results):
        return (), None  # crashed, incomplete or already failing: the verdict is decided without it
    if not gate.baseline_commit:
        return ("holdout: the baseline snapshot records no commit, so the baseline code cannot be rebuilt",), None
    try:
        with sess.clock.span("holdout"):
            report = run(sess, gate.results, gate.baseline_commit)
    except Exception as exc:  # noqa: BLE001 - a holdout that cannot run must not let a candidate through
        return (f"holdout: could not run: {_one_line(exc)}",), None
    try:
        write_json_atomic(sess.run_dir() / "holdout.json", report.to_dict(), indent=1, default=str)
    except OSError:
        pass  # the verdict does not depend on the log
    seeds = ",".join(str(it.seed) for it in report.items)
    state = report.note or (f"{len(report.failures)} failed" if report.failures else "ok")
    return report.failures, (f"ditar: holdout {len(report.items)} fresh seed(s) [{seeds}] class {sess.judged_class}: "
                             f"{state} ({report.seconds:.2f}s)")

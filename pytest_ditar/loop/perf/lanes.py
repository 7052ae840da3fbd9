"""The lane policy: what a perf lane is timed against, how it grows, and what its verdict is made of.

One home for the rules that turn a lane's rounds into its evidence (the perf fixture is a few
lines over `run`): the champion's worker and its twin (a second build of the champion's commit,
timed in the same randomized rounds: core.sequential says why), the sequential plan and its
threshold (`perf.min_speedup`), the integrity checks that void the timing (a failed audit, a
caching candidate, champion drift, interference from the untimed side: core.interference) and
GPU exclusivity. runtime.lanes times; core.sequential and core.stats give the statistic;
loop.perf.lanechecks the total time's and the tail's findings; core.laneoutcome.compose alone makes
the lane's outcome from all of it.
"""
from __future__ import annotations

import contextlib
import os
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from pytest_ditar.config.project import PerfConfig
from pytest_ditar.config.suite import Lane
from pytest_ditar.core import (
    anchor,
    devstate,
    effect,
    interference,
    laneoutcome,
    meantime,
    probes,
    sequential as seq,
)
from pytest_ditar.core.errors import CandidateError, ReferenceFailure
from pytest_ditar.core.laneoutcome import LaneEvidence
from pytest_ditar.core.requests import RequestStream
from pytest_ditar.hardware import exclusivity
from pytest_ditar.loop.perf import lanechecks as checks, lanekinds
from pytest_ditar.loop.run import champion, holdout
from pytest_ditar.loop.run.results import RunResults, corpus_through
from pytest_ditar.loop.run.session import DitarSession
from pytest_ditar.runtime import proctree, zygote
from pytest_ditar.runtime.calls import new_stream, output_audit
from pytest_ditar.runtime.group import rank_device
from pytest_ditar.runtime.lanes import LaneMeasurement, LaneResult, measure_lane
from pytest_ditar.runtime.lanesetup import Benchmark, Sequential
from pytest_ditar.runtime.worker import CandidateWorker
from pytest_ditar.store.records import LaneRecord
from pytest_ditar.vcs import queries

Worker = CandidateWorker  # a side's worker (runtime.group.GroupWorker, one for a multi-GPU lane, is one too)

TWIN_PHASE = "perf.build_twin"  # the clock's name for the wait on the twin's build
INTERFERENCE_ALPHA = 0.001  # a reference slowed right after the candidate: judged at this level


def plan_for(lane: Lane, perf: PerfConfig) -> Sequential:
    """The objective lane's sequential plan: the suite's rounds first, doubling up to
    perf.max_rounds, within perf.lane_budget_s; a KEEP must beat 1 + perf.min_speedup."""
    top = max(perf.max_rounds, lane.repeats)
    # a first look that hits a 10% share of slow calls at least once (core.meantime), where affordable
    first = max(lane.repeats, tail) if (tail := meantime.tail_rounds(perf.alpha)) <= top else lane.repeats
    the_plan = seq.plan(first, top, perf.alpha)
    return Sequential(the_plan, float(perf.min_speedup), perf.lane_budget_s, tail=perf.guard_tolerance,
                      n_boot=perf.n_boot, calls=meantime.TAIL_CALLS)


def guard_plan_for(lane: Lane, perf: PerfConfig, tolerance: float) -> Sequential:
    """A guard lane's plan (every lane of `--ditar-guard`): the suite's rounds first, the same budget,
    grown until a slowdown beyond `tolerance` is shown or ruled out (core.guard). Its first look
    is not sized for a tail: a guard lane's median win must show its total only to pass as a win
    (core.laneoutcome's total rule), and a loss it cannot show passes as unresolved."""
    the_plan = seq.plan(lane.repeats, max(perf.max_rounds, lane.repeats), perf.alpha)
    return replace(plan_for(lane, perf), plan=the_plan, guard=tolerance, tail=None, calls=0)


def judge(m: LaneMeasurement, champion_samples: list[float], *, objective: bool, source: str,
          noise: Mapping[str, object] | None, perf_cfg: PerfConfig, stored_samples: list[float] | None = None,
          sequential: Sequential | None = None, kept_anchor: float | None = None,
          stored_host_s: list[float] | None = None,
          guard_run: bool = False, device: exclusivity.ExclusivityReport | None = None) -> LaneResult:
    """Gather a lane's evidence and have core.laneoutcome.compose make its verdict (the one place a
    lane's outcome is made). A failed audit or a caching candidate voids the timing (REJECTED); a
    win a champion's drift against the anchor could explain (`kept_anchor`: its time over the
    anchor's when kept, core.anchor), a reference slowed by the untimed side's work, or a GPU
    another process used (`device`, the lane's exclusivity watch) makes the lane UNSTABLE, its
    `cause` said. A lane grown by `sequential` is decided by its looks (core.sequential), a guard
    lane grown by its own by theirs (core.guard; `guard_run`: `--ditar-guard`'s, failing only a
    slowdown shown); other lanes by core.stats against the baseline's A/A floor."""
    paired = source == "interleaved" and len(champion_samples) == len(m.samples)
    grown = paired and sequential is not None and bool(m.looks)
    # core.effect: the one threshold rule, dit-ar compare's too (a sequential plan's is perf.min_speedup)
    min_effect = effect.threshold(noise, paired=paired, grown=grown,
                                  min_speedup=sequential.threshold if grown and sequential else perf_cfg.min_speedup,
                                  noise_k=perf_cfg.noise_k)
    confirm = (m.probe or {}).get("confirm") or {}
    cached = probes.caching(confirm.get("repeat_s", ()), confirm.get("unique_s", ()), min_effect) if confirm else None
    ev = LaneEvidence(
        m.lane, objective, m.peak_reserved_gib, audit_failure=m.audit_failure, caching=cached,
        champion_rounds=len(champion_samples), candidate_rounds=len(m.samples),
        foreign=tuple(m.foreign()) if source == "interleaved" else (), pids=dict(m.pids),
        shared_device=device.message() if device is not None and not device.ok else None)
    comparison: dict[str, object] = {}
    if laneoutcome.voided(ev) is None:
        stat, comparison = checks.statistic(m, champion_samples, objective=objective, source=source,
                                            perf_cfg=perf_cfg, sequential=sequential if grown else None,
                                            guard_run=guard_run, paired=paired, min_effect=min_effect)
        drift = None
        if source == "interleaved" and m.anchor_samples and kept_anchor is not None:
            drift = anchor.drift(m.champion_samples, m.anchor_samples, kept_anchor, alpha=perf_cfg.alpha,
                                 minimum=perf_cfg.drift_tolerance, n_boot=perf_cfg.n_boot)
        net = checks.net(m)
        comparison.update(checks.information(m, stored_samples, stored_host_s, kept_anchor, drift, net))
        ev = replace(
            ev, statistic=stat, threshold=min_effect, strict=guard_run, drift=drift, net=net,
            total=checks.total(champion_samples, m.samples, perf_cfg) if paired else None,
            tail=checks.tail(m, sequential.calls, stat.ci_low, perf_cfg) if grown and sequential else None,
            throttled=devstate.throttle_note(m.rounds_state),  # voided rounds the verdict names, whatever it is
            slowed=interference.slowed_side(m.sides(), m.orders, min_effect, INTERFERENCE_ALPHA)
            if source == "interleaved" else None, tolerance=perf_cfg.guard_tolerance)
    if device is not None:
        comparison["exclusivity"] = device.message()
    return LaneResult(m, laneoutcome.compose(ev), source, min_effect, comparison=comparison)


def verdict_story(res: LaneResult, champion_samples: list[float]) -> dict[str, object]:
    """What pytest-benchmark's JSON should say beside its own samples: the verdict, the rounds it
    was judged on (the judge's clock) and what pytest-benchmark's `stats` hold instead."""
    m, oc = res.measurement, res.outcome
    return {"clock": "judge", "verdict": oc.verdict, "speedup": oc.speedup, "ci95": [oc.ci_low, oc.ci_high],
            "threshold": res.min_effect, "rounds_judged": len(m.samples),
            "candidate_median_s": statistics.median(m.samples) if m.samples else None,
            "champion_median_s": statistics.median(champion_samples) if champion_samples else None,
            "champion_source": res.champion_source,
            "scope": "stats: pytest-benchmark's own timer over the candidate's first rounds alone; "
                     "the verdict: the judge's clock over rounds_judged paired rounds (summary.json)"}


class LaneRunner:
    """Times one lane of a session for the candidate against the champion (and its twin) and
    judges it. `gated` says whether this run decides (the caching probe, the candidate's class
    claim for the audit); `progress` gets the rounds done."""

    def __init__(self, sess: DitarSession, results: RunResults, gated: Callable[[], bool],
                 claimed_class: Callable[[], str | None], guard: Callable[[], float | None] = lambda: None):
        self.sess = sess
        self.results = results  # the run's (loop.run.results): lanes, errors and the reference's refusal go there
        self.gated = gated
        self.claimed_class = claimed_class
        self.guard = guard  # `--ditar-guard`'s tolerance, None outside a guard
        self._champion: dict[int, Worker | None] = {}  # ranks -> the champion's worker (a group for ranks > 1)
        self._twin: dict[int, Worker | None] = {}
        self._anchor: Worker | None = None
        self._stream: RequestStream | None = None
        self._replayed: set[str] = set()  # the references that answered the corpus (results.corpus_through)

    def champion(self, ranks: int = 1) -> Worker | None:
        """The champion's own code, written from its commit's blobs and built in its worker (its
        group of `ranks` for a multi-GPU lane); None where the lanes interleave with nothing
        (interleaving off, or HEAD is the champion). A gated run sent its build when the guards
        passed, so this mostly waits for it. One that cannot be built is the judge's failure
        (ReferenceFailure), never a comparison with its stored samples."""
        if ranks not in self._champion:
            self._champion[ranks] = None
            st = queries.state(self.sess.cfg.root)
            # the working tree is the candidate: edited (`dit-ar try`), it differs from HEAD even
            # where HEAD is the champion, so the champion is timed beside it
            head = None if st.dirty_paths or self.guard() is not None else st.head
            commit = champion.commit(self.sess)
            try:  # booked as perf.build_champion
                self._champion[ranks] = champion.build(self.sess, commit, head, ranks=ranks)
            except Exception as exc:  # noqa: BLE001 - whatever stopped it, the run cannot judge
                if exc in self.results.errors:  # the candidate's doing (its code edited the champion's): a CRASH
                    raise
                raise self._reference_failed(f"champion {str(commit)[:7]}", "could not be built", exc) from exc
        return self._champion[ranks]

    def _reference_failed(self, who: str, what: str, exc: BaseException) -> ReferenceFailure:
        """The run's refusal for a reference that failed: named, with its error; never the candidate's."""
        said = str(exc).replace("candidate raised", "its code raised", 1)  # the reference's code, not the candidate's
        err = ReferenceFailure(f"{who} {what} in its role: {said if isinstance(exc, CandidateError) else repr(exc)}")
        self.results.refuse_reference(str(err))
        return err

    def anchor(self) -> Worker | None:
        """The anchor (core.anchor): the baseline commit's code, written from its git objects and built
        in the worker the holdout's reference uses (its outputs are never compared, only its time);
        None where the champion is the baseline's code (it is then its own anchor) or no baseline
        commit is recorded."""
        if self._anchor is None:
            base, commit = champion.baseline_commit(self.sess), champion.commit(self.sess)
            if base and commit and base != commit:
                try:
                    self._anchor = holdout.baseline_pipeline(self.sess, base)
                except (CandidateError, OSError) as exc:
                    raise self._reference_failed(f"the anchor (baseline {base[:7]})", "could not be built",
                                                 exc) from exc
        return self._anchor

    def twin(self, ranks: int = 1) -> Worker | None:
        """The champion's second build (perf.twin), sent beside the others when the guards passed."""
        if self._twin.get(ranks) is None and self.sess.cfg.perf.twin:
            commit = champion.commit(self.sess)
            if commit:
                self._twin[ranks] = self.sess.build_at_commit(commit, TWIN_PHASE, ranks=ranks, role="twin")
        return self._twin.get(ranks)

    def requests(self) -> RequestStream:
        """One stream of timed requests per run, keyed by the session's secret."""
        if self._stream is None:
            self._stream = new_stream(self.sess.suite, bytes.fromhex(self.sess.request_secret))
        return self._stream

    def run(self, lane: Lane, benchmark: Benchmark | None = None,
            progress: Callable[[int], None] | None = None) -> LaneResult:
        kind = lanekinds.of(lane)
        if kind is not None:  # a lane that measures something else than time: its kind measures and judges it
            return self._run_kind(kind, lane)
        sess = self.sess
        # A guard asks every lane, the objective one included, "slower beyond the tolerance?": the
        # objective lane's sequential rule asks "faster?" and stops once that is ruled out, too soon
        # to show a slowdown (a 30% one went unnamed on CI after 12 rounds).
        tolerance = self.guard()
        objective = lane.name == sess.cfg.objective_lane and tolerance is None
        perf_cfg = self._perf()
        holdout.settle(sess)  # the holdout's reference may run on the champion's worker: done before any lane
        sides = _Sides()
        try:
            self._references(lane, objective, perf_cfg, sides)
            m, watch = self._measure(lane, sides, benchmark, progress, objective)
        except CandidateError as exc:
            failure = self._reference_failure(exc, sides)
            if failure is not None:
                raise failure from exc
            raise
        sess.clock.timed(m.timed_s)
        stored = champion.stored_lanes(sess).get(lane.name)
        stored_samples = stored.samples if stored is not None else []
        champ_samples = m.champion_samples if sides.champion is not None else stored_samples
        base = champion.baseline_lanes(sess).get(lane.name)
        # a shared GPU (any of a group's) makes the lane UNSTABLE, naming the PID
        res = judge(m, champ_samples, objective=objective, source="stored" if sides.champion is None else "interleaved",
                    noise=base.noise if base is not None else None, perf_cfg=perf_cfg, stored_samples=stored_samples,
                    sequential=sides.sequential if objective else None,
                    kept_anchor=self._kept_anchor(sides, objective, stored),
                    stored_host_s=stored.host_s if stored is not None else [],
                    guard_run=tolerance is not None, device=exclusivity.combine([wt.report for wt in watch]))
        res = champion.with_flops(sess, self.results, lane, res)
        sess.check_worktrees()  # the champion's and baseline's worktrees must still be their commits
        if benchmark is not None and not getattr(benchmark, "disabled", False):
            benchmark.extra_info.update(verdict_story(res, champ_samples))  # benchmark.json tells the verdict's story
        self.results.add_lane(res)
        return res

    def _perf(self) -> PerfConfig:
        """The run's perf settings, a guard's tolerance in place of the config's."""
        tolerance = self.guard()
        perf = self.sess.cfg.perf
        return perf if tolerance is None else replace(perf, guard_tolerance=tolerance)

    def _references(self, lane: Lane, objective: bool, perf_cfg: PerfConfig, sides: _Sides) -> None:
        """The lane's sides, filled into `sides` as they are built (a failure names the one that failed):
        the candidate, the champion and, for the objective lane, its twin, its plan and the anchor."""
        ranks = lane.gpus  # a multi-GPU lane: one group of ranks a side (runtime.group)
        sess = self.sess
        sides.candidate = sess.get_candidate(ranks)
        sides.champion = self.champion(ranks)
        if objective and sides.champion is not None:
            sides.sequential = plan_for(lane, sess.cfg.perf)
            try:
                sides.twin = self.twin(ranks)
            except (CandidateError, OSError) as exc:
                raise self._reference_failed("the champion's twin", "could not be built", exc) from exc
        elif sides.champion is not None:  # a guard lane: grown until a slowdown beyond the tolerance is shown, or not
            sides.sequential = guard_plan_for(lane, sess.cfg.perf, perf_cfg.guard_tolerance)
        if ranks > 1:
            return
        for w in (sides.candidate, sides.champion, sides.twin):  # the same history of requests on every side
            if w is not None:
                corpus_through(sess, self.results, w, self._replayed)
        if objective and sides.champion is not None:
            sides.anchor = self.anchor() or sides.champion

    def _reference_failure(self, exc: CandidateError, sides: _Sides) -> ReferenceFailure | None:
        """A reference's own failure while timed is the judge's: its ReferenceFailure, naming it. Any
        other CandidateError is the candidate's: recorded as its error (None)."""
        named = ((sides.champion, "the champion"), (sides.twin, "the champion's twin"),
                 (self._anchor, "the anchor (the baseline's code)"))
        failed = [who for w, who in named if w is not None and getattr(w, "error", None) is exc]
        if failed:
            return self._reference_failed(failed[0], "failed while timed", exc)
        if exc not in self.results.errors:
            self.results.add_error(exc)
        return None

    def _kept_anchor(self, sides: _Sides, objective: bool, stored: LaneRecord | None) -> float | None:
        """The champion's time over the anchor's when it was kept (core.anchor), for the objective lane."""
        if sides.champion is None or not objective:
            return None
        if self._anchor is None:  # the champion is the baseline's code: its own anchor (runtime.lanes), ratio 1
            return 1.0
        if stored is not None and stored.anchor_samples:
            return anchor.ratio(stored.samples, stored.anchor_samples)
        return None

    def _run_kind(self, kind: lanekinds.LaneKind, lane: Lane) -> LaneResult:
        """A lane of another kind (loop.perf.lanekinds): its measure against the champion's worker, its judge."""
        sess = self.sess
        holdout.settle(sess)  # as for a timed lane: the holdout's reference may run on the champion's worker
        perf_cfg = self._perf()
        champ = None
        try:
            cand = sess.get_candidate()
            champ = self.champion()
            with sess.clock.span("perf.lanes"):
                m = kind.measure(cand, sess.suite, lane, champion=champ, timeout_s=sess.cfg.item_timeout_s,
                                 stream=self.requests())
        except CandidateError as exc:
            if champ is not None and getattr(champ, "error", None) is exc:
                raise self._reference_failed("the champion", "failed while measured", exc) from exc
            if exc not in self.results.errors:
                self.results.add_error(exc)
            raise
        res = kind.judge(m, perf_cfg)
        sess.check_worktrees()
        self.results.add_lane(res)
        return res

    def _measure(self, lane: Lane, sides: _Sides, benchmark: Benchmark | None, progress: Callable[[int], None] | None,
                 objective: bool) -> tuple[LaneMeasurement, list[exclusivity.Watch]]:
        """The lane's rounds under the GPU exclusivity watch of every GPU it runs on (their
        watches come back with them)."""
        sess = self.sess
        assert sides.candidate is not None  # _references built it first
        claimed_class = self.claimed_class() or sess.judged_class
        device = sess.resolved_device()
        ranks = lane.gpus
        devices = [rank_device(device, r) for r in range(ranks)] if ranks > 1 else [device]
        # the span outermost: the watches' last look, on their way out, is the lane's time too
        with sess.clock.span("perf.lanes"), contextlib.ExitStack() as stack:
            # the judge's processes, and a kept zygote's: its workers are not the judge's
            # descendants, but it serves this judge alone
            ours = [os.getpid(), *(p for p in (zygote.running_pid(),) if p is not None)]
            watch = [stack.enter_context(exclusivity.Watch(d, allowed=lambda: proctree.descendants(ours)))
                     for d in devices]
            m = measure_lane(sides.candidate, sess.suite, lane, champion=sides.champion, twin=sides.twin,
                             benchmark=benchmark, timeout_s=sess.cfg.item_timeout_s, progress=progress,
                             pin_cpu=sess.cfg.perf.pin_cpu, stream=self.requests(),
                             audit=output_audit(claimed_class, sess.cfg.thresholds_for(claimed_class)),
                             probe=objective and self.gated(), sequential=sides.sequential, anchor=sides.anchor,
                             anchor_rounds=anchor.ROUNDS, anchor_budget_s=anchor.BUDGET_S, empty=objective)
            _note_phases(sess, m)
        return m, watch


@dataclass
class _Sides:
    """A timed lane's workers as they are built (the candidate, the champion, its twin, the anchor) and
    its plan: what is filled in when a build fails tells whose failure it was."""

    candidate: Worker | None = None
    champion: Worker | None = None
    twin: Worker | None = None
    anchor: Worker | None = None
    sequential: Sequential | None = None


def _note_phases(sess: DitarSession, m: LaneMeasurement) -> None:
    """Where the lane's time went, on the run's clock."""
    sess.clock.note("perf.audit", m.audit_s)
    sess.clock.note("perf.probe", m.probe.get("seconds", 0.0))
    sess.clock.note("perf.round_trips", sum(m.overhead_s))
    sess.clock.note("perf.host_checks", sum(m.host_s))
    sess.clock.note("perf.warmup", sum(m.warmup_s))  # where a lazy compile shows
    sess.clock.note("perf.warmup_champion", sum(m.champion_warmup_s) + sum(m.twin_warmup_s)
                    + sum(m.anchor_warmup_s))
    sess.clock.note("perf.anchor", sum(m.anchor_samples))  # the anchor's timed calls (core.anchor)
    sess.clock.note("perf.confirm", sum(m.confirm_s))  # the candidate's confirming calls (core.meantime)
    sess.clock.note("perf.empty_calls", sum(sum(v) for v in m.empty_s.values()))

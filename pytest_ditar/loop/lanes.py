"""The lane policy: what a perf lane is timed against, how it grows, and how it is judged.

One home for the rules that turn a lane's rounds into its verdict (the perf fixture is a few
lines over `run`): the champion's worker and its twin (a second build of the champion's commit,
timed in the same randomized rounds: core.sequential says why), the sequential plan and its
threshold (`perf.min_speedup`), the integrity checks that void the timing (a failed audit, a
caching candidate, champion drift, interference from the untimed side: core.interference) and
GPU exclusivity. runtime.lanes times; core.sequential and core.stats decide; loop.lanechecks holds
the checks a verdict passes after them (interference, total time, the tail's calls, the anchor).
"""
from __future__ import annotations

import contextlib
import os
import statistics
from dataclasses import asdict, replace
from typing import Any, Callable

from pytest_ditar.core import (
    anchor,
    devstate,
    effect,
    guard,
    interference,
    meantime,
    probes,
    sequential as seq,
    stats,
)
from pytest_ditar.core.decision import LaneOutcome
from pytest_ditar.core.errors import CandidateError, ReferenceFailure
from pytest_ditar.core.vocabulary import INTERFERENCE, SHARED_DEVICE
from pytest_ditar.hardware import exclusivity
from pytest_ditar.loop import champion, holdout, lanechecks as checks, lanekinds
from pytest_ditar.runtime import proctree, zygote
from pytest_ditar.runtime.calls import new_stream, output_audit
from pytest_ditar.runtime.group import rank_device
from pytest_ditar.runtime.lanes import LaneMeasurement, LaneResult, Sequential, measure_lane
from pytest_ditar.vcs import queries

TWIN_PHASE = "perf.build_twin"  # the clock's name for the wait on the twin's build
INTERFERENCE_ALPHA = 0.001  # a reference slowed right after the candidate: judged at this level


def plan_for(lane: Any, perf: Any) -> Sequential:
    """The objective lane's sequential plan: the suite's rounds first, doubling up to
    perf.max_rounds, within perf.lane_budget_s; a KEEP must beat 1 + perf.min_speedup."""
    top = max(perf.max_rounds, lane.repeats)
    # a first look that hits a 10% share of slow calls at least once (core.meantime), where affordable
    first = max(lane.repeats, tail) if (tail := meantime.tail_rounds(perf.alpha)) <= top else lane.repeats
    the_plan = seq.plan(first, top, perf.alpha)
    return Sequential(the_plan, float(perf.min_speedup), perf.lane_budget_s, tail=perf.guard_tolerance,
                      n_boot=perf.n_boot, calls=meantime.TAIL_CALLS)


def guard_plan_for(lane: Any, perf: Any, tolerance: float) -> Sequential:
    """A guard lane's plan (every lane of `--ditar-guard`): the suite's rounds first, the same budget,
    grown until a slowdown beyond `tolerance` is shown or ruled out (core.guard). Its first look
    is not sized for a tail: a guard lane's median win must show its total only to pass as a win
    (loop.lanes.checks.mean_checked), and a loss it cannot show passes as unresolved."""
    the_plan = seq.plan(lane.repeats, max(perf.max_rounds, lane.repeats), perf.alpha)
    return replace(plan_for(lane, perf), plan=the_plan, guard=tolerance, tail=None, calls=0)


def judge(m: LaneMeasurement, champion_samples: list[float], *, objective: bool, source: str,
          noise: dict[str, Any] | None, perf_cfg: Any, stored_samples: list[float] | None = None,
          sequential: Sequential | None = None, kept_anchor: float | None = None,
          stored_host_s: list[float] | None = None,
          guard_run: bool = False, device: exclusivity.ExclusivityReport | None = None) -> LaneResult:
    """Turn a lane's evidence into its verdict: the one place a lane's outcome is made. A failed
    audit or a caching candidate voids the timing (REJECTED); a win a champion's drift against the
    anchor could explain (`kept_anchor`: its time over the anchor's when kept, core.anchor), a
    reference slowed by the untimed side's work, or a GPU another process used (`device`, the lane's
    exclusivity watch) makes the lane UNSTABLE, its `cause` said.
    A lane grown by `sequential` is decided by its looks (core.sequential), a guard lane grown by its
    own by theirs (core.guard; `guard_run`: `--ditar-guard`'s, failing only a slowdown shown); other
    lanes by core.stats against the baseline's A/A floor."""
    res = _judge(m, champion_samples, objective=objective, source=source, noise=noise, perf_cfg=perf_cfg,
                 stored_samples=stored_samples, sequential=sequential, kept_anchor=kept_anchor,
                 stored_host_s=stored_host_s,
                 guard_run=guard_run)
    if device is None:
        return res
    comparison = {**res.comparison, "exclusivity": device.message()}
    if device.ok:
        return replace(res, comparison=comparison)
    shared = replace(res.outcome, verdict=stats.UNSTABLE, reason=device.message(), cause=SHARED_DEVICE)
    return replace(res, outcome=shared, comparison=comparison)


def _judge(m: LaneMeasurement, champion_samples: list[float], *, objective: bool, source: str,
           noise: dict[str, Any] | None, perf_cfg: Any, stored_samples: list[float] | None,
           sequential: Sequential | None, kept_anchor: float | None, stored_host_s: list[float] | None,
           guard_run: bool) -> LaneResult:
    paired = source == "interleaved" and len(champion_samples) == len(m.samples)
    grown = paired and sequential is not None and bool(m.looks)
    # core.effect: the one threshold rule, dit-ar compare's too (a sequential plan's is perf.min_speedup)
    min_effect = effect.threshold(noise, paired=paired, grown=grown,
                                  min_speedup=sequential.threshold if grown and sequential else perf_cfg.min_speedup,
                                  noise_k=perf_cfg.noise_k)
    peak = m.peak_reserved_gib

    def outcome(verdict: str, reason: str, cause: str | None = None) -> LaneResult:
        return LaneResult(m, LaneOutcome(m.lane, objective, verdict, None, None, None, reason, peak, cause=cause),
                          source, min_effect)

    if m.audit_failure:
        return outcome("REJECTED", m.audit_failure)
    confirm = (m.probe or {}).get("confirm") or {}
    cached = probes.caching(confirm.get("repeat_s", ()), confirm.get("unique_s", ()), min_effect) if confirm else None
    if cached:
        return outcome("REJECTED", cached)
    if len(champion_samples) < 3 or len(m.samples) < 3:
        return outcome("MISSING", "no champion samples to compare with")
    slowed = None
    if source == "interleaved":
        busy = m.foreign()
        if len(busy) >= interference.REPEATED:
            return outcome("UNSTABLE", interference.describe(busy, m.pids), INTERFERENCE)
        slowed = interference.slowed_side(m.sides(), m.orders, min_effect, INTERFERENCE_ALPHA)
    res = _timed(m, champion_samples, objective=objective, source=source, perf_cfg=perf_cfg,
                 stored_samples=stored_samples, sequential=sequential, kept_anchor=kept_anchor,
                 stored_host_s=stored_host_s,
                 guard_run=guard_run, paired=paired, grown=grown, min_effect=min_effect)
    hot = devstate.throttle_note(m.rounds_state)  # voided rounds the verdict names, whatever it is
    if hot:
        res = replace(res, outcome=replace(res.outcome, reason=f"{res.outcome.reason}; {hot}"))
    if slowed is None:
        return res
    return replace(res, outcome=checks.interference_checked(res.outcome, slowed, perf_cfg.guard_tolerance))


def _timed(m: LaneMeasurement, champion_samples: list[float], *, objective: bool, source: str, perf_cfg: Any,
           stored_samples: list[float] | None, sequential: Sequential | None, kept_anchor: float | None,
           stored_host_s: list[float] | None, guard_run: bool, paired: bool, grown: bool,
           min_effect: float) -> LaneResult:
    """The lane's verdict from its timings (the checks that void them passed)."""
    peak = m.peak_reserved_gib
    drift = None
    if source == "interleaved" and m.anchor_samples and kept_anchor is not None:
        drift = anchor.drift(m.champion_samples, m.anchor_samples, kept_anchor, alpha=perf_cfg.alpha,
                             minimum=perf_cfg.drift_tolerance, n_boot=perf_cfg.n_boot)
    if grown and sequential is not None:
        looks = [seq.Look(**lk) for lk in m.looks]
        c = seq.verdict(m.sides(), min_effect, looks, sequential.plan, undecided=m.undecided,
                        max_cv=perf_cfg.max_cv, n_boot=perf_cfg.n_boot)
        refs = "champion and twin in the same randomized rounds" if m.twin_samples else "champion, no twin"
        reason = f"{c.why} [{source} paired {refs}, threshold {min_effect * 100:.1f}% = min_speedup]"
        comparison = asdict(c)
        if m.twin_samples:
            twin = stats.compare(m.champion_samples, m.twin_samples, min_effect=0.0, max_cv=1e9,
                                 n_boot=perf_cfg.n_boot, paired=True)
            comparison["twin_vs_champion"] = {"speedup": twin.speedup, "ci_low": twin.ci_low, "ci_high": twin.ci_high}
        oc = LaneOutcome(m.lane, objective, c.verdict, c.speedup, c.ci_low, c.ci_high, reason, peak,
                         threshold=min_effect)
        oc = checks.tail_checked(checks.mean_checked(oc, champion_samples, m.samples, perf_cfg, strict=guard_run), m,
                           sequential.calls, perf_cfg)
        comparison.update(checks.information(m, stored_samples, stored_host_s, kept_anchor, drift))
        return LaneResult(m, checks.net_named(checks.drift_checked(oc, drift), comparison), source, min_effect,
                          comparison=comparison)
    if paired and not objective and m.looks:  # a guard lane grown by core.guard's looks
        oc = _guard_outcome(m, [guard.Look(**lk) for lk in m.looks], perf_cfg.guard_tolerance, source, peak,
                            shown_only=guard_run)
        comparison = dict(m.looks[-1])
    else:
        if objective:
            c = stats.compare(champion_samples, m.samples, min_effect=min_effect, alpha=perf_cfg.alpha,
                              max_cv=perf_cfg.max_cv, n_boot=perf_cfg.n_boot, paired=paired)
        else:
            c = stats.regression_check(champion_samples, m.samples, perf_cfg.guard_tolerance,
                                       n_boot=perf_cfg.n_boot, paired=paired)
        # c.why, not c.reason: the verdict line already carries the speedup and its CI
        reason = f"{c.why} [{source}{' paired' if paired else ''} champion, min effect {min_effect * 100:.1f}%]"
        oc = LaneOutcome(m.lane, objective, c.verdict, c.speedup, c.ci_low, c.ci_high, reason, peak,
                         threshold=min_effect)
        comparison = asdict(c)
    if paired:
        oc = checks.mean_checked(oc, champion_samples, m.samples, perf_cfg, strict=guard_run)
    comparison.update(checks.information(m, stored_samples, stored_host_s, kept_anchor, drift))
    oc = checks.drift_checked(replace(oc, threshold=min_effect), drift)
    return LaneResult(m, checks.net_named(oc, comparison), source, min_effect, comparison=comparison)


def _guard_outcome(m: LaneMeasurement, looks: list[guard.Look], tolerance: float, source: str, peak: float | None,
                   *, shown_only: bool) -> LaneOutcome:
    """A guard lane grown by core.guard's looks is what its last look says: the rule that stopped
    the rounds is the rule that judges them (and what its record keeps)."""
    last = looks[-1]
    slower = guard.counts_as_slower(last, tolerance, shown_only=shown_only)
    verdict = stats.REGRESSED if slower else stats.OK
    why = (f"within tolerance {tolerance * 100:.1f}%" if not slower
           else f"slower beyond tolerance {tolerance * 100:.1f}%" if last.decision == guard.SLOWER
           else f"slower than 1-{tolerance * 100:.1f}% by its median, not ruled out")
    reason = (f"{why}{guard.growth_note(looks, m.undecided, tolerance)} [{source} paired champion, "
              f"exact CI at {(1 - last.alpha) * 100:.2f}%]")
    return LaneOutcome(m.lane, False, verdict, last.speedup, last.ci_low, last.ci_high, reason, peak)


def verdict_story(res: LaneResult, champion_samples: list[float]) -> dict[str, Any]:
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

    def __init__(self, sess: Any, gated: Callable[[], bool], claimed_class: Callable[[], str | None],
                 guard: Callable[[], float | None] = lambda: None):
        self.sess = sess
        self.gated = gated
        self.claimed_class = claimed_class
        self.guard = guard  # `--ditar-guard`'s tolerance, None outside a guard
        self._champion: dict[int, Any] = {}  # ranks -> the champion's worker (a group for ranks > 1)
        self._twin: dict[int, Any] = {}
        self._anchor: Any = None
        self._stream: Any = None

    def champion(self, ranks: int = 1) -> Any:
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
            head = None if st.dirty_paths or self.sess.beside_champion else st.head
            commit = champion.commit(self.sess)
            try:  # booked as perf.build_champion
                self._champion[ranks] = champion.build(self.sess, commit, head, ranks=ranks)
            except Exception as exc:  # noqa: BLE001 - whatever stopped it, the run cannot judge
                if exc in self.sess.errors:  # the candidate's doing (its code edited the champion's): a CRASH
                    raise
                raise self._reference_failed(f"champion {str(commit)[:7]}", "could not be built", exc) from exc
        return self._champion[ranks]

    def _reference_failed(self, who: str, what: str, exc: BaseException) -> ReferenceFailure:
        """The run's refusal for a reference that failed: named, with its error; never the candidate's."""
        said = str(exc).replace("candidate raised", "its code raised", 1)  # the reference's code, not the candidate's
        err = ReferenceFailure(f"{who} {what} in its role: {said if isinstance(exc, CandidateError) else repr(exc)}")
        if self.sess.reference_error is None:
            self.sess.refuse_reference(str(err))
        return err

    def anchor(self) -> Any:
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

    def twin(self, ranks: int = 1) -> Any:
        """The champion's second build (perf.twin), sent beside the others when the guards passed."""
        if self._twin.get(ranks) is None and self.sess.cfg.perf.twin:
            commit = champion.commit(self.sess)
            if commit:
                self._twin[ranks] = self.sess.build_twin(commit, TWIN_PHASE, ranks=ranks)
        return self._twin.get(ranks)

    def requests(self) -> Any:
        """One stream of timed requests per run, keyed by the session's secret."""
        if self._stream is None:
            self._stream = new_stream(self.sess.suite, bytes.fromhex(self.sess.request_secret))
        return self._stream

    def run(self, lane: Any, benchmark: Any = None, progress: Callable[[int], None] | None = None) -> LaneResult:
        sess = self.sess
        kind = lanekinds.of(lane)
        if kind is not None:  # a lane that measures something else than time: its kind measures and judges it
            return self._run_kind(kind, lane)
        ranks = getattr(lane, "gpus", 1)  # a multi-GPU lane: one group of ranks a side (runtime.group)
        # A guard asks every lane, the objective one included, "slower beyond the tolerance?": the
        # objective lane's sequential rule asks "faster?" and stops once that is ruled out, too soon
        # to show a slowdown (a 30% one went unnamed on CI after 12 rounds).
        tolerance = self.guard()
        objective = lane.name == sess.cfg.objective_lane and tolerance is None
        perf_cfg = sess.cfg.perf if tolerance is None else replace(sess.cfg.perf, guard_tolerance=tolerance)
        sequential = twin = None
        holdout.settle(sess)  # the holdout's reference may run on the champion's worker: done before any lane
        champ = None
        try:
            cand = sess.get_candidate(ranks)
            champ = self.champion(ranks)
            if objective and champ is not None:
                sequential = plan_for(lane, sess.cfg.perf)
                try:
                    twin = self.twin(ranks)
                except (CandidateError, OSError) as exc:
                    raise self._reference_failed("the champion's twin", "could not be built", exc) from exc
            elif champ is not None:  # a guard lane: grown until a slowdown beyond the tolerance is shown or ruled out
                sequential = guard_plan_for(lane, sess.cfg.perf, perf_cfg.guard_tolerance)
            for w in (cand, champ, twin) if ranks == 1 else ():  # the same history of requests on every side
                if w is not None:
                    sess.corpus_through(w)
            anchor_w = (self.anchor() or champ) if objective and champ is not None and ranks == 1 else None
            m, watch = self._measure(lane, cand, champ, twin, sequential, benchmark, progress, objective, anchor_w)
        except CandidateError as exc:
            refs = (champ, twin, self._anchor)
            failed = next((w for w in refs if w is not None and getattr(w, "error", None) is exc), None)
            if failed is not None:  # the reference's own failure while timed: the judge's, not the candidate's
                who = {id(twin): "the champion's twin", id(self._anchor): "the anchor (the baseline's code)"}.get(
                    id(failed), "the champion")
                raise self._reference_failed(who, "failed while timed", exc) from exc
            if exc not in sess.errors:
                sess.errors.append(exc)
            raise
        sess.clock.timed(m.timed_s)
        stored = champion.stored_lanes(sess).get(lane.name)
        stored_samples = stored.samples if stored is not None else []
        if champ is not None:
            source, champ_samples = "interleaved", m.champion_samples
        else:
            source, champ_samples = "stored", stored_samples
        base = champion.baseline_lanes(sess).get(lane.name)
        noise = base.noise if base is not None else None
        kept_anchor = None
        if champ is not None and objective:
            if self._anchor is None:  # the champion is the baseline's code: its own anchor (runtime.lanes), ratio 1
                kept_anchor = 1.0
            elif stored is not None and stored.anchor_samples:
                kept_anchor = anchor.ratio(stored.samples, stored.anchor_samples)
        # a shared GPU (any of a group's) makes the lane UNSTABLE, naming the PID
        res = judge(m, champ_samples, objective=objective, source=source, noise=noise, perf_cfg=perf_cfg,
                    stored_samples=stored_samples, sequential=sequential if objective else None,
                    kept_anchor=kept_anchor, stored_host_s=stored.host_s if stored is not None else [],
                    guard_run=tolerance is not None, device=exclusivity.combine([wt.report for wt in watch]))
        res = champion.with_flops(sess, lane, res)
        sess.check_worktrees()  # the champion's and baseline's worktrees must still be their commits
        if benchmark is not None and not getattr(benchmark, "disabled", False):
            benchmark.extra_info.update(verdict_story(res, champ_samples))  # benchmark.json tells the verdict's story
        sess.put_lane(res)
        return res

    def _run_kind(self, kind: lanekinds.LaneKind, lane: Any) -> LaneResult:
        """A lane of another kind (loop.lanekinds): its measure against the champion's worker, its judge."""
        sess = self.sess
        holdout.settle(sess)  # as for a timed lane: the holdout's reference may run on the champion's worker
        perf_cfg = sess.cfg.perf if self.guard() is None else replace(sess.cfg.perf, guard_tolerance=self.guard())
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
            if exc not in sess.errors:
                sess.errors.append(exc)
            raise
        res = kind.judge(m, perf_cfg)
        sess.check_worktrees()
        sess.put_lane(res)
        return res

    def _measure(self, lane: Any, cand: Any, champ: Any, twin: Any, sequential: Sequential | None, benchmark: Any,
                 progress: Callable[[int], None] | None, objective: bool,
                 anchor_w: Any = None) -> tuple[LaneMeasurement, list[Any]]:
        """The lane's rounds under the GPU exclusivity watch of every GPU it runs on (their
        watches come back with them)."""
        sess = self.sess
        claimed_class = self.claimed_class() or sess.judged_class
        device = sess.resolved_device()
        ranks = getattr(lane, "gpus", 1)
        devices = [rank_device(device, r) for r in range(ranks)] if ranks > 1 else [device]
        # the span outermost: the watches' last look, on their way out, is the lane's time too
        with sess.clock.span("perf.lanes"), contextlib.ExitStack() as stack:
            # the judge's processes, and a kept zygote's: its workers are not the judge's
            # descendants, but it serves this judge alone
            ours = [os.getpid(), *(p for p in (zygote.running_pid(),) if p is not None)]
            watch = [stack.enter_context(exclusivity.Watch(d, allowed=lambda: proctree.descendants(ours)))
                     for d in devices]
            m = measure_lane(cand, sess.suite, lane, champion=champ, twin=twin, benchmark=benchmark,
                             timeout_s=sess.cfg.item_timeout_s, progress=progress, pin_cpu=sess.cfg.perf.pin_cpu,
                             stream=self.requests(),
                             audit=output_audit(claimed_class, sess.cfg.thresholds_for(claimed_class)),
                             probe=objective and self.gated(), sequential=sequential, anchor=anchor_w,
                             anchor_rounds=anchor.ROUNDS, anchor_budget_s=anchor.BUDGET_S, empty=objective)
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
        return m, watch

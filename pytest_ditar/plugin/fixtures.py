"""Public fixtures: what a quality or perf test in suites/ is written with."""
from __future__ import annotations

from pathlib import Path

import pytest

from pytest_ditar.config.suite import CorpusItem
from pytest_ditar.core.errors import CandidateError, DitarError
from pytest_ditar.core.outputs import ItemOutput
from pytest_ditar.core.quality import (
    ContractResult,
    check_contract,
    compute_metrics,
    format_failure,
)
from pytest_ditar.loop.session import DitarSession
from pytest_ditar.plugin.keys import get_gate, get_session


@pytest.fixture(scope="session")
def ditar_session(request: pytest.FixtureRequest) -> DitarSession:
    return get_session(request.config)


def _fail_candidate(exc: CandidateError) -> None:
    pytest.fail(f"CRASH: {exc}", pytrace=False)


@pytest.fixture
def ditar_candidate_output(ditar_item: CorpusItem, ditar_session: DitarSession,
                           request: pytest.FixtureRequest) -> ItemOutput:
    """The candidate's output for this corpus item (generated in fixed batches, once)."""
    from pytest_ditar.plugin.console import bars

    live, total = bars(request.config), len(ditar_session.suite.corpus)
    live.set("items", len(ditar_session.outputs), total, "corpus items")
    try:
        out = ditar_session.output_for(ditar_item)
    except CandidateError as exc:
        live.close()
        _fail_candidate(exc)
    live.set("items", len(ditar_session.outputs), total, "corpus items")
    return out


@pytest.fixture
def ditar_baseline_output(ditar_item: CorpusItem, ditar_session: DitarSession) -> ItemOutput:
    """The ORIGINAL baseline's stored output for this item (never the previous candidate's)."""
    try:
        return ditar_session.baseline().output(ditar_item.id)
    except DitarError as exc:
        pytest.fail(str(exc), pytrace=False)


class QualityChecker:
    def __init__(self, sess: DitarSession):
        self.sess = sess

    def check(self, item: CorpusItem, cand: ItemOutput, base: ItemOutput) -> ContractResult:
        """Compute every metric, record the result for the gate, fail with all numbers."""
        sess = self.sess
        with sess.clock.span("quality.metrics"):
            metrics = compute_metrics(cand.latents, cand.image, base.latents, base.image)
            try:
                extra = sess.semantic_scores(item, cand, base)
            except DitarError as exc:  # e.g. an evaluator path that does not load: one line, no traceback
                pytest.fail(str(exc), pytrace=False)
            if extra:
                from dataclasses import replace

                metrics = replace(metrics, **extra)
            result = check_contract(item.id, sess.cls, metrics, sess.cfg.thresholds_for(sess.cls))
        sess.quality[item.id] = result
        if not metrics.finite:
            sess.errors.append(CandidateError("non_finite", "", item=item.id))
        if not result.passed:
            where = {"baseline image": str(sess.baseline().image_path(item.id))}
            saved = _save_failure_image(sess, item.id, cand)
            if saved:
                where["candidate image"] = str(saved)
            pytest.fail(format_failure(result, where), pytrace=False)
        return result


def _save_failure_image(sess: DitarSession, item_id: str, out: ItemOutput) -> Path | None:
    try:
        from PIL import Image

        d = sess.run_dir() / "failures"
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"{item_id}.png"
        Image.fromarray(out.image).save(path)
        return path
    except Exception:  # noqa: BLE001 - a failed save must not hide the quality failure
        return None


@pytest.fixture(scope="session")
def ditar_quality(ditar_session: DitarSession) -> QualityChecker:
    return QualityChecker(ditar_session)


@pytest.fixture(scope="session")
def ditar_candidate(ditar_session: DitarSession):
    try:
        return ditar_session.get_candidate()
    except CandidateError as exc:
        _fail_candidate(exc)


class PerfRunner:
    """Times one lane for the candidate (and, interleaved, the champion) and judges it."""

    def __init__(self, sess: DitarSession, config: pytest.Config | None = None):
        self.sess = sess
        self.config = config
        self._champion = None
        self._champion_error: str | None = None
        self._champion_tried = False
        self._stream = None

    def champion(self):
        """The champion's own code from a git worktree, built in its worker; None if impossible.
        A gated run sent its build when the guards passed, so this mostly waits for it."""
        if not self._champion_tried:
            self._champion_tried = True
            from pytest_ditar.loop import champion
            from pytest_ditar.vcs import repo as gitops

            try:  # booked as perf.build_champion
                head = gitops.state(self.sess.cfg.root).head
                self._champion = champion.build(self.sess, champion.commit(self.sess), head)
            except Exception as exc:  # noqa: BLE001 - fall back to stored samples, and say so
                self._champion_error = f"{type(exc).__name__}: {exc}"
        return self._champion

    def _gated(self) -> bool:
        gate = get_gate(self.config) if self.config is not None else None
        return bool(gate and gate.gated)

    def _progress(self, lane):
        """A tqdm bar over the lane's timed rounds (terminal only; see console.LiveBars)."""
        if self.config is None:
            return None
        from pytest_ditar.plugin.console import bars

        live = bars(self.config)
        # a sequential lane may grow past its first look: the bar's total follows it
        return lambda done: live.set(f"lane {lane.name}", done, max(done, lane.repeats), f"lane {lane.name} rounds")

    def _sequential(self, lane, champ):
        """The objective lane's sequential plan against an interleaved champion, its threshold the
        larger of min_speedup and the champion's seat bias (measured once per champion, in a gated
        run; a report-only run uses what is stored); with the bias, or None."""
        from pytest_ditar.core import sequential as seq
        from pytest_ditar.loop import champion
        from pytest_ditar.runtime.lanes import Sequential, measure_lane

        sess, perf = self.sess, self.sess.cfg.perf
        the_plan = seq.plan(lane.repeats, max(perf.max_rounds, lane.repeats), perf.alpha)
        commit = champion.commit(sess)

        def aa(twin, champ_worker):  # the champion against its twin, as the gate times a candidate
            if sess.candidate is not None:
                sess.candidate.pause()  # the candidate sits this out, frozen with all it started
            m = measure_lane(twin, sess.suite, lane, champion=champ_worker, timeout_s=sess.cfg.item_timeout_s,
                             repeats=the_plan.looks[min(1, len(the_plan.looks) - 1)], pin_cpu=perf.pin_cpu,
                             stream=self._requests())
            return m.champion_samples, m.samples

        if self._gated() and perf.seat_bias:
            seat = champion.seat_bias(sess, commit, lane, champ, aa)
        else:
            seat = champion.stored_seat_bias(sess, commit, lane.name)
        return Sequential(the_plan, seq.threshold(perf.min_speedup, seat), perf.lane_budget_s), seat

    def _requests(self):
        """One stream of timed requests per run, keyed by the session's secret."""
        if self._stream is None:
            from pytest_ditar.runtime.lanes import new_stream

            self._stream = new_stream(self.sess.suite, bytes.fromhex(self.sess.request_secret))
        return self._stream

    def _audit(self):
        """Timed outputs are held to the candidate's own class claim (the cumulative class outside a gate)."""
        from pytest_ditar.runtime.lanes import output_audit

        gate = get_gate(self.config) if self.config is not None else None
        cls = gate.meta.cls if gate is not None and gate.gated and gate.meta else self.sess.cls
        return output_audit(cls, self.sess.cfg.thresholds_for(cls))

    def run(self, lane, benchmark=None):
        from pytest_ditar.loop import champion
        from pytest_ditar.runtime.lanes import judge_lane, measure_lane

        sess = self.sess
        if self._gated():
            if sess.errors:
                pytest.skip(f"not timed: the candidate already crashed ({sess.errors[0]})")
            failed = [r.item_id for r in sess.quality.values() if not r.passed]
            if failed:
                pytest.skip(f"not timed: quality already failed on {len(failed)} item(s); the verdict is DISCARD")
        try:
            cand = sess.get_candidate()
        except CandidateError as exc:
            _fail_candidate(exc)
        group = getattr(lane, "gpus", 1) > 1  # a multi-GPU lane: torch.distributed ranks, timed as one group
        objective = lane.name == sess.cfg.objective_lane
        champ = None if group else self.champion()
        sequential = seat = None
        if objective and champ is not None:
            try:
                sequential, seat = self._sequential(lane, champ)
            except CandidateError as exc:  # the twin's build failed, or the champion's worktree moved
                sess.errors.append(exc)
                _fail_candidate(exc)
        from pytest_ditar.hardware import exclusivity

        try:  # the watch: no other process may use this GPU while it is timed
            with exclusivity.Watch(sess.resolved_device()) as watch, sess.clock.span("perf.lanes"):
                if group:
                    from pytest_ditar.runtime.multigpu import measure_group_lane

                    m = measure_group_lane(sess, lane)
                else:
                    m = measure_lane(cand, sess.suite, lane, champion=champ,
                                     benchmark=benchmark, timeout_s=sess.cfg.item_timeout_s,
                                     progress=self._progress(lane), pin_cpu=sess.cfg.perf.pin_cpu,
                                     stream=self._requests(), audit=self._audit(),
                                     probe=objective and self._gated(), sequential=sequential)
                    sess.clock.note("perf.audit", m.audit_s)
                    sess.clock.note("perf.probe", m.probe.get("seconds", 0.0))
                    sess.clock.note("perf.warmup", sum(m.warmup_s))  # where a lazy compile shows
                    sess.clock.note("perf.warmup_champion", sum(m.champion_warmup_s))
        except CandidateError as exc:
            sess.errors.append(exc)
            _fail_candidate(exc)
        sess.clock.timed_s += m.timed_s
        stored = champion.stored_lanes(sess)
        stored_samples = list(stored.get(lane.name, {}).get("samples", []))
        if champ is not None:
            source, champ_samples = "interleaved", m.champion_samples
        else:
            source, champ_samples = "stored", stored_samples
        noise = (champion.baseline_lanes(sess).get(lane.name) or {}).get("noise")
        res = judge_lane(m, champ_samples, objective=objective, source=source,
                         noise=noise, perf_cfg=sess.cfg.perf, stored_samples=stored_samples,
                         sequential=sequential, seat=seat, cpu=sess.resolved_device() == "cpu")
        champion.attach_flops(sess, lane, res)
        sess.check_worktrees()  # the champion's and baseline's worktrees must still be their commits
        res = exclusivity.apply(res, watch.report)  # a shared GPU makes the lane UNSTABLE, naming the PID
        sess.lanes[lane.name] = res
        return res


@pytest.fixture(scope="session")
def ditar_perf(ditar_session: DitarSession, request: pytest.FixtureRequest) -> PerfRunner:
    return PerfRunner(ditar_session, request.config)


def check_lane(result) -> None:
    """Fail the perf test with the lane's verdict unless it is FASTER (objective) or OK (guard)."""
    oc = result.outcome
    if oc.verdict not in ("FASTER", "OK"):
        pytest.fail(f"lane {oc.name}: {oc.verdict}: {oc.reason}", pytrace=False)

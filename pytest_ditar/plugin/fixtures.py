"""Public fixtures: what a quality or perf test in suites/ is written with."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_ditar.config.suite import CorpusItem
from pytest_ditar.core.errors import CandidateError, DitarError
from pytest_ditar.core.outputs import ItemOutput
from pytest_ditar.core.quality import (
    ContractResult,
    compute_metrics,
    format_failure,
)
from pytest_ditar.loop.perf.lanes import LaneRunner
from pytest_ditar.loop.run.classes import contract
from pytest_ditar.loop.run.results import RunResults, output_for
from pytest_ditar.loop.run.session import DitarSession
from pytest_ditar.plugin.console import bars
from pytest_ditar.plugin.keys import get_gate, get_session
from pytest_ditar.runtime.semantic import session_scores, wanted


@pytest.fixture(scope="session")
def ditar_session(request: pytest.FixtureRequest) -> DitarSession:
    return get_session(request.config)


def _results(config: pytest.Config) -> RunResults:
    """The run's results: the gate's (the plugin makes the session and the gate together)."""
    gate = get_gate(config)
    if gate is None:
        get_session(config)  # raises the usage error: no ditar config is active
        raise pytest.UsageError("pytest-ditar: a session without its gate")
    return gate.results


def _fail_candidate(exc: CandidateError) -> None:
    # `from None`: raised while the CandidateError is handled, the failure would show it again
    # above itself ("During handling of the above exception ..."): the same line twice per item
    raise pytest.fail.Exception(f"CRASH: {exc}", pytrace=False) from None


@pytest.fixture
def ditar_candidate_output(ditar_item: CorpusItem, ditar_session: DitarSession,
                           request: pytest.FixtureRequest) -> ItemOutput:
    """The candidate's output for this corpus item (generated in fixed batches, once)."""
    results = _results(request.config)
    live, total = bars(request.config), len(ditar_session.suite.corpus)
    live.set("items", len(results.outputs), total, "corpus items")
    try:
        out = output_for(ditar_session, results, ditar_item)
    except CandidateError as exc:
        live.close()
        _fail_candidate(exc)
    live.set("items", len(results.outputs), total, "corpus items")
    return out


@pytest.fixture
def ditar_baseline_output(ditar_item: CorpusItem, ditar_session: DitarSession) -> ItemOutput:
    """The ORIGINAL baseline's stored output for this item (never the previous candidate's)."""
    try:
        return ditar_session.baseline().output(ditar_item.id)
    except DitarError as exc:
        pytest.fail(str(exc), pytrace=False)


class QualityChecker:
    def __init__(self, sess: DitarSession, results: RunResults):
        self.sess = sess
        self.results = results

    def check(self, item: CorpusItem, cand: ItemOutput, base: ItemOutput) -> ContractResult:
        """Compute every metric, record the result for the gate, fail with all numbers."""
        sess = self.sess
        with sess.clock.span("quality.metrics"):
            metrics = compute_metrics(cand.latents, cand.image, base.latents, base.image)
            try:
                extra = self._semantic_scores(item, cand, base)
            except DitarError as exc:  # e.g. an evaluator path that does not load: one line, no traceback
                pytest.fail(str(exc), pytrace=False)
            if extra:
                from dataclasses import replace

                scores: dict[str, Any] = extra  # Any: replace() checks a ** dict against every field
                metrics = replace(metrics, **scores)
            result = contract(sess, item.id, metrics)
        self.results.add_quality(result)
        if not metrics.finite:
            self.results.add_error(CandidateError("non_finite", "", item=item.id))
        if not result.passed:
            where = {"baseline image": str(sess.baseline().image_path(item.id))}
            saved = _save_failure_image(sess, item.id, cand)
            if saved:
                where["candidate image"] = str(saved)
            pytest.fail(format_failure(result, where), pytrace=False)
        return result

    def _semantic_scores(self, item: CorpusItem, cand: ItemOutput, base: ItemOutput) -> dict[str, float | None] | None:
        """CLIP/LPIPS scores for the quality contract when this run's class needs them (batched)."""
        if not wanted(self.sess):
            return None
        with self.sess.clock.span("semantic"):  # only runs that score book firewall time (loading included)
            return session_scores(self.sess, self.results.outputs, item, cand, base)


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
def ditar_quality(ditar_session: DitarSession, request: pytest.FixtureRequest) -> QualityChecker:
    return QualityChecker(ditar_session, _results(request.config))


@pytest.fixture(scope="session")
def ditar_candidate(ditar_session: DitarSession):
    try:
        return ditar_session.get_candidate()
    except CandidateError as exc:
        _fail_candidate(exc)


class PerfRunner:
    """The perf fixture: loop.perf.lanes.LaneRunner with this run's gate, bars and skips."""

    def __init__(self, sess: DitarSession, results: RunResults, config: pytest.Config | None = None):
        self.sess = sess
        self.results = results
        self.config = config
        self.lanes = LaneRunner(sess, results, self._gated, self._claimed_class, self._guard)

    def _gate(self):
        return get_gate(self.config) if self.config is not None else None

    def _gated(self) -> bool:
        gate = self._gate()
        return bool(gate and gate.gated)

    def _guard(self) -> float | None:
        gate = self._gate()
        return gate.opts.guard if gate is not None else None

    def _claimed_class(self) -> str | None:
        """Timed outputs are held to the candidate's own class claim (the cumulative class outside a gate)."""
        gate = self._gate()
        return gate.claimed_class() if gate is not None else None

    def _progress(self, lane):
        """A tqdm bar over the lane's timed rounds (terminal only; see console.LiveBars)."""
        if self.config is None:
            return None
        live = bars(self.config)
        # a sequential lane may grow past its first look: the bar's total follows it
        return lambda done: live.set(f"lane {lane.name}", done, max(done, lane.repeats), f"lane {lane.name} rounds")

    def run(self, lane, benchmark=None):
        results = self.results
        if self._gated():
            if results.errors:
                pytest.skip(f"not timed: the candidate already crashed ({results.errors[0]})")
            failed = [r.item_id for r in results.quality.values() if not r.passed]
            if failed:
                pytest.skip(f"not timed: quality already failed on {len(failed)} item(s); the verdict is DISCARD")
        try:
            return self.lanes.run(lane, benchmark, self._progress(lane))
        except CandidateError as exc:
            _fail_candidate(exc)


@pytest.fixture(scope="session")
def ditar_perf(ditar_session: DitarSession, request: pytest.FixtureRequest) -> PerfRunner:
    return PerfRunner(ditar_session, _results(request.config), request.config)


def check_lane(result) -> None:
    """Fail the perf test with the lane's verdict unless it is FASTER (objective) or OK (guard)."""
    oc = result.outcome
    if oc.verdict not in ("FASTER", "OK"):
        pytest.fail(f"lane {oc.name}: {oc.verdict}: {oc.reason}", pytrace=False)

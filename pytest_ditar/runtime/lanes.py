"""Performance lanes: warm, repeated timing of candidate and champion workers, interleaved.

Each side runs in a worker process of its own (runtime.worker); a round is timed on the judge's
clock, and the side not being timed is paused (SIGSTOP) so nothing of it runs meanwhile.
"""
from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from pytest_ditar.config.suite import Lane, Suite
from pytest_ditar.interface import Request
from pytest_ditar.runtime.clock import judge_clock
from pytest_ditar.runtime.harness import no_gc
from pytest_ditar.runtime.worker import CandidateWorker, only_running


def lane_request(suite: Suite, lane: Lane) -> Request:
    """The lane's fixed batch: the first `batch` corpus items, cycling if the corpus is short."""
    items = [suite.corpus[i % len(suite.corpus)] for i in range(lane.batch)]
    return Request(labels=tuple(it.label for it in items), seeds=tuple(it.seed for it in items),
                   steps=lane.steps or suite.pipeline.steps)


@dataclass
class LaneMeasurement:
    lane: str
    samples: list[float]
    warmup_s: list[float]
    champion_samples: list[float] = field(default_factory=list)
    champion_warmup_s: list[float] = field(default_factory=list)
    peak_allocated_gib: float | None = None
    peak_reserved_gib: float | None = None
    wall_s: float = 0.0
    overhead_s: list[float] = field(default_factory=list)  # judge's time minus the worker's, per timed round

    @property
    def timed_s(self) -> float:
        """Device-synchronized inference inside the lane, warm-up included, both sides."""
        return sum(self.samples) + sum(self.warmup_s) + sum(self.champion_samples) + sum(self.champion_warmup_s)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _timed(worker: CandidateWorker, others: list, req: Request, timeout_s: float | None,
           overhead: list[float]) -> float:
    """One call on the judge's clock with every other worker paused; the gap between the judge's
    time and the worker's own account is the round trip's overhead, kept for the record."""
    with only_running(worker, others):
        out = worker.generate(req, timeout_s)
    overhead.append(out.seconds - out.worker_s)
    return out.seconds


@contextlib.contextmanager
def _steady(workers: list, pin_cpu: bool, on: bool):
    if not on:  # steady=False: benchmarks' control arm
        yield
        return
    for w in workers:
        w.steady(True, pin_cpu)
    try:
        with no_gc():
            yield
    finally:
        for w in workers:
            with contextlib.suppress(Exception):
                w.steady(False)


def measure_lane(candidate: CandidateWorker, suite: Suite, lane: Lane, *, champion: CandidateWorker | None = None,
                 benchmark: Any = None, timeout_s: float | None = None, repeats: int | None = None,
                 progress: Callable[[int], None] | None = None, pin_cpu: bool = False,
                 steady: bool = True) -> LaneMeasurement:
    """Warm up, then time `repeats` rounds. With a champion, rounds alternate ABBA so drift
    (clocks, thermals, page cache) lands on both sides equally."""
    req = lane_request(suite, lane)
    rounds = repeats or lane.repeats
    workers = [w for w in (candidate, champion) if w is not None]
    distinct = list({id(w): w for w in workers}.values())
    m = LaneMeasurement(lane.name, [], [])
    run_cand = lambda: m.samples.append(_timed(candidate, workers, req, timeout_s, m.overhead_s))  # noqa: E731
    run_champ = (lambda: m.champion_samples.append(_timed(champion, workers, req, timeout_s, m.overhead_s))) \
        if champion is not None else None  # noqa: E731
    t_wall = judge_clock()
    for w in distinct:
        w.memory(reset=True)
    with _steady(distinct, pin_cpu, steady):
        for _ in range(lane.warmup):
            m.warmup_s.append(_timed(candidate, workers, req, timeout_s, []))
            if champion is not None:
                m.champion_warmup_s.append(_timed(champion, workers, req, timeout_s, []))
        state = {"round": 0}

        def champion_round(position: str) -> None:
            # ABBA: champion before the candidate on even rounds, after it on odd ones.
            if run_champ and (state["round"] % 2 == 0) == (position == "before"):
                run_champ()

        def setup():
            champion_round("before")

        def teardown(*_a, **_k):
            champion_round("after")
            state["round"] += 1
            if progress:
                progress(state["round"])

        if benchmark is not None and not getattr(benchmark, "disabled", False):
            # pytest-benchmark's own timer (time.perf_counter) is right as it is: the worker has
            # synchronized its device before it replies. Our samples come from the judge's clock.
            benchmark.extra_info["lane"] = lane.name
            benchmark.pedantic(run_cand, setup=setup, teardown=teardown, rounds=rounds, iterations=1,
                               warmup_rounds=0)
        else:
            for _ in range(rounds):
                setup()
                run_cand()
                teardown()
    for w in distinct:
        w.resume()
    m.peak_allocated_gib, m.peak_reserved_gib = candidate.memory()
    m.wall_s = judge_clock() - t_wall
    return m


def count_flops(candidate: CandidateWorker, suite: Suite, lane: Lane) -> float | None:
    """FLOPs of one lane call, counted in the worker with torch's FlopCounterMode (None if it cannot)."""
    try:
        return candidate.flops(lane_request(suite, lane))
    except Exception:  # noqa: BLE001 - counting is informative, never a verdict by itself
        return None


@dataclass
class LaneResult:
    measurement: LaneMeasurement
    outcome: Any  # decision.LaneOutcome
    champion_source: str  # interleaved | stored | none
    min_effect: float
    comparison: dict[str, Any] = field(default_factory=dict)
    flops: float | None = None
    achieved_tflops: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"measurement": self.measurement.to_dict(), "outcome": asdict(self.outcome),
                "champion_source": self.champion_source, "min_effect": self.min_effect,
                "comparison": self.comparison, "flops": self.flops, "achieved_tflops": self.achieved_tflops}


def judge_lane(m: LaneMeasurement, champion_samples: list[float], *, objective: bool, source: str,
               noise: dict[str, Any] | None, perf_cfg: Any) -> LaneResult:
    """Turn samples into a lane verdict with the statistics in stats.py."""
    from dataclasses import asdict as _asdict

    from pytest_ditar.core import stats
    from pytest_ditar.core.decision import LaneOutcome

    # Interleaved rounds are judged paired, against the paired A/A floor measured at baseline
    # (an older baseline without one falls back to the wider unpaired floor).
    paired = source == "interleaved" and len(champion_samples) == len(m.samples)
    raw = (noise or {}).get("paired") if paired else None
    floor_fields = {k: v for k, v in (raw or noise or {}).items() if k != "paired"}
    floor = stats.NoiseFloor(**floor_fields) if floor_fields else None
    min_effect = stats.calibrated_min_effect(floor, perf_cfg.min_speedup, perf_cfg.noise_k)
    peak = m.peak_reserved_gib
    if len(champion_samples) < 3 or len(m.samples) < 3:
        oc = LaneOutcome(m.lane, objective, "MISSING", None, None, None, "no champion samples to compare with", peak)
        return LaneResult(m, oc, source, min_effect)
    if objective:
        c = stats.compare(champion_samples, m.samples, min_effect=min_effect, alpha=perf_cfg.alpha,
                          max_cv=perf_cfg.max_cv, n_boot=perf_cfg.n_boot, paired=paired)
    else:
        c = stats.regression_check(champion_samples, m.samples, perf_cfg.guard_tolerance, n_boot=perf_cfg.n_boot,
                                   paired=paired)
    # c.why, not c.reason: the verdict line already carries the speedup and its CI
    reason = f"{c.why} [{source}{' paired' if paired else ''} champion, min effect {min_effect * 100:.1f}%]"
    oc = LaneOutcome(m.lane, objective, c.verdict, c.speedup, c.ci_low, c.ci_high, reason, peak)
    return LaneResult(m, oc, source, min_effect, comparison=_asdict(c))

"""Performance lanes: warm, device-synchronized, repeated timing of candidate and champion."""
from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from .errors import CandidateError
from .harness import classify_exception, deadline, device_timer, steady_host, synchronize, track_peak_memory
from .interface import Request
from .suite import Lane, Suite


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

    @property
    def timed_s(self) -> float:
        """Device-synchronized inference inside the lane, warm-up included, both sides."""
        return sum(self.samples) + sum(self.warmup_s) + sum(self.champion_samples) + sum(self.champion_warmup_s)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _call(fn: Callable[[], Any], device: str, timeout_s: float | None) -> float:
    clock = device_timer(device)
    try:
        with deadline(timeout_s):
            t0 = clock()
            fn()
            return clock() - t0
    except CandidateError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise classify_exception(exc) from exc


def measure_lane(candidate: Any, suite: Suite, lane: Lane, device: str, *, champion: Any = None,
                 benchmark: Any = None, timeout_s: float | None = None, repeats: int | None = None,
                 progress: Callable[[int], None] | None = None, pin_cpu: bool = False,
                 steady: bool = True) -> LaneMeasurement:
    """Warm up, then time `repeats` rounds. With a champion, rounds alternate ABBA so drift
    (clocks, thermals, page cache) lands on both sides equally."""
    req = lane_request(suite, lane)
    rounds = repeats or lane.repeats
    run_cand = lambda: candidate.generate(req)  # noqa: E731
    run_champ = (lambda: champion.generate(req)) if champion is not None else None
    m = LaneMeasurement(lane.name, [], [])
    t_wall = time.perf_counter()
    quiet = steady_host(pin_cpu) if steady else contextlib.nullcontext()  # steady=False: benchmarks' control arm
    with track_peak_memory(device) as peak, quiet:
        for _ in range(lane.warmup):
            m.warmup_s.append(_call(run_cand, device, timeout_s))
            if run_champ:
                m.champion_warmup_s.append(_call(run_champ, device, timeout_s))
        state = {"round": 0}

        def champion_round(position: str) -> None:
            # ABBA: champion before the candidate on even rounds, after it on odd ones.
            if run_champ and (state["round"] % 2 == 0) == (position == "before"):
                m.champion_samples.append(_call(run_champ, device, timeout_s))

        def setup():
            champion_round("before")

        def teardown(*_a, **_k):
            champion_round("after")
            state["round"] += 1
            if progress:
                progress(state["round"])

        if benchmark is not None and not getattr(benchmark, "disabled", False):
            benchmark._timer = device_timer(device)  # pytest-benchmark reads this when it builds a runner
            benchmark.extra_info["lane"] = lane.name
            try:
                with deadline(timeout_s * rounds if timeout_s else None):
                    benchmark.pedantic(run_cand, setup=setup, teardown=teardown, rounds=rounds, iterations=1,
                                       warmup_rounds=0)
            except CandidateError:
                raise
            except Exception as exc:  # noqa: BLE001
                raise classify_exception(exc) from exc
            m.samples = [float(x) for x in benchmark.stats.stats.data]
        else:
            for _ in range(rounds):
                setup()
                m.samples.append(_call(run_cand, device, timeout_s))
                teardown()
    synchronize(device)
    m.peak_allocated_gib = peak.allocated_gib
    m.peak_reserved_gib = peak.reserved_gib
    m.wall_s = time.perf_counter() - t_wall
    return m


def count_flops(candidate: Any, suite: Suite, lane: Lane) -> float | None:
    """FLOPs of one lane call, counted with torch's FlopCounterMode (None if it cannot count)."""
    try:
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            candidate.generate(lane_request(suite, lane))
        return float(counter.get_total_flops())
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

    from . import stats
    from .decision import LaneOutcome

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
        verdict = c.verdict
    else:
        c = stats.regression_check(champion_samples, m.samples, perf_cfg.guard_tolerance, n_boot=perf_cfg.n_boot,
                                   paired=paired)
        verdict = c.verdict
    # stats' reason starts with "1.234x ci95=[..]: "; the verdict line already carries those numbers
    why = c.reason.split(": ", 1)[1] if c.reason.count(": ") and c.reason.split(": ", 1)[0].endswith("]") else c.reason
    reason = f"{why} [{source}{' paired' if paired else ''} champion, min effect {min_effect * 100:.1f}%]"
    oc = LaneOutcome(m.lane, objective, verdict, c.speedup, c.ci_low, c.ci_high, reason, peak)
    return LaneResult(m, oc, source, min_effect, comparison=_asdict(c))

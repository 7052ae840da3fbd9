"""What a performance lane is set up with before its rounds (runtime.lanes times them): its sides
(the candidate and the references timed beside it), how many rounds it starts with and how a
sequential lane grows (Sequential), pytest-benchmark's fixture it reports to, and the conditions
every round runs in: the steady state (every side's launching thread on one quiet core, no garbage
collector) and the host's speed, timed in the judge while every worker is paused.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Callable, Protocol

from pytest_ditar.config.suite import Lane
from pytest_ditar.core.sequential import Plan
from pytest_ditar.core.vocabulary import SIDE_CANDIDATE
from pytest_ditar.runtime.clock import judge_clock
from pytest_ditar.runtime.harness import no_gc, pin_to_cpu, quietest_cpu
from pytest_ditar.runtime.worker import CandidateWorker


@dataclass(frozen=True)
class Sequential:
    """How an objective lane grows (core.sequential): the plan's looks, the threshold a KEEP must
    clear, and the seconds the lane's timed rounds may take before it stops undecided."""

    plan: Plan
    threshold: float
    budget_s: float
    # a guard lane's tolerance: the lane grows until a slowdown beyond it is shown or ruled out
    # (core.guard.look) instead of until a win is (core.sequential.look)
    guard: float | None = None
    # an objective lane's win must also show its total time within this of the champion's
    # (core.meantime); a win by its median whose total is not yet shown grows to the next look
    tail: float | None = None
    n_boot: int = 2000
    # the candidate's timed calls a win needs before it is judged (core.meantime.TAIL_CALLS): a lane
    # that decided FASTER in fewer rounds times the rest as a candidate-only confirmation
    calls: int = 0


# pytest-benchmark's group for a lane: its stats are its own timer over the candidate's first
# rounds; the verdict's rounds, on the judge's clock, are summary.json's (and extra_info's).
BENCHMARK_GROUP = "ditar {lane}: candidate's first rounds, pytest-benchmark's timer (verdict: summary.json)"


class Benchmark(Protocol):
    """What a lane uses of pytest-benchmark's `benchmark` fixture."""

    extra_info: dict[str, object]
    group: str | None

    def pedantic(self, target: Callable[[], None], *, setup: Callable[[], None], teardown: Callable[..., None],
                 rounds: int, iterations: int, warmup_rounds: int) -> object: ...


@contextlib.contextmanager
def steady_state(workers: list, pin_cpu: bool, on: bool, one_core: bool = True):
    if not on:  # steady=False: benchmarks' control arm
        yield None
        return
    # Every side's launching thread on one core, the quietest: a neighbour's load or a noisy core
    # then slows all sides alike instead of one for a run of rounds (GPU lanes launch from the host
    # too). Only one side runs at a time, so they never compete for it.
    cpu = quietest_cpu() if len(workers) > 1 and one_core else None
    for w in workers:
        w.steady(True, pin_cpu, cpu)
    try:
        with no_gc():
            yield cpu
    finally:
        for w in workers:
            with contextlib.suppress(Exception):
                w.steady(False)


def host_speed(cpu: int | None) -> float:
    """Seconds of a fixed pure-Python workload in the judge, on the lane's core, every worker
    paused: how fast the host is right now. Champion drift is judged relative to it (a host
    busier than when the champion's samples were stored slows the champion with it), and no
    candidate code runs while it is timed."""
    old = pin_to_cpu(cpu) if cpu is not None else None
    try:
        t0 = judge_clock()
        acc = 0
        for i in range(20000):
            acc += i * i
        return judge_clock() - t0
    finally:
        if old is not None:
            os.sched_setaffinity(0, old)


def round_count(lane: Lane, repeats: int | None, sequential: Sequential | None) -> int:
    """`repeats` where given, else the lane's; a sequential lane's first look is its plan's (the
    objective lane's comes after the rounds that hit a 10% slow share: loop.perf.lanes.plan_for), never
    fewer rounds than that look is tested at."""
    if repeats:
        return repeats
    return lane.repeats if sequential is None else max(lane.repeats, sequential.plan.looks[0])


@dataclass(frozen=True)
class Sides:
    """A lane's workers: the candidate, and the references timed beside it where there are any."""

    candidate: CandidateWorker
    champion: CandidateWorker | None
    twin: CandidateWorker | None
    anchor: CandidateWorker | None


# a side's key in a round's order (LaneMeasurement.orders) and its name in the record
SIDE_NAMES = {"c": SIDE_CANDIDATE, "h": "champion", "t": "twin", "a": "anchor"}

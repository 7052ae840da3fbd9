"""Performance lanes: warm, repeated timing of candidate and champion workers, interleaved.

Each side runs in a worker process of its own (runtime.worker); a round is timed on the judge's
clock, and the side not being timed is paused (SIGSTOP) so nothing of it runs meanwhile. Every
timed round sends both sides the same request drawn fresh from the run's secret-keyed stream
(core.requests), and the candidate's timed outputs are audited against the champion's for that
request (core.audit): what is timed is what is checked, and nothing timed can have been cached.
What a lane is set up with (its sides, its plan, the steady state of its rounds): runtime.lanesetup.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from pytest_ditar.config.suite import Lane, Suite
from pytest_ditar.core import guard, meantime
from pytest_ditar.core.decision import LaneOutcome
from pytest_ditar.core.devstate import energy_per_image, throttled
from pytest_ditar.core.interference import Foreign, foreign_work
from pytest_ditar.core.requests import RequestStream
from pytest_ditar.core.sequential import CONTINUE, FASTER, Look, look
from pytest_ditar.core.vocabulary import SIDE_CANDIDATE
from pytest_ditar.hardware import devstate
from pytest_ditar.interface import Request
from pytest_ditar.runtime.cacheprobe import caching_probe
from pytest_ditar.runtime.calls import (
    JUDGE_ORDER,
    Audit,
    AuditFailure,
    empty_call,
    fresh_request,
    lane_request,
    new_stream,
    timed_call,
)
from pytest_ditar.runtime.clock import judge_clock
from pytest_ditar.runtime.lanesetup import (
    BENCHMARK_GROUP,
    SIDE_NAMES,
    Benchmark,
    Sequential,
    Sides,
    host_speed,
    round_count,
    steady_state,
)
from pytest_ditar.runtime.worker import CandidateWorker, Outputs


@dataclass
class LaneMeasurement:
    lane: str
    samples: list[float]
    warmup_s: list[float]
    champion_samples: list[float] = field(default_factory=list)
    champion_warmup_s: list[float] = field(default_factory=list)
    twin_samples: list[float] = field(default_factory=list)  # the champion's second build, same rounds
    twin_warmup_s: list[float] = field(default_factory=list)
    # the baseline's own code in the same rounds (core.anchor): the champion's drift is judged against it
    anchor_samples: list[float] = field(default_factory=list)
    anchor_warmup_s: list[float] = field(default_factory=list)
    anchor_is_champion: bool = False  # the champion is the baseline's code: anchor_samples are its samples
    confirm_s: list[float] = field(default_factory=list)  # the candidate alone, after a win (core.meantime)
    # each side's empty call per round (runtime.calls.empty_call): the harness's round trip
    empty_s: dict[str, list[float]] = field(default_factory=dict)
    peak_allocated_gib: float | None = None
    peak_reserved_gib: float | None = None
    wall_s: float = 0.0
    overhead_s: list[float] = field(default_factory=list)  # judge's time minus the worker's, per timed round
    seeds: list[list[int]] = field(default_factory=list)  # each timed round's request (fresh every round)
    nonces: list[str] = field(default_factory=list)  # each timed round's fresh entropy (core.requests)
    orders: list[str] = field(default_factory=list)  # each round's call order: c candidate, h champion, t twin
    probes: dict[str, list[float]] = field(default_factory=dict)  # idle probe per call and side (GPU)
    host_s: list[float] = field(default_factory=list)  # the judge's fixed host workload after each round
    pids: dict[str, int] = field(default_factory=dict)  # each side's worker pid, for the record
    ranks: int = 1  # processes a side: a multi-GPU lane's group (runtime.group) has one per GPU
    audit_failure: str | None = None  # the first timed output that failed its audit, naming the round
    audit_s: float = 0.0  # judge time spent auditing timed outputs
    probe: dict[str, Any] = field(default_factory=dict)  # the caching probe's samples (objective lane)
    looks: list[dict[str, Any]] = field(default_factory=list)  # a sequential lane's looks (core.sequential.Look)
    undecided: str | None = None  # why a sequential lane stopped without a decision (budget)
    peaks: dict[str, list[float | None]] = field(default_factory=dict)  # a memory lane's GiB per call, by side
    # each round's device and host state (core.devstate.round_state: clocks, reasons, load, ...)
    rounds_state: list[dict[str, Any]] = field(default_factory=list)
    energy_j: dict[str, list[float]] = field(default_factory=dict)  # a GPU's energy per timed call, by side
    energy_per_image_j: dict[str, float | None] = field(default_factory=dict)  # median per image, by side

    @property
    def timed_s(self) -> float:
        """Device-synchronized inference inside the lane, warm-up included, every side."""
        return (sum(self.samples) + sum(self.warmup_s) + sum(self.champion_samples) + sum(self.champion_warmup_s)
                + sum(self.twin_samples) + sum(self.twin_warmup_s) + sum(self.confirm_s)
                + (0.0 if self.anchor_is_champion else sum(self.anchor_samples) + sum(self.anchor_warmup_s)))

    def sides(self) -> dict[str, list[float]]:
        """Per-round seconds by side (core.sequential's names), the twin only when it ran."""
        out = {"candidate": self.samples, "champion": self.champion_samples}
        if self.twin_samples:
            out["twin"] = self.twin_samples
        return out

    def foreign(self) -> list[Foreign]:
        """Calls that started on a device busy with another process's work (core.interference)."""
        return foreign_work(self.probes, self.orders) if self.probes else []

    # what a round adds (_LaneRounds calls these: the lists are the measurement's own)
    def add_order(self, order: str) -> None:
        self.orders.append(order)

    def add_host(self, seconds: float) -> None:
        self.host_s.append(seconds)

    def add_empty(self, side: str, seconds: float) -> None:
        self.empty_s.setdefault(side, []).append(seconds)

    def add_seeds(self, seeds: list[int]) -> None:
        self.seeds.append(seeds)

    def add_probe(self, side: str, seconds: float) -> None:
        self.probes.setdefault(side, []).append(seconds)

    def add_confirm(self, seconds: float) -> None:
        self.confirm_s.append(seconds)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LaneResult:
    """A lane's measurement and its verdict against the champion (loop.perf.lanes decides it)."""
    measurement: LaneMeasurement
    outcome: LaneOutcome
    champion_source: str  # interleaved | stored | none
    min_effect: float
    comparison: dict[str, Any] = field(default_factory=dict)
    flops: float | None = None
    achieved_tflops: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"measurement": self.measurement.to_dict(), "outcome": asdict(self.outcome),
                "champion_source": self.champion_source, "min_effect": self.min_effect,
                "comparison": self.comparison, "flops": self.flops, "achieved_tflops": self.achieved_tflops}


def measure_lane(candidate: CandidateWorker, suite: Suite, lane: Lane, *, champion: CandidateWorker | None = None,
                 twin: CandidateWorker | None = None, benchmark: Benchmark | None = None,
                 timeout_s: float | None = None,
                 repeats: int | None = None, progress: Callable[[int], None] | None = None, pin_cpu: bool = False,
                 steady: bool = True, stream: RequestStream | None = None, audit: Audit | None = None,
                 probe: bool = False, sequential: Sequential | None = None, one_core: bool = True,
                 anchor: CandidateWorker | None = None, anchor_rounds: int = 32, anchor_budget_s: float = 15.0,
                 empty: bool = False) -> LaneMeasurement:
    """Warm up, then time `repeats` rounds, each on a fresh request. A round calls every side
    once (candidate, and champion and twin when given) in an order drawn from the judge's
    entropy, so a drift or a burst lands on each side alike and no side can predict its place.
    `audit` checks every timed output of the candidate (a failure stops the lane); `probe` adds
    the caching probe after the rounds. `sequential` (with a champion) keeps adding rounds until a
    look decides, the plan ends or the budget is spent (core.sequential); a win decided in fewer
    rounds than `sequential.calls` times the candidate alone until it has made that many calls.
    `anchor` (the baseline's code) is timed beside them in the first `anchor_rounds` rounds while its
    calls have cost under `anchor_budget_s` (core.anchor); `empty` times
    each side's empty call after each of those first rounds (the harness's round trip)."""
    if champion is None:
        sequential = None  # a sequential lane grows against a champion
    if champion is None or champion is candidate:
        twin = anchor = None
    # the champion is the baseline's code: it is its own anchor (ratio 1), its rounds the anchor's
    own_anchor = anchor is not None and anchor is champion
    m = LaneMeasurement(lane.name, [], [], ranks=len(getattr(candidate, "ranks", ())) or 1)
    lr = _LaneRounds(m, suite, lane, stream or new_stream(suite), timeout_s, audit,
                     Sides(candidate, champion, twin, None if own_anchor else anchor),
                     anchor_rounds=anchor_rounds, anchor_budget_s=anchor_budget_s, empty=empty, progress=progress)
    warm = lane_request(suite, lane)
    t_wall = judge_clock()
    for w in lr.distinct:
        w.memory(reset=True)
    with steady_state(lr.distinct, pin_cpu, steady, one_core) as lane_cpu:
        lr.cpu = lane_cpu
        lr.warm_up(warm)
        _measure(m, lr, round_count(lane, repeats, sequential), benchmark, sequential, t_wall, probe)
    return _finish(m, lr, own_anchor, t_wall)


class _LaneRounds:
    """One lane's calls as the judge makes them, into one LaneMeasurement: the warm-up, the timed
    rounds (each opened by the references drawn to run before the candidate and closed by the rest,
    the audit, the host's speed and the empty calls), the confirming calls and the caching probe.
    measure_lane drives it (_measure: the rounds, a sequential lane's growth; _finish)."""

    def __init__(self, m: LaneMeasurement, suite: Suite, lane: Lane, stream: RequestStream,
                 timeout_s: float | None, audit: Audit | None, sides: Sides, *, anchor_rounds: int,
                 anchor_budget_s: float, empty: bool, progress: Callable[[int], None] | None):
        self.m, self.suite, self.lane, self.stream = m, suite, lane, stream
        self.timeout_s, self.audit, self.candidate = timeout_s, audit, sides.candidate
        self.anchor_rounds, self.anchor_budget_s, self.empty, self.progress = (anchor_rounds, anchor_budget_s,
                                                                                empty, progress)
        self.judged = sides.champion is not None and sides.champion is not sides.candidate  # an A/A run audits alone
        # each side's worker, its timed samples and its warm-up seconds, by its key in a round's order
        self.sides: dict[str, tuple[CandidateWorker, list[float], list[float]]] = {
            key: (worker, samples, warmups)
            for key, worker, samples, warmups in (("c", sides.candidate, m.samples, m.warmup_s),
                                                  ("h", sides.champion, m.champion_samples, m.champion_warmup_s),
                                                  ("t", sides.twin, m.twin_samples, m.twin_warmup_s),
                                                  ("a", sides.anchor, m.anchor_samples, m.anchor_warmup_s))
            if worker is not None}
        self.workers = [worker for worker, _, _ in self.sides.values()]
        self.distinct = list({id(w): w for w in self.workers}.values())
        m.pids = {SIDE_NAMES[k]: int(w.proc.pid) for k, (w, _, _) in self.sides.items()
                  if getattr(w, "proc", None) is not None}
        self.rec = devstate.Rounds(getattr(getattr(sides.candidate, "spec", None), "device", None), m.rounds_state,
                                   m.energy_j)
        self.cpu: int | None = None  # the lane's core (steady_state), where the host's speed is timed
        self.round, self.order = 0, ""
        self.req: Request | None = None  # the round's request, drawn at its first call
        self.last: Request | None = None  # the last timed round's request (the caching probe repeats it)
        self.outputs: dict[str, Outputs] = {}  # the round's outputs by side key, for its audit

    def warm_up(self, warm: Request) -> None:
        for _ in range(self.lane.warmup):
            for worker, _, warmups in self.sides.values():
                warmups.append(timed_call(worker, self.workers, warm, self.timeout_s, []).seconds)

    def time_rounds(self, rounds: int, benchmark: Benchmark | None) -> None:
        if benchmark is None or getattr(benchmark, "disabled", False):
            for _ in range(rounds):
                self.one_round()
            return
        # pytest-benchmark's own timer (time.perf_counter) is right as it is: the worker has
        # synchronized its device before it replies. Our samples come from the judge's clock.
        benchmark.extra_info["lane"] = self.lane.name
        # its group names what its table holds, in the run and in `pytest-benchmark compare`
        benchmark.group = BENCHMARK_GROUP.format(lane=self.lane.name)
        benchmark.pedantic(lambda: self.call("c"), setup=self.open_round, teardown=self.close_round, rounds=rounds,
                           iterations=1, warmup_rounds=0)

    def one_round(self) -> None:
        self.open_round()
        self.call("c")
        self.close_round()

    def open_round(self) -> None:
        """Draw the round's order and call the references drawn to run before the candidate."""
        order = [k for k in self.sides if k != "a" or self._anchor_due()]
        JUDGE_ORDER.shuffle(order)
        self.order = "".join(order)
        self.m.add_order(self.order)
        for key in self.order.split("c")[0]:
            self.call(key)

    def _anchor_due(self) -> bool:
        return len(self.m.anchor_samples) < self.anchor_rounds and sum(self.m.anchor_samples) < self.anchor_budget_s

    def close_round(self, *_args: object, **_kwargs: object) -> None:
        """Call the references after the candidate, audit the round, and time what every worker paused
        allows: the host's speed and, in the first rounds, each side's empty call."""
        for key in self.order.split("c")[1]:
            self.call(key)
        if self.audit is not None:
            _audit_round(self.m, self, self.audit)
        self.m.add_host(host_speed(self.cpu))  # every worker is paused now
        if self.empty and self.round < self.anchor_rounds:  # a median of the round trip: the first rounds tell it
            for key, (w, _, _) in self.sides.items():
                self.m.add_empty(SIDE_NAMES[key], empty_call(w, self.workers))
        self.rec.end_round()  # the device's and the host's state of this round
        self.round, self.req, self.outputs = self.round + 1, None, {}
        if self.progress:
            self.progress(self.round)

    def request(self) -> Request:
        """The round's request: drawn fresh at its first call, the same for every side of the round."""
        if self.req is None:
            self.req = self.last = fresh_request(self.stream, self.suite, self.lane, f"round/{self.round}",
                                                 self.m.nonces)
            self.m.add_seeds(list(self.req.seeds))
        return self.req

    def call(self, key: str) -> None:
        """One side's timed call of the round."""
        worker, samples, _ = self.sides[key]
        side = SIDE_NAMES[key]
        out = self.rec.timed(side, lambda: timed_call(worker, self.workers, self.request(), self.timeout_s,
                                                      self.m.overhead_s))
        samples.append(out.seconds)
        if out.idle_probe_s is not None:
            self.m.add_probe(side, out.idle_probe_s)
        self.outputs[key] = out

    def confirming_call(self) -> None:
        """The candidate alone, on a fresh request of its own (core.meantime's confirmation)."""
        req = fresh_request(self.stream, self.suite, self.lane, f"confirm/{len(self.m.confirm_s)}")
        out = timed_call(self.candidate, self.workers, req, self.timeout_s, [])
        self.m.add_confirm(out.seconds)
        problem = self.audit(out, None) if self.audit is not None else None
        if problem:
            raise AuditFailure(f"audit: a confirming call: {problem[1]}")

    def caching_probe(self, last: Request) -> dict[str, Any]:
        """The caching probe on the candidate after its last timed round (`last`); the references get
        the same requests, untimed, so no side's history of requests differs."""
        sent: list[Request] = []
        found = caching_probe(self.candidate, self.workers, self.stream, self.suite, self.lane, last, self.timeout_s,
                              self.audit, sent)
        for key, (ref, _, _) in self.sides.items():
            if key in ("h", "t"):
                for req in sent:
                    timed_call(ref, self.workers, req, self.timeout_s, [])
        return found


def _measure(m: LaneMeasurement, lr: _LaneRounds, rounds: int, benchmark: Benchmark | None,
             sequential: Sequential | None, t_wall: float, probe: bool) -> None:
    """The timed rounds, a sequential lane's growth and confirmation, the caching probe; an audit
    failure stops them and is kept in the measurement."""
    try:
        lr.time_rounds(rounds, benchmark)
        if sequential is not None:
            _grow(m, sequential, lr.one_round, t_wall)
            _confirm(m, sequential, lr.confirming_call)
        if probe and lr.last is not None:
            m.probe = lr.caching_probe(lr.last)
    except AuditFailure as exc:
        m.audit_failure = str(exc)
    finally:
        lr.rec.close()


def _audit_round(m: LaneMeasurement, lr: _LaneRounds, audit: Audit) -> None:
    t0 = judge_clock()
    try:
        problem = audit(lr.outputs["c"], lr.outputs.get("h") if lr.judged else None)
    finally:
        m.audit_s += judge_clock() - t0
    if problem:
        req, (i, what) = lr.request(), problem  # the round's, drawn at its candidate's call
        raise AuditFailure(f"audit: timed round {lr.round + 1}, seed {req.seeds[i]} "
                           f"(label {req.labels[i]}): {what}")


def _finish(m: LaneMeasurement, lr: _LaneRounds, own_anchor: bool, t_wall: float) -> LaneMeasurement:
    """Resume every worker and fill in what the lane as a whole measured."""
    if own_anchor:  # the same calls, not timed twice (timed_s counts them once)
        m.anchor_samples, m.anchor_is_champion = list(m.champion_samples), True
    m.energy_per_image_j = {side: energy_per_image(js, lr.lane.batch) for side, js in m.energy_j.items()}
    for w in lr.distinct:
        w.resume()
    m.peak_allocated_gib, m.peak_reserved_gib = lr.candidate.memory()
    m.wall_s = judge_clock() - t_wall
    return m


def _grow(m: LaneMeasurement, sq: Sequential, one_round: Callable[[], None], t0: float) -> None:
    """Look, and while undecided add rounds up to the next look (plus as many as were void: a
    void round is re-timed); a look the budget cannot reach is taken where the budget ends, and
    is the last. An undecided end says why in `m.undecided`."""
    k, cut = 0, None
    while True:
        lk = (look(m.sides(), sq.threshold, sq.plan, k, foreign=_voiding(m)) if sq.guard is None
              else guard.look(m.champion_samples, m.samples, sq.guard, k, sq.plan.alphas[k]))
        m.looks.append(asdict(lk))
        if lk.decision != CONTINUE and not _total_pending(m, sq, lk, k):
            return
        if cut or k + 1 >= len(sq.plan.looks):
            m.undecided = cut or f"the plan's last look ({sq.plan.looks[-1]} rounds)"
            return
        k += 1
        spent = judge_clock() - t0
        affordable = len(m.samples) + int(max(0.0, sq.budget_s - spent) / (spent / max(1, len(m.samples))))
        wanted = sq.plan.looks[k] + lk.voided
        target = min(wanted, affordable)
        if target <= len(m.samples):
            m.undecided = f"the lane's budget of {sq.budget_s:g}s, spent after {len(m.samples)} rounds"
            return
        if target < wanted:
            cut = f"the lane's budget of {sq.budget_s:g}s, reached at {target} rounds"
        while len(m.samples) < target:
            one_round()


def _confirm(m: LaneMeasurement, sq: Sequential, call: Callable[[], None]) -> None:
    """A lane that decided FASTER in fewer than `sq.calls` rounds times the rest of those calls
    on the candidate alone (the references stay paused: cheap), so a slow share of 5% shows at least
    once with 99% (core.meantime.TAIL_CALLS); loop.perf.lanes judges the total with them."""
    if not m.looks or m.looks[-1].get("decision") != FASTER:
        return
    for _ in range(max(0, sq.calls - len(m.samples))):
        call()


def _total_pending(m: LaneMeasurement, sq: Sequential, lk: Look | guard.Look, k: int) -> bool:
    """A win by the median call whose summed time the rounds so far do not show (a stall or a slow
    share hit once in a short look), with a look left: more rounds decide it, not this look. The
    later look is tested at its own alpha, so the rule's error stays what the plan spends."""
    if lk.decision != FASTER or sq.tail is None or k + 1 >= len(sq.plan.looks):
        return False
    return meantime.total_unproven(m.champion_samples, m.samples, sq.tail, n_boot=sq.n_boot) is not None


def _voiding(m: LaneMeasurement) -> list[int]:
    """Rounds void for foreign work: a reference's call that started on a busy device (a busy
    start of the candidate's own call counts against it, so it is not voided), and rounds the
    device throttled in (core.devstate.throttled: its clock changed under the calls)."""
    return sorted({f.round for f in m.foreign() if f.side != SIDE_CANDIDATE} | set(throttled(m.rounds_state)))


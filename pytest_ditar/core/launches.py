"""Device time per phase by kernel launch (`dit-ar profile` on a GPU, issue 52): every kernel,
copy and memset the device ran in the call gets the phase of the innermost judge-owned range that
was open on the call's thread when its launch (cudaLaunchKernel, cuLaunchKernel, cudaGraphLaunch,
cudaMemcpyAsync...) was made. The link kernel -> launch is the profiler's correlation id
(runtime.kineto reads it from the trace); nothing the candidate reports.

A CUDA graph's replay is one launch for all its kernels; the worker wraps
`torch.cuda.CUDAGraph.replay` in a "graph" range, which names no phase but says "in a graph" and
is a landmark of the denoising loop. Kernels launched outside every phase range (a graph the
candidate replays itself, F.* on its own weights, a compiled region whose modules' hooks never
fire) are placed by where their launch lies among the call's top-level ranges:

- before the loop's first landmark (transformer, scheduler step/scale, graph): setup;
- after the last VAE range: output; between VAE ranges: vae;
- after a transformer range, before the scheduler step that follows it: guidance;
- else, inside the denoising part: the denoiser's work, attention-family kernels (core.kernels)
  to "attention", the rest to `TF_INFERRED` ("replayed / compiled / rewritten kernels");
- where no landmark fired at all (no loop landmark, no VAE): `BYPASSED` (nothing to place by).

Where no loop landmark fired but a VAE range did (a lean candidate whose scheduler and
transformer never fire), everything before the first VAE range is the denoiser's: setup is not
separated then (a note says so). Kernels whose launch the trace does not hold go to
`UNATTRIBUTED`, never to a phase. What was placed by position is "inferred" (the table's `*`).

Pure: plain data in, plain data out.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from pytest_ditar.core.attribution import BYPASSED, CALL, GAPS, PHASES, SPAN_PHASE, Span
from pytest_ditar.core.kernels import ATTENTION, diff, family

GRAPH = "graph"  # the range around a CUDA graph's replay (runtime.profiler)
TF_INFERRED = "transformer_inferred"
UNATTRIBUTED = "unattributed"
IDLE = "idle"  # `--against`: the profiled wall less device busy, so the rows add up to the wall
LOOP_LANDMARKS = ("transformer", "scheduler.scale", "scheduler.step", GRAPH)
# Rows of the device column beyond core.attribution's PHASES: (key, label, parent)
EXTRA_ROWS: tuple[tuple[str, str, str | None], ...] = (
    (TF_INFERRED, "replayed / compiled / rewritten kernels *", "transformer"),
    (UNATTRIBUTED, "kernels with no launch in the trace", None),
)
UNNAMED = (GAPS, BYPASSED, UNATTRIBUTED)  # every other row is a named phase
FLAG_GRAPH = 1  # launched by cudaGraphLaunch / cuGraphLaunch
FLAG_FOREIGN = 2  # launched on another host thread than the call's: no range of the call applies
TOP_N = 10


@dataclass(frozen=True)
class Launch:
    """One kernel (copy, memset) the device ran: its name, its launch's host time on the spans'
    clock (None: no launch found), its device microseconds, and FLAG_* bits."""

    name: str
    at: float | None
    device_us: float
    flags: int = 0

    @classmethod
    def from_row(cls, row: Sequence[object], names: Sequence[str]) -> Launch:
        """From the wire form [name index, launch ts or None, device us, flags]; ValueError or
        IndexError for anything else."""
        if len(row) != 4:
            raise ValueError(f"launch {row!r}: expected [name index, at, device_us, flags]")
        return cls(names[int(_number(row[0]))], None if row[1] is None else _number(row[1]),
                   max(0.0, _number(row[2])), int(_number(row[3])))


def _number(x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"{x!r} is not a number")
    return float(x)


class KernelCount(TypedDict):
    name: str
    kernels: int
    ms: float


class DeviceDict(TypedDict):
    """DeviceAttribution as summary.json holds it."""

    busy_ms: float
    phases: dict[str, float]
    inferred: dict[str, float]
    kernels: int
    in_graphs: int
    graph_ms: float
    triton: int
    triton_ms: float
    unattributed_ms: float
    named_ms: float
    named_share: float | None
    top_unnamed: list[KernelCount]
    top_inferred: list[KernelCount]
    notes: list[str]


@dataclass(frozen=True)
class DeviceAttribution:
    busy_ms: float  # every kernel in the call
    phases: Mapping[str, float]  # ms per row key (PHASES' keys and EXTRA_ROWS'), parents the sum of children
    inferred: Mapping[str, float]  # ms of each leaf placed by position, not by a range
    kernels: int
    in_graphs: int  # kernels of a graph's replay
    graph_ms: float
    triton: int  # Triton kernels (a compiled region's)
    triton_ms: float
    unattributed_ms: float
    named_ms: float  # busy less the unnamed rows' (gaps, bypassed, unattributed)
    top_unnamed: tuple[tuple[str, int, float], ...]  # (name, kernels, ms) of the largest unnamed kernels
    top_inferred: tuple[tuple[str, int, float], ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def named_share(self) -> float | None:
        return self.named_ms / self.busy_ms if self.busy_ms > 0 else None

    def leaves(self) -> dict[str, float]:
        """ms per leaf row: they partition busy."""
        return {k: self.phases.get(k, 0.0) for k in LEAVES}

    def to_dict(self) -> DeviceDict:
        def top(rows: tuple[tuple[str, int, float], ...]) -> list[KernelCount]:
            return [KernelCount(name=n, kernels=c, ms=ms) for n, c, ms in rows]

        return DeviceDict(busy_ms=self.busy_ms, phases=dict(self.phases), inferred=dict(self.inferred),
                          kernels=self.kernels, in_graphs=self.in_graphs, graph_ms=self.graph_ms, triton=self.triton,
                          triton_ms=self.triton_ms, unattributed_ms=self.unattributed_ms, named_ms=self.named_ms,
                          named_share=self.named_share, top_unnamed=top(self.top_unnamed),
                          top_inferred=top(self.top_inferred), notes=list(self.notes))


# The device column's rows: PHASES, the inferred transformer row after the transformer's own, and
# the unattributed kernels last.
ROWS: tuple[tuple[str, str, str | None], ...] = tuple(
    r for row in PHASES for r in ((row, EXTRA_ROWS[0]) if row[0] == "transformer_other" else (row,))
) + (EXTRA_ROWS[1],)
LEAVES: tuple[str, ...] = tuple(k for k, _, _ in ROWS if k not in {p for _, _, p in ROWS})


@dataclass(frozen=True)
class _Landmarks:
    first_loop: float | None
    first_vae: float | None
    last_vae_end: float | None
    guidance: tuple[tuple[float, float], ...]  # (transformer end, next scheduler step start)

    @classmethod
    def of(cls, top: list[Span]) -> _Landmarks:
        first_loop = next((s.start for s in top if s.label in LOOP_LANDMARKS), None)
        vaes = [s for s in top if s.label == "vae"]
        guidance = tuple((a.end, b.start) for a, b in zip(top, top[1:])
                         if a.label == "transformer" and b.label == "scheduler.step")
        return cls(first_loop, vaes[0].start if vaes else None, vaes[-1].end if vaes else None, guidance)

    def place(self, at: float, name: str) -> str:
        """The phase of a kernel launched at `at` outside every phase range."""
        if self.first_loop is None and self.first_vae is None:
            return BYPASSED
        if self.first_loop is not None and at < self.first_loop:
            return "setup"
        if self.last_vae_end is not None and at >= self.last_vae_end:
            return "output"
        if self.first_vae is not None and at >= self.first_vae:
            return "vae"
        if any(a <= at < b for a, b in self.guidance):
            return "guidance"
        return "attention" if family(name) == ATTENTION else TF_INFERRED


def _top_level(call: Span, spans: list[Span]) -> list[Span]:
    out: list[Span] = []
    for s in sorted(spans, key=lambda s: (s.start, -s.end)):
        if call.start <= s.start <= call.end and (not out or s.start >= out[-1].end):
            out.append(s)
    return out


def attribute_launches(spans: Iterable[Span], launches: Iterable[Launch]) -> DeviceAttribution:
    """Device ms per phase of the kernels in `launches` (see the module's docstring), by the
    ranges in `spans` (one "call" span; phase and "graph" ranges; one thread, one clock).
    Raises ValueError without exactly one call span."""
    spans = list(spans)
    calls = [s for s in spans if s.label == CALL]
    if len(calls) != 1:
        raise ValueError(f"expected one '{CALL}' span, got {len(calls)}")
    call = calls[0]
    ranges = sorted((s for s in spans if s.label in SPAN_PHASE or s.label == GRAPH),
                    key=lambda s: (s.start, -s.end))
    marks = _Landmarks.of(_top_level(call, ranges))
    leaf: dict[str, float] = {}
    inferred: dict[str, float] = {}
    unnamed: dict[str, list[float]] = {}
    by_pos: dict[str, list[float]] = {}
    n = n_graph = n_triton = 0
    graph_us = triton_us = 0.0
    stack: list[Span] = []
    j = 0
    timed = sorted((lc for lc in launches), key=lambda lc: (lc.at is None, lc.at or 0.0))
    for lc in timed:
        n += 1
        in_graph = bool(lc.flags & FLAG_GRAPH)
        if lc.at is None:
            phase, placed = UNATTRIBUTED, False
        else:
            while j < len(ranges) and ranges[j].start <= lc.at:  # open the ranges begun by now (they nest)
                while stack and stack[-1].end < ranges[j].start:
                    stack.pop()
                stack.append(ranges[j])
                j += 1
            while stack and stack[-1].end < lc.at:
                stack.pop()
            open_ = [] if lc.flags & FLAG_FOREIGN else stack
            in_graph = in_graph or any(s.label == GRAPH for s in open_)
            inner = next((s for s in reversed(open_) if s.label in SPAN_PHASE), None)
            if inner is not None:
                phase, placed = SPAN_PHASE[inner.label], False
            else:
                phase, placed = marks.place(lc.at, lc.name), True
        leaf[phase] = leaf.get(phase, 0.0) + lc.device_us
        if placed:
            inferred[phase] = inferred.get(phase, 0.0) + lc.device_us
            _tally(by_pos, lc)
        if phase in UNNAMED:
            _tally(unnamed, lc)
        if in_graph:
            n_graph += 1
            graph_us += lc.device_us
        if lc.name.startswith("triton_"):
            n_triton += 1
            triton_us += lc.device_us
    busy = sum(leaf.values())
    phases = _bubble({k: v / 1e3 for k, v in leaf.items()})
    named = busy - sum(leaf.get(k, 0.0) for k in UNNAMED)
    notes = []
    if marks.first_loop is None and marks.first_vae is not None and n:
        notes.append("no loop landmark fired (transformer, scheduler, graph replay): the kernels before the first "
                     "VAE range are the denoiser's, setup's among them")
    if marks.first_loop is None and marks.first_vae is None and n:
        notes.append("no landmark fired in the call (no transformer, scheduler, graph replay or VAE range): kernels "
                     "outside every range cannot be placed")
    return DeviceAttribution(busy_ms=busy / 1e3, phases=phases, inferred={k: v / 1e3 for k, v in inferred.items()},
                             kernels=n, in_graphs=n_graph, graph_ms=graph_us / 1e3, triton=n_triton,
                             triton_ms=triton_us / 1e3, unattributed_ms=leaf.get(UNATTRIBUTED, 0.0) / 1e3,
                             named_ms=named / 1e3, top_unnamed=_top(unnamed), top_inferred=_top(by_pos),
                             notes=tuple(notes))


def _tally(acc: dict[str, list[float]], lc: Launch) -> None:
    row = acc.setdefault(lc.name, [0, 0.0])
    row[0] += 1
    row[1] += lc.device_us


def _top(acc: dict[str, list[float]], n: int = TOP_N) -> tuple[tuple[str, int, float], ...]:
    rows = sorted(acc.items(), key=lambda kv: -kv[1][1])[:n]
    return tuple((name, int(c), us / 1e3) for name, (c, us) in rows)


def _bubble(leaf: Mapping[str, float]) -> dict[str, float]:
    """Every row's ms: a leaf's own, a parent's the sum of its children's."""
    out = {k: float(leaf.get(k, 0.0)) for k, _, _ in ROWS}
    for key, _, parent in reversed(ROWS):  # children before parents
        if parent is not None:
            out[parent] += out[key]
    return out


@dataclass(frozen=True)
class SumCheck:
    """One measured total's difference against the sum of the per-phase deltas."""

    name: str
    ref_ms: float
    ms: float
    summed_ms: float  # the deltas' sum it is compared with

    @property
    def delta_ms(self) -> float:
        return self.ms - self.ref_ms

    @property
    def gap(self) -> float | None:
        """|summed - measured| / |measured| (None where the measured difference is 0)."""
        return abs(self.summed_ms - self.delta_ms) / abs(self.delta_ms) if self.delta_ms else None


def sum_checks(ref: Mapping[str, float], new: Mapping[str, float], totals: Mapping[str, tuple[float, float]]) -> \
        list[SumCheck]:
    """`--against`: the sum of the per-row deltas (`new` less `ref`, ms by row; an IDLE row
    included where given) against each measured total's difference (`totals`: name -> (ref
    ms, new ms)); the rows without IDLE are compared with "device busy" when that total is named."""
    keys = set(ref) | set(new)
    with_idle = sum(new.get(k, 0.0) - ref.get(k, 0.0) for k in keys)
    busy_only = sum(new.get(k, 0.0) - ref.get(k, 0.0) for k in keys if k != IDLE)
    return [SumCheck(name, float(a), float(b), busy_only if name == "device busy" else with_idle)
            for name, (a, b) in totals.items()]


class CheckDict(TypedDict):
    name: str
    ref_ms: float
    ms: float
    delta_ms: float
    summed_ms: float
    gap: float | None


class DeltaRow(TypedDict):
    key: str
    ref_ms: float
    ms: float
    delta_ms: float
    rel: float | None


class DeviceDeltas(TypedDict):
    """`--against`'s device rows (summary.json's `against.device_phases`)."""

    ref_wall_ms: float
    wall_ms: float
    summed_ms: float
    rows: list[DeltaRow]  # largest change first
    checks: list[CheckDict]


def device_deltas(ref: DeviceDict, new: DeviceDict, walls: tuple[float, float],
                  unprofiled: tuple[float | None, float | None]) -> DeviceDeltas:
    """Two calls' device ms per leaf row, with the device's idle time (the profiled wall less busy)
    as one more row so the deltas add up to the difference of the profiled `walls` (ref, new);
    their sum against each measured total's difference: device busy (the rows without idle), the
    profiled walls and, where both sides have one, the `unprofiled` walls."""
    def rows(d: DeviceDict, wall: float) -> dict[str, float]:
        out = {k: float(d["phases"].get(k, 0.0)) for k in LEAVES}
        out[IDLE] = max(0.0, wall - float(d["busy_ms"]))
        return out

    ra, rb = rows(ref, walls[0]), rows(new, walls[1])
    d = diff(ra, rb, walls[0], walls[1])
    totals = {"device busy": (float(ref["busy_ms"]), float(new["busy_ms"])), "profiled call walls": walls}
    if unprofiled[0] and unprofiled[1]:
        totals["unprofiled walls"] = (unprofiled[0], unprofiled[1])
    return DeviceDeltas(
        ref_wall_ms=d.ref_wall_ms, wall_ms=d.wall_ms, summed_ms=d.summed_ms,
        rows=[DeltaRow(key=r.key, ref_ms=r.ref_ms, ms=r.ms, delta_ms=r.delta_ms, rel=r.rel) for r in d.rows],
        checks=[CheckDict(name=c.name, ref_ms=c.ref_ms, ms=c.ms, delta_ms=c.delta_ms, summed_ms=c.summed_ms,
                          gap=c.gap) for c in sum_checks(ra, rb, totals)])

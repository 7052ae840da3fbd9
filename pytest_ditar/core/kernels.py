"""Kernel families and the kernel table of one profiled call (`dit-ar profile`, issue 41), and the
difference between two profiled calls (`dit-ar profile --against REF`).

On a GPU the table's rows are every kernel the device ran in the call, whoever launched it (an
eager operator, a CUDA graph's replay, a Triton kernel of a compiled region): what the profiler
recorded on the device, not what the host's operators say they launched. On a CPU they are the
operators' self times. Either way one extra row, `REST`, holds the wall's remainder (the device
idle, or the host outside any operator), so the families add up to the call's wall and the
differences of two calls' families add up to the difference of their walls.

Pure: names and numbers in, rows out.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

GEMM, ATTENTION, NORM, POINTWISE, COPY, OTHER = "GEMM", "attention", "norm", "pointwise", "copy", "other"
REST = "rest"  # the wall less every row: device idle (GPU) or host time outside operators (CPU)
FAMILIES: tuple[str, ...] = (GEMM, ATTENTION, NORM, POINTWISE, COPY, OTHER, REST)
REST_LABEL = {True: "device idle (no kernel running)", False: "host outside operators (Python, waits)"}

# Checked in this order, each a regular expression over the lower-cased name: attention first
# (flash and cuDNN attention kernels also name gemm or cutlass), norms before pointwise (a
# vectorized layer-norm kernel), copies before pointwise (a copy is an elementwise kernel too).
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (ATTENTION, re.compile(r"attention|sdpa|flash|fmha|softmax|attn")),
    (NORM, re.compile(r"layer_?norm|group_?norm|rms_?norm|batch_?norm|instance_?norm")),
    (GEMM, re.compile(r"gemm|cutlass|xmma|cublas|wgmma|triton_tem|matmul|linear|conv|(^|[^a-z])(add|b|baddb)?mm"
                      r"($|[^a-z])")),
    (COPY, re.compile(r"memcpy|memset|copy|(^|::)to$|clone|contiguous|(^|::)(cat|stack|pad|index_select|gather|"
                      r"scatter|constant_pad_nd)$|cat_|fill_")),
    (POINTWISE, re.compile(r"elementwise|triton_poi|(^|::)(add|mul|sub|div|silu|gelu|sigmoid|tanh|exp|where|clamp|"
                           r"pow|sqrt|rsqrt|neg|sin|cos|round|lerp|addcmul|addcdiv|relu|mish)_?$")),
)


def family(name: str) -> str:
    """The kernel family of an operator or kernel name (GEMM, attention, norm, pointwise, copy, other)."""
    low = name.lower()
    if low.startswith("triton_"):  # Inductor's names: tem(plate) a GEMM, poi(ntwise), per/red(uction)
        for fam, rx in _RULES[:2]:
            if rx.search(low):
                return fam
        return {"tem": GEMM, "poi": POINTWISE}.get(low[7:10], OTHER)
    for fam, rx in _RULES:
        if rx.search(low):
            return fam
    return OTHER


@dataclass(frozen=True)
class KernelRow:
    name: str
    family: str
    calls: int
    ms: float
    share: float  # of the call's wall


@dataclass(frozen=True)
class KernelTable:
    wall_ms: float
    busy_ms: float  # the rows' sum: device busy on a GPU, time inside operators on a CPU
    rows: tuple[KernelRow, ...]  # largest first
    families: Mapping[str, float]  # ms per family, REST included: they add up to the wall

    def to_dict(self) -> dict[str, Any]:
        return {"wall_ms": self.wall_ms, "busy_ms": self.busy_ms, "families": dict(self.families),
                "rows": [vars(r) for r in self.rows]}


def kernel_table(entries: Iterable[tuple[str, int, float]], wall_ms: float) -> KernelTable:
    """The table of (name, calls, ms) entries of one call whose wall was `wall_ms`; entries of the
    same name are merged. The REST family is the wall less the rows (never below 0: overlapping
    streams can keep a device busier than its wall)."""
    merged: dict[str, list[float]] = {}
    for name, calls, ms in entries:
        acc = merged.setdefault(str(name), [0.0, 0.0])
        acc[0] += int(calls)
        acc[1] += float(ms)
    share = (lambda ms: ms / wall_ms) if wall_ms > 0 else (lambda ms: 0.0)
    rows = sorted((KernelRow(n, family(n), int(c), ms, share(ms)) for n, (c, ms) in merged.items()),
                  key=lambda r: r.ms, reverse=True)
    fams = {f: 0.0 for f in FAMILIES}
    for r in rows:
        fams[r.family] += r.ms
    busy = sum(r.ms for r in rows)
    fams[REST] = max(0.0, wall_ms - busy)
    return KernelTable(wall_ms, busy, tuple(rows), fams)


@dataclass(frozen=True)
class Delta:
    key: str
    ref_ms: float
    ms: float

    @property
    def delta_ms(self) -> float:
        return self.ms - self.ref_ms

    @property
    def rel(self) -> float | None:
        """The change against the reference's own time in this row (None where it had none)."""
        return self.delta_ms / self.ref_ms if self.ref_ms > 0 else None


@dataclass(frozen=True)
class Diff:
    ref_wall_ms: float
    wall_ms: float
    rows: tuple[Delta, ...]  # largest change first

    @property
    def delta_ms(self) -> float:
        return self.wall_ms - self.ref_wall_ms

    @property
    def summed_ms(self) -> float:
        return sum(d.delta_ms for d in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {"ref_wall_ms": self.ref_wall_ms, "wall_ms": self.wall_ms, "delta_ms": self.delta_ms,
                "summed_ms": self.summed_ms,
                "rows": [{"key": d.key, "ref_ms": d.ref_ms, "ms": d.ms, "delta_ms": d.delta_ms, "rel": d.rel}
                         for d in self.rows]}


def diff(ref: Mapping[str, float], new: Mapping[str, float], ref_wall_ms: float, wall_ms: float) -> Diff:
    """Row by row, `new` against `ref` (ms by key; a key missing on one side is 0 there). Given
    rows that partition each wall (top-level phases, or families with REST), the deltas add up
    to the difference of the walls."""
    keys = list(dict.fromkeys([*ref, *new]))
    rows = [Delta(k, float(ref.get(k, 0.0)), float(new.get(k, 0.0))) for k in keys]
    rows.sort(key=lambda d: abs(d.delta_ms), reverse=True)
    return Diff(float(ref_wall_ms), float(wall_ms), tuple(rows))


def headline(d: Diff, labels: Mapping[str, str] | None = None, n: int = 3) -> str:
    """The diff's top lines in one: "slower by 41.0 ms: VAE decode +39.2 ms (+80%), ..."."""
    labels = labels or {}
    word = "slower" if d.delta_ms > 0 else "faster"
    parts = []
    for r in d.rows[:n]:
        if abs(r.delta_ms) < 1e-9:
            break
        rel = f" ({r.rel * 100:+.0f}%)" if r.rel is not None else " (new)"
        parts.append(f"{labels.get(r.key, r.key)} {r.delta_ms:+.1f} ms{rel}")
    return f"{word} by {abs(d.delta_ms):.1f} ms: " + (", ".join(parts) or "no row changed")

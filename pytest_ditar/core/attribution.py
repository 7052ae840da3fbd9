"""Phase attribution of one profiled call (`dit-ar profile`): where a generate() call's time went,
in the pipeline's own structure.

The worker (runtime.profiler) marks ranges around the pipeline's parts while torch.profiler
records: module forward hooks by class name (`MODULE_LABELS`), wrapped scheduler methods, the
VAE's decoder. What comes back is a list of `Span`s on one thread: the whole call ("call"), the
labelled ranges, and on CUDA the call's own top-level operators ("op") with their device time.
This module turns them into exclusive time per phase: a span's time less the labelled spans
opened inside it, so nested phases never count twice and the rows add up to the call's wall.

Three phases have no range of their own, only a place between ranges (`INFERRED`): setup (the
call's time before its first transformer forward: noise, labels, timesteps), the guidance
combine (after a transformer forward, up to the scheduler step that follows it) and the output
(after the last VAE decode: images to the host, to uint8). What lies between ranges anywhere
else is a host gap, and the coverage is the share of the wall that is not a gap.

Pure: plain data in, plain data out; no torch.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

CALL = "call"  # the span of the whole candidate.generate() call
OP = "op"  # a top-level operator of the call (CUDA only: its device time goes to the phase it lies in)

# Span labels a hook or wrapper emits, and the phase each one's exclusive time goes to.
SPAN_PHASE = {
    "transformer": "transformer_other",  # the model's own ops: output head, unpatchify
    "patch_embed": "transformer_other",
    "block": "block",
    "conditioning": "conditioning",
    "attention": "attention",
    "mlp": "mlp",
    "adaln": "adaln",
    "norm": "norm",
    "scheduler.step": "scheduler",
    "scheduler.scale": "scheduler",
    "scheduler.set_timesteps": "setup",
    "vae": "vae",
}

# A module's label from its class or a base class (the first in its MRO that is listed): the
# diffusers DiT classes, so a candidate's subclass (a fused Attention) still counts as one.
MODULE_LABELS = {
    "CombinedTimestepLabelEmbeddings": "conditioning", "TimestepEmbedding": "conditioning",
    "LabelEmbedding": "conditioning", "Timesteps": "conditioning",
    "PixArtAlphaCombinedTimestepSizeEmbeddings": "conditioning",
    "Attention": "attention", "MultiheadAttention": "attention",
    "FeedForward": "mlp",
    "AdaLayerNormZero": "adaln", "AdaLayerNormZeroSingle": "adaln", "AdaLayerNorm": "adaln",
    "AdaLayerNormSingle": "adaln", "AdaLayerNormContinuous": "adaln",
    "LayerNorm": "norm", "RMSNorm": "norm", "GroupNorm": "norm",
    "BasicTransformerBlock": "block",
    "PatchEmbed": "patch_embed",
}

# (key, label, parent): the table's rows in order. A parent's time is the sum of its children's.
PHASES: tuple[tuple[str, str, str | None], ...] = (
    ("setup", "setup: noise, labels, timesteps *", None),
    ("denoise", "denoising steps", None),
    ("transformer", "transformer", "denoise"),
    ("conditioning", "conditioning: timestep + class embedding", "transformer"),
    ("attention", "attention", "transformer"),
    ("mlp", "MLP (feed-forward)", "transformer"),
    ("adaln", "adaLN: modulation MLP, shift/scale", "transformer"),
    ("block", "block glue: gates, MLP modulate, residuals", "transformer"),
    ("norm", "norms (LayerNorm)", "transformer"),
    ("transformer_other", "other: patch embed, output head, unpatchify", "transformer"),
    ("guidance", "guidance combine *", "denoise"),
    ("bypassed", "work outside the marked modules *", "denoise"),
    ("scheduler", "scheduler step", "denoise"),
    ("vae", "VAE decode", None),
    ("output", "output: images to host, uint8 *", None),
    ("gaps", "host gaps (between phases)", None),
)
INFERRED = ("setup", "guidance", "bypassed", "output")  # placed between ranges, not marked by one
GAPS = "gaps"
BYPASSED = "bypassed"
# Why a marked phase holds nothing (PhaseRow.unmarked): a rule or a table reads the cause, and the
# words are the table's. BYPASS: modules of its kind were marked and never ran (the pipeline calls
# around them: a rewrite, a CUDA graph's replay, a compiled region); ABSENT: the candidate holds none.
BYPASS = "bypass"
ABSENT = "absent"
UNMARKED_WHY = {BYPASS: "unmarked: the pipeline bypasses the module (its marks never fired; its time is in "
                         "the row around it)",
                ABSENT: "unmarked: no module of this kind in the candidate"}
EPS_US = 1e-3  # timestamps are microseconds with nanosecond digits


def module_label(class_names: Iterable[str]) -> str | None:
    """The label of a module whose class and bases are named `class_names` (MRO order), or None."""
    for name in class_names:
        if name in MODULE_LABELS:
            return MODULE_LABELS[name]
        if name.endswith("TransformerBlock"):
            return "block"
    return None


@dataclass(frozen=True)
class Span:
    label: str
    start: float  # microseconds, one clock for all spans
    end: float
    device: float | None = None  # device microseconds of the kernels it launched, nested ones included (CUDA)

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Span:
        """A span from its wire form [label, start, end] or [label, start, end, device]."""
        if not 3 <= len(row) <= 4 or not isinstance(row[0], str):
            raise ValueError(f"span {row!r}: expected [label, start, end(, device)]")
        start, end = float(row[1]), float(row[2])
        device = float(row[3]) if len(row) == 4 and row[3] is not None else None
        if not end >= start:
            raise ValueError(f"span {row!r} ends before it starts")
        return cls(row[0], start, end, device)

    @property
    def dur(self) -> float:
        return self.end - self.start


@dataclass
class PhaseRow:
    key: str
    label: str
    parent: str | None
    level: int
    host_ms: float
    share: float  # of the call's wall
    calls: int  # ranges that marked it (0: inferred or a sum)
    inferred: bool
    per_step_ms: float | None = None  # denoising rows only
    device_ms: float | None = None  # CUDA: device time of the kernels launched in it
    unmarked: str | None = None  # BYPASS or ABSENT: no mark of it fired, so its 0 is not a measurement


@dataclass
class Attribution:
    wall_ms: float
    steps: int
    rows: list[PhaseRow]
    coverage: float  # share of the wall inside a phase (1 - host gaps / wall)
    device_ms: float | None = None  # CUDA: device time of every kernel the call launched
    notes: list[str] = field(default_factory=list)

    def row(self, key: str) -> PhaseRow:
        return next(r for r in self.rows if r.key == key)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Node:
    span: Span
    end: float  # clipped to its parent's end
    children: list[_Node] = field(default_factory=list)


def _tree(call: Span, spans: list[Span]) -> _Node:
    """Nest the labelled spans under the call by time (ranges on one thread nest; a span that
    outlives its parent is clipped to it)."""
    root = _Node(call, call.end)
    stack = [root]
    for s in sorted(spans, key=lambda s: (s.start, -s.end)):
        if s.start < call.start - EPS_US or s.start > call.end + EPS_US:
            continue
        while len(stack) > 1 and s.start >= stack[-1].end - EPS_US:
            stack.pop()
        node = _Node(s, min(s.end, stack[-1].end))
        stack[-1].children.append(node)
        stack.append(node)
    return root


def _dur(n: _Node) -> float:
    return max(0.0, n.end - n.span.start)


def unmarked(counts: Mapping[str, int], marks: Mapping[str, int] | None) -> dict[str, str]:
    """The marked phases none of whose ranges fired (by `counts`, ranges per phase), each with its
    cause: BYPASS where the worker marked modules of that kind (`marks`: label -> modules or
    methods marked), ABSENT where it found none. A parent is unmarked when all its children are
    and nothing of its own fired. Without `marks` (an older worker), nothing is said."""
    if marks is None:
        return {}
    out: dict[str, str] = {}
    for key, _, _ in PHASES:
        labels = [lb for lb, ph in SPAN_PHASE.items() if ph == key]
        if labels and not counts.get(key):
            out[key] = BYPASS if any(marks.get(lb) for lb in labels) else ABSENT
    for key, _, _ in reversed(PHASES):  # children before their parents
        kids = [k for k, _, p in PHASES if p == key and k not in INFERRED]
        if kids and all(k in out for k in kids) and not counts.get(key):
            out[key] = BYPASS if any(out[k] == BYPASS for k in kids) else ABSENT
    return out


def attribute(spans: Iterable[Span], marks: Mapping[str, int] | None = None) -> Attribution:
    """Exclusive host (and, on CUDA, device) time per phase of the one "call" span in `spans`;
    `marks` (label -> modules or methods the worker marked) names the phases that never fired.

    Raises ValueError when there is no call span, or more than one."""
    spans = list(spans)
    calls = [s for s in spans if s.label == CALL]
    if len(calls) != 1:
        raise ValueError(f"expected one '{CALL}' span, got {len(calls)}")
    call = calls[0]
    root = _tree(call, [s for s in spans if s.label in SPAN_PHASE])
    on_device = call.device is not None
    host: dict[str, float] = {k: 0.0 for k, _, _ in PHASES}
    device: dict[str, float] = {k: 0.0 for k, _, _ in PHASES}
    count: dict[str, int] = {k: 0 for k, _, _ in PHASES}
    _add_exclusive(root, on_device, host, device, count)
    top = _TopLevel.of(root.children)
    _place_gaps(call, top, [s for s in spans if s.label == OP], on_device, host, device)
    for key, _, parent in reversed(PHASES):  # children before their parents: sums bubble up
        if parent is not None:
            host[parent] += host[key]
            device[parent] += device[key]
    wall, steps = call.dur, top.steps()
    rows = _rows(host, device if on_device else None, count, unmarked(count, marks), wall, steps)
    coverage = 1.0 - host[GAPS] / wall if wall > 0 else 0.0
    notes = []
    if not top.ranges:
        notes.append("no marked range fired inside the call: the hooks saw none of this candidate's modules "
                     "(CUDA graph replay, compiled regions or classes of other names); read the operators and the "
                     "trace")
    return Attribution(wall_ms=wall / 1e3, steps=steps, rows=rows, coverage=max(0.0, coverage),
                       device_ms=call.device / 1e3 if call.device is not None else None, notes=notes)


def _add_exclusive(n: _Node, on_device: bool, host: dict[str, float], device: dict[str, float],
                   count: dict[str, int]) -> None:
    """Each range's own time (its children's taken out) into its phase, the whole tree below `n`."""
    for c in n.children:
        phase = SPAN_PHASE[c.span.label]
        host[phase] += _dur(c) - sum(_dur(g) for g in c.children)
        if on_device:
            device[phase] += max(0.0, (c.span.device or 0.0) - sum(g.span.device or 0.0 for g in c.children))
        count[phase] += 1
        _add_exclusive(c, on_device, host, device, count)


@dataclass(frozen=True)
class _TopLevel:
    """The call's top-level ranges and the landmarks its own time between them is placed by."""

    ranges: list[_Node]
    first_tf: int | None  # the first transformer range
    first_loop: int | None  # the loop's first range (a scheduler's where no transformer mark fired): setup ends there
    last_vae: int | None

    @classmethod
    def of(cls, top: list[_Node]) -> _TopLevel:
        first_tf = next((i for i, c in enumerate(top) if c.span.label == "transformer"), None)
        first_loop = first_tf if first_tf is not None else next(
            (i for i, c in enumerate(top) if c.span.label in ("scheduler.scale", "scheduler.step")), None)
        last_vae = max((i for i, c in enumerate(top) if c.span.label == "vae"), default=None)
        return cls(top, first_tf, first_loop, last_vae)

    def steps(self) -> int:
        return sum(1 for c in self.ranges if c.span.label == "scheduler.step") \
            or sum(1 for c in self.ranges if c.span.label == "transformer")

    def gap_phase(self, i: int, dev: float) -> str:
        """The phase of the interval before range `i` (i == len(ranges): after the last), which ran
        `dev` of device time."""
        before = self.ranges[i - 1].span.label if i > 0 else None
        after = self.ranges[i].span.label if i < len(self.ranges) else None
        if self.first_loop is not None and i <= self.first_loop:
            return "setup"
        if before == "transformer" and after == "scheduler.step":
            return "guidance"
        if self.last_vae is not None and i > self.last_vae:
            return "output"
        # Between ranges yet doing the model's work: the model's call before a scheduler step where
        # no transformer mark fired (a rewrite around the marked modules), or any kernels launched
        # there (a CUDA graph's replay, a compiled region): the pipeline's time, never a host gap.
        if dev > 0 or (self.first_tf is None and after == "scheduler.step"):
            return BYPASSED
        return GAPS


def _place_gaps(call: Span, top: _TopLevel, ops: list[Span], on_device: bool, host: dict[str, float],
                device: dict[str, float]) -> None:
    """The call's own time, between its top-level ranges: placed by what lies on either side."""
    edges = [call.start] + [x for c in top.ranges for x in (c.span.start, c.end)] + [call.end]
    for i in range(len(top.ranges) + 1):  # the interval before ranges[i] (i == len: after the last)
        a, b = edges[2 * i], edges[2 * i + 1]
        if b - a <= 0:
            continue
        dev = sum(o.device or 0.0 for o in ops if a - EPS_US <= o.start < b) if on_device else 0.0
        phase = top.gap_phase(i, dev)
        host[phase] += b - a
        device[phase] += dev


def _rows(host: dict[str, float], device: dict[str, float] | None, count: dict[str, int], why: dict[str, str],
          wall: float, steps: int) -> list[PhaseRow]:
    """A row a phase, in PHASES's order, indented by its depth; `device` only on CUDA."""
    parents = {k: p for k, _, p in PHASES}
    rows = []
    for key, label, parent in PHASES:
        level, p = 0, parent
        while p is not None:
            level, p = level + 1, parents[p]
        in_loop = key == "denoise" or parent is not None
        rows.append(PhaseRow(key=key, label=label, parent=parent, level=level, host_ms=host[key] / 1e3,
                             share=host[key] / wall if wall > 0 else 0.0, calls=count[key],
                             inferred=key in INFERRED,
                             per_step_ms=host[key] / 1e3 / steps if in_loop and steps else None,
                             device_ms=device[key] / 1e3 if device is not None else None, unmarked=why.get(key)))
    return rows

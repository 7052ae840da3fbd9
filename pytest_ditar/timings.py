"""Where a gated run's wall time goes: exclusive time per named phase.

A span's time excludes the spans opened inside it (a holdout that builds the baseline code
books the build under the build's own name), so the phases add up to no more than the wall
time and a fraction of the run can be read straight off them.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Iterator

# Phases grouped the way the run summary and the benchmarks report them.
GROUPS = {
    "build": ("build.candidate", "build.worktree"),
    "quality": ("quality.generate", "quality.metrics"),
    "firewall": ("holdout", "semantic"),
    "perf": ("perf.build_champion", "perf.lanes"),
}


@dataclass
class PhaseClock:
    seconds: dict[str, float] = field(default_factory=dict)
    timed_s: float = 0.0  # device-synchronized inference inside the lanes, warm-up included
    _stack: list[list[float]] = field(default_factory=list)  # [start, time spent in children]
    started: float = field(default_factory=lambda: time.perf_counter())

    @contextlib.contextmanager
    def span(self, name: str) -> Iterator[None]:
        frame = [time.perf_counter(), 0.0]
        self._stack.append(frame)
        try:
            yield
        finally:
            self._stack.pop()
            total = time.perf_counter() - frame[0]
            self.seconds[name] = self.seconds.get(name, 0.0) + total - frame[1]
            if self._stack:
                self._stack[-1][1] += total

    def group(self, name: str) -> float:
        return sum(self.seconds.get(k, 0.0) for k in GROUPS[name])

    def as_dict(self, wall_s: float | None = None) -> dict[str, float | None]:
        wall = wall_s if wall_s is not None else time.perf_counter() - self.started
        perf = self.group("perf")
        out: dict[str, float | None] = {k: round(v, 4) for k, v in sorted(self.seconds.items())}
        out.update({f"group.{g}": round(self.group(g), 4) for g in GROUPS})
        out["perf.timed"] = round(self.timed_s, 4)
        out["perf.overhead"] = round(perf / self.timed_s, 4) if self.timed_s else None
        out["firewall.fraction"] = round(self.group("firewall") / wall, 4) if wall else None
        out["wall"] = round(wall, 4)
        return out

    def line(self, wall_s: float | None = None) -> str:
        d = self.as_dict(wall_s)
        parts = [f"{g} {d[f'group.{g}']:.1f}s" for g in GROUPS if d[f"group.{g}"]]
        if d["perf.overhead"]:
            parts.append(f"perf overhead {d['perf.overhead']:.3f}x of {d['perf.timed']:.1f}s timed")
        if d["group.firewall"]:
            parts.append(f"firewall {100 * (d['firewall.fraction'] or 0):.1f}% of the run")
        return f"ditar: time: {', '.join(parts)}; wall {d['wall']:.1f}s"

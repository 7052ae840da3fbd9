"""Where a gated run's wall time goes: exclusive time per named phase.

A span's time excludes the spans opened inside it (a holdout that builds the baseline code
books the build under the build's own name), so the phases add up to no more than the wall
time and a fraction of the run can be read straight off them.

Spans also keep when they first opened and last closed (seconds since the epoch), so the
clocks of xdist workers fold into the controller's: the busy seconds add up, the windows
span from the earliest worker's start to the latest one's end, and what is left of the wall
time is start-up (interpreter, imports, CUDA, collection) and hand-over.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, cast

# Phases grouped the way the run summary and the benchmarks report them.
GROUPS = {
    # before any candidate code runs: the state's verification, git, the guards
    "guards": ("gate.guards",),
    "build": ("build.candidate", "build.worktree"),
    "quality": ("quality.generate", "quality.metrics"),
    "firewall": ("holdout", "semantic"),
    # the champion's and its twin's builds (the wait on them), the corpus they answer too, then the lanes
    "perf": ("perf.build_champion", "perf.build_twin", "perf.reference_corpus", "perf.lanes"),
    # the state's checks after the candidate ran, the decision's statistics, then writing it down:
    # summary, ledger row, backup, revert
    "verdict": ("gate.checks", "gate.decide", "gate.record"),
}
# Inside perf.lanes, kept apart for the record (never added to a group): what the run's own
# integrity checks cost, the audit of timed outputs and the caching probe.
INTEGRITY = ("perf.audit", "perf.probe")
# Also inside perf.lanes, kept apart the same way: the timed rounds' round trips (the judge's time
# less the worker's own, each call) and the judge's host-speed check after each round.
UPKEEP = ("perf.round_trips", "perf.host_checks")
# Also inside perf.lanes and kept apart the same way: the lanes' warm-up calls (device-synchronized
# inference, in the timed seconds but not in a verdict), the candidate's, then the interleaved
# champion's and its twin's together. A candidate that compiles lazily compiles here.
WARMUP = ("perf.warmup", "perf.warmup_champion")
# Also inside perf.lanes, kept apart the same way: the anchor's timed calls (core.anchor), the
# candidate's confirming calls (core.meantime.TAIL_CALLS) and every side's empty calls (core.roundtrip).
CHECKS = ("perf.anchor", "perf.confirm", "perf.empty_calls")


@dataclass
class PhaseClock:
    seconds: dict[str, float] = field(default_factory=dict)
    timed_s: float = 0.0  # device-synchronized inference inside the lanes, warm-up included
    first: dict[str, float] = field(default_factory=dict)  # span name -> epoch of its first start
    last: dict[str, float] = field(default_factory=dict)  # span name -> epoch of its last end
    workers: int = 0  # xdist workers folded in
    # Each worker's own build() seconds, by worker name ("candidate"; "commit-<sha7>" for the
    # champion's code, which the holdout's baseline shares when it is the same commit;
    # "twin-<sha7>"). The build spans above only count the judge's wait, which overlaps other
    # work: these say what a build (a compile, say) cost.
    builds: dict[str, float] = field(default_factory=dict)
    # what a worker's build reply says of itself (its CPU seconds, its device opening): where a slow
    # build's seconds went, for the candidate's, which every run waits on
    build_detail: dict[str, dict[str, float]] = field(default_factory=dict)
    # How long the workers' zygote took to import torch and diffusers: what a CPU build mostly waits
    # on (it overlaps the judge's start-up and guards; a worker's own build starts after it).
    imports_s: float = 0.0
    # "warm": the workers forked from a zygote an earlier run kept; else whether this one is kept
    # for the next run, and why a recorded one was not used (runtime.zygote.state)
    zygote: str = ""
    # when the judge's process started (runtime.clock.process_start_epoch; core reads no /proc)
    process_start: float | None = None
    _stack: list[list[float]] = field(default_factory=list)  # [start, time spent in children]
    # The judge's time between its top-level spans (pytest's own work, fixtures, reports), booked
    # under the span it preceded: so the time line names where every unbooked second lies.
    gaps: dict[str, float] = field(default_factory=dict)
    _last_end: float | None = None
    started: float = field(default_factory=lambda: time.perf_counter())
    _epoch0: float = field(default_factory=lambda: time.time())

    def _epoch(self, perf: float) -> float:
        # one time source inside spans (perf_counter), mapped onto the epoch for cross-process windows
        return self._epoch0 + (perf - self.started)

    @contextlib.contextmanager
    def span(self, name: str) -> Iterator[None]:
        frame = [time.perf_counter(), 0.0]
        if not self._stack and self._last_end is not None:
            self.gaps[name] = self.gaps.get(name, 0.0) + frame[0] - self._last_end
        self._stack.append(frame)
        self.first.setdefault(name, self._epoch(frame[0]))
        try:
            yield
        finally:
            self._stack.pop()
            end = time.perf_counter()
            total = end - frame[0]
            self.seconds[name] = self.seconds.get(name, 0.0) + total - frame[1]
            self.last[name] = self._epoch(end)
            if self._stack:
                self._stack[-1][1] += total
            else:
                self._last_end = end

    def note(self, name: str, seconds: float) -> None:
        """Book time already inside an open or closed span under a name of its own (INTEGRITY,
        WARMUP)."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def timed(self, seconds: float) -> None:
        """Device-synchronized inference a lane timed (its rounds and warm-ups, every side)."""
        self.timed_s += seconds

    def imported(self, imports_s: float, zygote: str) -> None:
        """How long the workers' zygote took to import torch and diffusers, and its state."""
        self.imports_s, self.zygote = imports_s, zygote

    def built(self, worker: str, seconds: float | None, detail: dict[str, float] | None = None) -> None:
        """A worker's build() took `seconds` (its own report; None: not built). One worker builds
        once, and waiting for it again notes the same figure, so the larger one is kept."""
        if seconds is not None:
            self.builds[worker] = max(self.builds.get(worker, 0.0), float(seconds))
        if detail:
            self.build_detail[worker] = dict(detail)

    def group(self, name: str) -> float:
        return sum(self.seconds.get(k, 0.0) for k in GROUPS[name])

    def window(self, group: str | None = None) -> float | None:
        """Wall time from the group's (or any phase's) first start to its last end, across folded-in workers."""
        names = [k for k in (GROUPS[group] if group else self.first) if k in self.first and k in self.last]
        if not names:
            return None
        return max(self.last[k] for k in names) - min(self.first[k] for k in names)

    def startup(self) -> float | None:
        """From this process's start to the first phase anywhere (a worker's, under xdist)."""
        if self.process_start is None or not self.first:
            return None
        return max(0.0, min(self.first.values()) - self.process_start)

    def wall(self) -> float:
        """The process's wall time so far: from its start where known, else from this clock's."""
        now = time.perf_counter()
        if self.process_start is None:
            return now - self.started
        return self._epoch(now) - self.process_start

    def to_payload(self) -> dict[str, Any]:
        """What a worker sends the controller (JSON-able)."""
        return {"seconds": dict(self.seconds), "first": dict(self.first), "last": dict(self.last),
                "timed_s": self.timed_s, "builds": dict(self.builds), "build_detail": dict(self.build_detail),
                "imports_s": self.imports_s,
                "zygote": self.zygote}

    def absorb(self, payload: dict[str, Any]) -> None:
        """Fold a worker's clock in: busy seconds add up, windows widen to cover it."""
        self.workers += 1
        for k, v in payload.get("seconds", {}).items():
            self.seconds[k] = self.seconds.get(k, 0.0) + float(v)
        for k, v in payload.get("first", {}).items():
            self.first[k] = min(self.first.get(k, v), float(v))
        for k, v in payload.get("last", {}).items():
            self.last[k] = max(self.last.get(k, v), float(v))
        self.timed_s += float(payload.get("timed_s", 0.0))
        for k, v in payload.get("builds", {}).items():  # each judge built its own: the longest is what one cost
            self.built(k, v, payload.get("build_detail", {}).get(k))
        self.imports_s = max(self.imports_s, float(payload.get("imports_s", 0.0)))
        self.zygote = self.zygote or str(payload.get("zygote") or "")

    def as_dict(self, wall_s: float | None = None) -> dict[str, float | None]:
        wall = wall_s if wall_s is not None else self.wall()
        perf = self.group("perf")
        out: dict[str, float | None] = {k: round(v, 4) for k, v in sorted(self.seconds.items())}
        out.update({f"group.{g}": round(self.group(g), 4) for g in GROUPS})
        out.update({f"window.{g}": None if w is None else round(w, 4) for g in GROUPS for w in [self.window(g)]})
        # when each group first started (epoch): what ran beside what
        out.update({f"start.{g}": min(self.first[k] for k in GROUPS[g] if k in self.first)
                    for g in GROUPS if any(k in self.first for k in GROUPS[g])})
        whole = self.window()
        out["window.all"] = None if whole is None else round(whole, 4)
        startup = self.startup()
        out["startup"] = None if startup is None else round(startup, 4)
        out["workers"] = self.workers
        out.update({f"worker_build.{k}": round(v, 4) for k, v in sorted(self.builds.items())})
        out.update({f"worker_build.{k}.{d.removesuffix('_s')}": round(v, 4)
                    for k, dd in sorted(self.build_detail.items()) for d, v in sorted(dd.items())})
        out["zygote_imports"] = round(self.imports_s, 4)
        out["zygote_warm"] = 1.0 if self.zygote == "warm" else 0.0
        out["perf.timed"] = round(self.timed_s, 4)
        out["perf.overhead"] = round(perf / self.timed_s, 4) if self.timed_s else None
        out["firewall.fraction"] = round(self.group("firewall") / wall, 4) if wall else None
        out.update({f"between.{k}": round(v, 4) for k, v in sorted(self.gaps.items())})
        out["between"] = round(sum(self.gaps.values()), 4)
        out["wall"] = round(wall, 4)
        return out

    def _build_note(self, worker: str) -> str:
        """The candidate's build, which every run waits on, in parts: its own CPU, and the device's
        opening (begun at the worker's hello) where it ran on into the build."""
        d = self.build_detail.get(worker) if worker == "candidate" else None
        if not d:
            return ""
        note = [f"cpu {_s(d['build_cpu_s'])}"] if "build_cpu_s" in d else []
        if d.get("open_s"):
            note.append(f"device opened in {_s(d['open_s'])}, {_s(d.get('open_in_build_s', 0.0))} of it inside")
        return f" ({'; '.join(note)})" if note else ""

    def line(self, wall_s: float | None = None) -> str:
        d = self.as_dict(wall_s)
        parts = [f"start-up {_s(d['startup'])}"] if d["startup"] is not None else []
        for g in GROUPS:
            busy, window = d[f"group.{g}"], d[f"window.{g}"]
            if not busy:
                continue
            if self.workers > 1 and window is not None:  # concurrent: the window is what the wall sees
                parts.append(f"{g} {_s(window)} window ({_s(busy)} busy)")
            else:
                parts.append(f"{g} {_s(busy)}")
        if self.zygote == "warm":
            parts.append("zygote warm (kept by an earlier run)")
        elif self.imports_s:
            parts.append(f"zygote imports {_s(self.imports_s)}" + (f" ({self.zygote})" if self.zygote else ""))
        if self.builds:
            parts.append("built in " + " / ".join(f"{k} {_s(v)}{self._build_note(k)}"
                                                  for k, v in sorted(self.builds.items())))
        warm, warm_champion = (d.get(k) or 0.0 for k in WARMUP)
        if warm or warm_champion:
            parts.append(f"warm-up {_s(warm)}" + (f" (champion and twin {_s(warm_champion)})" if warm_champion else ""))
        if d["perf.overhead"]:
            parts.append(f"perf overhead {d['perf.overhead']:.3f}x of {d['perf.timed']:.1f}s timed")
        trips, host = (d.get(k) or 0.0 for k in UPKEEP)
        if trips or host:
            parts.append(f"round trips {_s(trips)}, host checks {_s(host)}")
        anchor, confirm, empty = (d.get(k) or 0.0 for k in CHECKS)
        if anchor or confirm or empty:
            parts.append(f"anchor {_s(anchor)}, confirming calls {_s(confirm)}, empty calls {_s(empty)}")
        checks = sum(d.get(k) or 0.0 for k in INTEGRITY)
        if checks:
            wall = cast(float, d["wall"])  # as_dict always sets it
            parts.append(f"audit+probe {_s(checks)} ({100 * checks / wall:.1f}% of the run)")
        if d.get("holdout.reference"):
            parts.append(f"holdout reference {_s(cast(float, d['holdout.reference']))} beside the build and quality")
        if d["group.firewall"]:
            parts.append(f"firewall {100 * (d['firewall.fraction'] or 0):.1f}% of the run")
        if self.gaps and self.workers <= 1:
            most = max(self.gaps, key=lambda k: self.gaps[k])
            parts.append(f"between phases {_s(sum(self.gaps.values()))} (most before {most} {_s(self.gaps[most])})")
        if self.workers > 1 and d["window.all"] is not None:
            parts.append(f"all phases {_s(d['window.all'])} window")
        on = f" on {self.workers} workers" if self.workers > 1 else ""
        return f"ditar: time{on}: {', '.join(parts)}; wall {d['wall']:.1f}s"


def _s(seconds: float) -> str:
    return f"{seconds:.2f}s" if seconds < 10 else f"{seconds:.1f}s"

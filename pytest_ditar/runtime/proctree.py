"""The candidate's processes, found through /proc: every one it started, detached ones included.

Stopping a worker's process group misses what the candidate moved out of it: a double fork plus
setsid() leaves a process in a session of its own, re-parented away from the worker, free to burn
the CPU while the other side is timed. So the judge finds processes by ancestry instead:

- the judge, the zygote and each worker are child subreapers (PR_SET_CHILD_SUBREAPER), so an
  orphan is re-parented to the nearest of them, never to init: it stays a descendant of the judge;
- the zygote and every worker run in a session of their own, and no process can join another
  session, so whatever a worker starts stays outside the judge's session.

The candidate's processes are therefore the trees of the judge's children outside its session: the
zygote's (the zygote itself excepted), each spawned worker's, and any orphan's. One read of
/proc/*/stat gives the table this is computed from.

Linux only. Without /proc (macOS), `scan` returns None and the judge falls back to process groups,
which a detached process escapes.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

PR_SET_CHILD_SUBREAPER = 36
SETTLE_ROUNDS = 32  # rescans after signalling: a process forking as it is signalled has children to catch


def become_subreaper() -> bool:
    """Orphans of this process's descendants are re-parented to it instead of init (Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def pid_exists(pid: int) -> bool:
    """Whether a process of that pid exists (one of another user's counts: it cannot be signalled)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def started(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, from /proc), which tells it from a later
    process given the same pid; None when it is gone or a zombie (a killed judge not yet reaped),
    or where there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            rest = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if rest[0] in ("Z", "X") else rest[19]


def started_after(pid: int, when: float) -> bool | None:
    """Whether the live process `pid` started after the epoch time `when` (so is not the one that
    ran then); None where /proc cannot tell (no /proc, or the process is gone or a zombie)."""
    ticks = started(pid)
    try:
        with open("/proc/stat") as fh:
            boot = next(int(line.split()[1]) for line in fh if line.startswith("btime "))
    except (OSError, StopIteration, ValueError):
        return None
    return None if ticks is None else boot + int(ticks) / os.sysconf("SC_CLK_TCK") > when + 1.0


@dataclass
class Table:
    """pid -> (state, ppid, process group, session) of every process, at one moment."""

    procs: dict[int, tuple[str, int, int, int]]
    children: dict[int, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for pid, (_, ppid, _, _) in self.procs.items():
            self.children.setdefault(ppid, []).append(pid)

    def alive(self, pid: int) -> bool:
        """There and able to run (a zombie has nothing left to run)."""
        return pid in self.procs and self.procs[pid][0] not in ("Z", "X")

    def pgrp(self, pid: int) -> int | None:
        return self.procs[pid][2] if pid in self.procs else None

    def session(self, pid: int) -> int | None:
        return self.procs[pid][3] if pid in self.procs else None

    def parent(self, pid: int) -> int | None:
        return self.procs[pid][1] if pid in self.procs else None

    def tree(self, root: int) -> set[int]:
        """`root` and its descendants."""
        out, todo = set(), [root] if root in self.procs else []
        while todo:
            pid = todo.pop()
            out.add(pid)
            todo.extend(self.children.get(pid, ()))
        return out

    def foreign(self, judge: int, spare: Iterable[int] = (), zygotes: Iterable[int] = ()) -> set[int]:
        """The trees of `judge`'s children outside its session (the candidates' processes) and of
        the `zygotes`' children (a zygote kept warm from an earlier run is not the judge's child;
        it serves one judge at a time), less `spare`. A judge that runs another judge (a `dit-ar`
        or pytest subprocess, in its session) leaves that one's workers alone."""
        own = self.session(judge)
        roots = [c for c in self.children.get(judge, ()) if self.session(c) != own]
        roots += [c for z in zygotes for c in self.children.get(z, ())]
        return set().union(*(self.tree(r) for r in roots)) - set(spare)


def _stat(pid: int | str) -> tuple[str, int, int, int] | None:
    """(state, ppid, process group, session) from /proc/PID/stat; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
        # the command name may hold spaces and parentheses: fields start after the last ')'
        state, ppid, pgrp, sid = raw[raw.rindex(b")") + 2:].split(None, 4)[:4]
        return state.decode(), int(ppid), int(pgrp), int(sid)
    except (OSError, ValueError):
        return None  # it exited between listing and reading


def _children_files() -> bool:
    """Whether the kernel lists each thread's children (/proc/PID/task/TID/children, Linux 3.5+
    with CONFIG_PROC_CHILDREN: the distributions' kernels; not gVisor's)."""
    return os.path.exists(f"/proc/self/task/{os.getpid()}/children")


_WALKABLE: list[bool] = []


def scan(roots: Iterable[int] | None = None) -> Table | None:
    """The processes of the host from one pass over /proc/*/stat; with `roots`, only those and
    their descendants, walked through each thread's children list where the kernel keeps one: a
    few dozen reads instead of every process's, twice per timed call (on a GPU host with a
    thousand processes, most of the judge's time between calls). Either way the same trees. None
    without /proc."""
    if roots is not None:
        if not _WALKABLE:
            _WALKABLE.append(_children_files())
        if _WALKABLE[0]:
            return _walk(roots)
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    procs = {int(n): st for n in names if n.isdigit() and (st := _stat(n)) is not None}
    return Table(procs) if procs else None


def _walk(roots: Iterable[int]) -> Table | None:
    procs: dict[int, tuple[str, int, int, int]] = {}
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in procs or (st := _stat(pid)) is None:
            continue
        procs[pid] = st
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:  # a child is listed under the thread that forked it
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                    todo.extend(int(c) for c in fh.read().split())
            except (OSError, ValueError):
                continue
    return Table(procs) if procs else None


def descendants(roots: Iterable[int]) -> set[int]:
    """`roots` and every process under them."""
    tops = set(roots)
    t = scan(tops)
    return set(tops).union(*(t.tree(r) for r in tops)) if t is not None else tops


def settle(select: Callable[[Table], set[int]], sig: int,
           roots: Iterable[int] | None = None) -> tuple[set[int], Table | None]:
    """Send `sig` to every process `select` picks, rescanning until a scan picks nothing new: a
    process that forked just before its signal has a child the first scan did not see. Returns the
    pids signalled and the last table (one scan when there is nothing to signal). `roots`: the
    scans need only their trees (scan)."""
    done: set[int] = set()
    table = None
    roots = None if roots is None else list(roots)
    for _ in range(SETTLE_ROUNDS):
        table = scan(roots)
        if table is None:
            break
        new = select(table) - done
        if not new:
            break
        for pid in new:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        done |= new
    return done, table


def signal_pids(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def reap(pids: Iterable[int], wait_s: float = 0.5) -> None:
    """Collect the exit of killed orphans re-parented to this process (else they stay zombies)."""
    left, deadline = set(pids), time.monotonic() + wait_s
    while left and time.monotonic() < deadline:
        for pid in list(left):
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    left.discard(pid)
            except ChildProcessError:
                left.discard(pid)  # not ours (any more)
        if left:
            time.sleep(0.005)


@dataclass(frozen=True)
class Activity:
    """What a worker's process tree is doing, at one moment (runtime.worker's wait for a reply)."""

    ticks: int  # CPU clock ticks used so far by the tree (its reaped children included)
    root_stopped: bool  # the worker's own process (its group's leader) is stopped
    stopped: int  # processes of the tree that are stopped


def activity(root: int) -> Activity | None:
    """`root`'s tree's CPU use and stopped processes; None without /proc or once it is gone."""
    t = scan([root])
    if t is None or root not in t.procs:
        return None
    ticks, stopped = 0, 0
    for pid in t.tree(root):
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                raw = fh.read()
            rest = raw[raw.rindex(b")") + 2:].split()
            # fields 14-17 of stat (utime, stime, cutime, cstime): 11-14 after the command name
            ticks += sum(int(x) for x in rest[11:15])
            stopped += rest[0] == b"T"
        except (OSError, ValueError, IndexError):
            continue
    return Activity(ticks, t.procs[root][0] == "T", stopped)


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"


# ---- the judge's use: hold, release, end ------------------------------------------------------
_HELD: set[int] = set()  # stopped one by one by hold_all_but; continued by release


def holding() -> bool:
    return bool(_HELD)


def hold(keep: list[int], paused_groups: set[int], spared: set[int]) -> Table | None:
    """Stop every process of the candidates outside the trees of `keep` (and `spared`); continue
    those inside that an earlier call held. Paused groups (stopped whole by killpg) and stopped
    processes are left alone, so a scan finds nothing to signal unless something left its
    worker's group; one continued by someone else since it was held is stopped again. Returns the
    last table."""
    judge = os.getpid()

    def outside(t: Table) -> set[int]:
        kept = set().union(spared, *(t.tree(k) for k in keep))
        return {p for p in t.foreign(judge, kept, spared) if t.alive(p) and t.procs[p][0] not in "Tt"
                and t.pgrp(p) not in paused_groups}

    held, table = settle(outside, signal.SIGSTOP, [judge, *spared])
    _HELD.update(held)
    if table is not None:
        back = _HELD & set().union(*(table.tree(k) for k in keep))
        signal_pids(back, signal.SIGCONT)
        _HELD.difference_update(back)
    return table


def release(root: int | None) -> None:
    """Continue the held processes of `root`'s tree; all of them when `root` is None."""
    table = scan([root]) if root is not None else None
    back = set(_HELD) if root is None else _HELD & (table.tree(root) if table else set())
    signal_pids(back, signal.SIGCONT)
    _HELD.difference_update(back)


def strays(t: Table, workers: list[int], spared: set[int]) -> dict[int, set[int]]:
    """worker pid -> the processes found outside its process group that it started: those in its
    tree, and orphans re-parented away from every worker, counted for the worker whose session or
    group they kept, else for every worker."""
    judge = os.getpid()
    trees = {w: t.tree(w) for w in workers}
    out = {w: {p for p in trees[w] if t.alive(p) and t.pgrp(p) != w} for w in workers}
    for p in t.foreign(judge, set().union(spared, *trees.values()), spared):
        if t.alive(p):
            owners = [w for w in workers if w in (t.session(p), t.pgrp(p))] or workers
            for w in owners:
                out[w].add(p)
    return out


def end_all_but(workers: list[int], spared: set[int], known_children: Iterable[int] = frozenset()) -> None:
    """SIGKILL every process of the candidates outside the trees of `workers` and `spared`,
    rescanning until nothing new turns up, and reap those re-parented to the judge (not the
    `known_children` someone else waits for)."""
    judge = os.getpid()

    def doomed(t: Table) -> set[int]:
        return {p for p in t.foreign(judge, set().union(spared, *(t.tree(w) for w in workers)), spared) if t.alive(p)}

    killed, _ = settle(doomed, signal.SIGKILL, [judge, *spared])
    _HELD.difference_update(killed)
    reap(killed - set(known_children))

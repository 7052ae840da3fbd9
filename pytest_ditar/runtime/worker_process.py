"""One worker's process, as the judge holds it: started (forked from the zygote, else spawned) in
a sandbox of its own (`runtime.sandbox`: read-only filesystem but its scratch, its own PID and
network namespaces), in a process group of its own, paused while another worker is timed (every
other process the candidates started stopped too, detached ones included: `runtime.proctree`),
and killed with everything it started. The judge's live workers are registered here: no worker
outlives the judge. What is said to the process, and read back: runtime.worker's CandidateWorker.
"""
from __future__ import annotations

import atexit
import contextlib
import mmap
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Iterator, cast

from pytest_ditar.core.errors import CandidateError
from pytest_ditar.core.vocabulary import ENV_CPU_THREADS
from pytest_ditar.interface import PipelineSpec
from pytest_ditar.runtime import boxdir, logs, proctree, sandbox_check, sandbox_mounts, zygote

# A gated run builds up to four workers at once: the candidate, the champion, its twin and the
# holdout's baseline. On a GPU host each with torch's default pool of every core spin against each
# other: DiT-XL's from_pretrained took 0.44 s alone and 6.3 s three at once on a 16-core H200 host
# (benchmarks/build_cost.py), most of a run's fixed cost.
BUILDS_AT_ONCE = 4


def worker_threads(device: str, cores: int, setting: str | None = None) -> int:
    """Torch intra-op threads of a worker: `setting` (DITAR_CPU_THREADS) where given; else one on
    CPU, where the lanes time toy-sized ops and a pool only adds noise, and on a GPU the host's
    cores shared among the builds that run at once."""
    if setting:
        try:
            n = int(setting)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"{ENV_CPU_THREADS}={setting!r}: give a whole number of threads, at least 1 "
                             f"(or unset it: 1 on CPU, the cores / {BUILDS_AT_ONCE} on a GPU)")
        return n
    return 1 if device == "cpu" else max(1, cores // BUILDS_AT_ONCE)


class WorkerProcess:
    """One candidate pipeline's process: its configuration, its sandbox, its start, pause and end.
    runtime.worker.CandidateWorker adds the calls."""


    def __init__(self, name: str, candidate_dir: Path, spec: PipelineSpec, *, log_path: Path,
                 memory_budget_gib: float | None = None, cpu_threads: int | None = None, cwd: Path | None = None,
                 env: dict[str, str] | None = None, build_timeout_s: float | None = None, sandboxed: bool = True,
                 writable: "tuple[Path, ...] | list[Path]" = (), compile_cache: Path | None = None,
                 compile_cache_writable: bool = False, keep_compile_writes: bool = False,
                 masks: "tuple[str, ...]" = (), reads: "tuple[str, ...]" = ()):
        self.name = name
        self.candidate_dir = Path(candidate_dir).resolve()
        self.spec = spec
        self.log_path = Path(log_path)
        self.memory_budget_gib = memory_budget_gib
        # None: the default share on its device (DITAR_CPU_THREADS where set)
        self.cpu_threads = cpu_threads if cpu_threads is not None else \
            worker_threads(spec.device, len(os.sched_getaffinity(0)), os.environ.get(ENV_CPU_THREADS))
        self.cwd = cwd
        self.env = env  # the worker's environment; None: the judge's
        # how long build() may take wherever the build is waited for (config build_timeout_s): a
        # cold compile belongs there, and a request's own timeout starts only once it is built
        self.build_timeout_s = build_timeout_s
        # runtime.sandbox: read-only filesystem but its scratch (cwd), its buffer's folder and
        # `writable`; the compile cache writable only where compile_cache_writable (the champion's
        # side), else an overlay whose writes stay in this sandbox (the candidate's)
        self.sandboxed = sandboxed
        self.writable = tuple(Path(p) for p in writable)
        self.compile_cache = Path(compile_cache) if compile_cache is not None else None
        self.compile_cache_writable = compile_cache_writable
        # keep_compile_writes: a read-only cache's writes land in a folder of the judge's (made at start,
        # `compile_writes`), which the judge adds to the cache if the candidate is kept and removes
        # (loop.run.session.close, runtime.compiled); else in a tmpfs of its sandbox's own
        self.keep_compile_writes = keep_compile_writes
        self.compile_writes: Path | None = None
        self.masks = tuple(masks)  # host paths its sandbox hides (the repository's git, mutable paths, state)
        # host paths it reads as a user's worker would (the project, beside its model), bound back
        # where they lie under a temporary folder its sandbox makes its own (runtime.hostview.PRIVATE_TEMP)
        self.reads = tuple(reads)
        self._own_scratch: Path | None = None  # a scratch directory made for a worker given no cwd
        self.buffer_dir: Path | None = None  # the shared-memory buffer's own folder (bound into the sandbox)
        self._proc: subprocess.Popen | None = None
        self._launcher: threading.Thread | None = None  # asks the zygote for the fork off the judge's thread
        self._child: tuple[socket.socket, dict[str, str]] | None = None  # the worker's socket end until it runs
        self.conn: Connection | None = None
        self.pending: list[str] = []  # ops sent whose replies are not read yet, in order
        self.info: dict[str, Any] = {}  # hello's reply: pid, argv, fingerprint
        self.build_s: float | None = None
        self.slowest_s = 0.0  # its slowest call so far (judge's clock): another worker's hang bound
        # the build reply's own account: its thread's CPU seconds, the device opening and how much of
        # it fell inside the build (runtime.worker_device op_build); informational, the judge times the wait
        self.build_detail: dict[str, float] = {}
        self.error: CandidateError | None = None  # a failed worker stays failed
        self.paused = False
        self._quit_sent = False
        self.t_header = 0.0  # when the last reply's header arrived (judge's clock)
        self.buffer_path: Path | None = None  # shared-memory file the worker writes its arrays into
        self.buffer_file: Any = None
        self.view: mmap.mmap | None = None
        self.strays: list[tuple[int, str]] = []  # (pid, command line) it started outside its process group
        self._box: sandbox_mounts.Spec | None = None

    # ---- its process -----------------------------------------------------------------------
    def _sandbox_spec(self) -> sandbox_mounts.Spec:
        """This worker's sandbox (runtime.sandbox); raises SandboxUnavailable where none can be made.
        Makes its scratch directory (when it was given no cwd) and its buffer's folder."""
        avail = sandbox_check.availability()
        if avail.problem:
            raise sandbox_check.SandboxUnavailable(avail.problem)
        if self.cwd is None:
            self._own_scratch = self.cwd = boxdir.new("work")
        self.buffer_dir = boxdir.new("io")
        # Every role alike (runtime.boxdir): its package's folder, scratch and buffer at fixed paths,
        # the compile cache an overlay whose writes land in a judge's folder, whatever the role: the
        # judge adds a kept candidate's (runtime.compiled) and drops everyone else's.
        binds = [(str(self.candidate_dir.parent), boxdir.CODE, False),
                 (str(Path(self.cwd).resolve()), boxdir.WORK, True), (str(self.buffer_dir.resolve()), boxdir.IO, True)]
        private: list[str] = []
        kept: list[str] = []
        if self.compile_cache is not None:
            (self.compile_cache / "triton").mkdir(parents=True, exist_ok=True)  # bound, so it must exist
            private.append(str(self.compile_cache.resolve()))
            self.compile_writes = Path(sandbox_mounts.kept_folder("w", str(boxdir.new("cache"))))
            kept.append(str(self.compile_writes.resolve()))
        return sandbox_mounts.Spec(
            bwrap=str(avail.bwrap), writable=tuple(str(Path(p).resolve()) for p in self.writable),
            private=tuple(private), kept=tuple(kept), private_at=(boxdir.CACHE,) * len(private),
            devices=sandbox_mounts.device_nodes(self.spec.device), overlay=avail.overlay,
            masks=(*self.masks, *boxdir.hidden_outside_shm()), binds=tuple(binds), cwd=boxdir.WORK,
            reads=(str(self.spec.model_dir), *self.reads),
            unix_sockets=sandbox_mounts.unix_sockets_needed(self.spec.device),  # a CUDA group's NCCL too
            shield=avail.shield)

    def _launch(self, z: Any, child: socket.socket, env: dict[str, str]) -> None:
        box = self._box.to_json() if self._box is not None else None
        self._proc = _fork_from_zygote(z, [child.fileno()], self.log_path, self.cwd, env, box)
        if self._proc is not None:  # the worker holds its end now: ours kept open hid its death (no EOF)
            child.close()

    @property
    def proc(self) -> Any:
        """The worker's process (Popen or ZygoteChild), once launched; None before start()."""
        if self._launcher is not None:
            self._launcher.join()
            self._launcher = None
            self._launched()
        return self._proc

    def _launched(self) -> None:
        """Once the zygote has answered: a fresh interpreter where it forked nothing (it refused or
        died), from this thread; then the worker's end of the socket is closed here."""
        child, env = cast("tuple[socket.socket, dict[str, str]]", self._child)  # set with the launcher
        if self._proc is None:
            self._proc = self._spawn(child.fileno(), env)
        child.close()
        self._child = None

    def _spawn(self, fd: int, env: dict[str, str]) -> subprocess.Popen:
        """A fresh interpreter of its own, where the zygote cannot serve; a session of its own
        (so a process group of its own, and nothing it starts is in the judge's session)."""
        box = ["-m", "pytest_ditar.runtime.sandbox", self._box.to_json(), "--keep", str(fd)] if self._box else []
        with open(self.log_path, "ab") as log:
            return subprocess.Popen([sys.executable, *zygote.PYTHON_FLAGS, *box,
                                     "-m", "pytest_ditar.runtime.worker_main", str(fd)],
                                    pass_fds=[fd], stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, cwd=self.cwd, env=env, start_new_session=True)

    def drop_compile_writes(self) -> None:
        """Delete what a read-only compile cache took in (runtime.compiled), once the worker has ended."""
        if self.compile_writes is not None:
            from pytest_ditar.runtime import compiled  # worker start-up: the judge's side only, once at the end

            compiled.remove(self.compile_writes)
            self.compile_writes = None

    def kill(self) -> None:
        """Kill the worker's process group, then every process of the candidates outside the other
        live workers (what it detached included)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        _end_candidate_processes(self)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self._drop_buffer()

    def _drop_buffer(self) -> None:
        if self.view is not None:
            with contextlib.suppress(BufferError):
                self.view.close()
            self.view = None
        if self.buffer_file is not None:
            self.buffer_file.close()
            self.buffer_file = None
        if self.buffer_path is not None:
            self.buffer_path.unlink(missing_ok=True)
        for d in (self.buffer_dir, self._own_scratch):
            if d is not None:
                shutil.rmtree(d, ignore_errors=True)

    # ---- pausing: nothing of this worker runs while the other side is timed ------------------
    def pause(self) -> None:
        """Stop the worker and everything it started, and every process of the candidates that no
        running worker started (only the running workers' trees run on)."""
        if self._stop_group():
            _hold(keep=[pid for pid, w in _live_pids().items() if not w.paused])

    def _stop_group(self) -> bool:
        """SIGSTOP of the worker's process group, which also stops a fork under way (true if sent)."""
        if self.proc is not None and not self.paused and self.error is None:
            with contextlib.suppress(ProcessLookupError):  # gone: its next call says how
                os.killpg(self.proc.pid, signal.SIGSTOP)
                self.paused = True
        return self.paused

    def resume(self) -> None:
        if self.proc is not None and self.paused:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGCONT)
            self.paused = False
            if proctree.holding():  # only then: this also runs at the start of every call
                # its own held processes; all of them once no worker is paused
                proctree.release(self.proc.pid if any(o.paused for o in _LIVE) else None)

    def add_stray(self, pid: int) -> None:
        if all(p != pid for p, _ in self.strays):
            self.strays.append((pid, proctree.cmdline(pid)))

    def log_tail(self, lines: int = 20) -> str:
        return logs.tail(self.log_path, lines)  # from its last bytes: the worker may write gigabytes


@contextlib.contextmanager
def only_running(active: WorkerProcess, others: "list[WorkerProcess | None]") -> Iterator[None]:
    """Pause every other worker, and stop every other process of the candidates, while `active` is
    timed; they resume when asked again (held processes once no worker is paused)."""
    for w in others:
        if w is not None and w is not active:
            w._stop_group()  # the rest below, with one scan for all of them
    active.resume()
    if active.proc is not None:
        _hold(keep=[active.proc.pid])
    yield


def background_processes(worker: WorkerProcess) -> list[str]:
    """"pid N: command line" of each process that `worker` started outside its process group
    (detached, or in a session of its own), found while pausing (`proctree.strays` says whose an
    orphan is). Empty without /proc (macOS)."""
    return [f"pid {pid}: {cmd}" for pid, cmd in worker.strays]


# ---- the candidates' processes beyond the workers' groups (runtime.proctree) -----------------
_SUBREAPER: list[bool] = []


def _spared() -> set[int]:
    pid = zygote.running_pid()  # the judge's, idle between forks: nothing of a candidate
    return {pid} if pid else set()


def _live_pids(but: WorkerProcess | None = None) -> dict[int, WorkerProcess]:
    return {w.proc.pid: w for w in _LIVE if w.proc is not None and w is not but}


def _hold(keep: list[int]) -> None:
    paused = {pid for pid, w in _live_pids().items() if w.paused}
    table = proctree.hold(keep, paused, _spared())
    live = _live_pids()
    for pid, strays in (proctree.strays(table, list(live), _spared()) if table else {}).items():
        for p in strays:
            live[pid].add_stray(p)


def _end_candidate_processes(w: WorkerProcess) -> None:
    proctree.end_all_but(list(_live_pids(but=w)), _spared(), known_children={w.proc.pid})


def _fork_from_zygote(z: Any, fds: list[int], log_path: Path, cwd: Path | None, env: dict[str, str],
                      box: str | None = None, ranks: int = 0) -> Any:
    try:
        return z.spawn(fds, log_path, cwd, env, box, ranks)
    except (OSError, ValueError, KeyError):
        return None  # a zygote that cannot fork (or refused to: CUDA touched): spawn directly


_LIVE: set[WorkerProcess] = set()


@atexit.register
def _close_all() -> None:
    """No worker outlives the judge (a crashed or interrupted run included)."""
    for w in list(_LIVE):
        with contextlib.suppress(Exception):
            w.kill()
    zygote.close()

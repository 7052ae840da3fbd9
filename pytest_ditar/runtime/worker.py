"""The judge's side of a candidate worker: start, build, request, time, pause, kill.

Candidate code never runs in the judge's process. Each pipeline (the candidate, the champion,
the baseline code of the holdout) runs in a worker process of its own (`worker_main`), forked
from the zygote or spawned with a fresh interpreter (never a fork of the judge: no CUDA state, no
judge memory shared), in a process group of its own so it can be paused and killed with
everything it started, and in a sandbox of its own (`runtime.sandbox`: read-only filesystem but
its scratch, its own PID and network namespaces).

A call is timed here, on the judge's clock, from the request sent to the outputs received; the
worker synchronizes its device before it replies. While one worker is timed, every other process
the candidates started is stopped, detached ones included (`runtime.proctree`), and closing a
worker ends everything it started. A worker that dies, hangs past the timeout or
sends malformed data is killed and becomes a CandidateError (a CRASH), never a hung judge.
About 470 lines: the life cycle, the pausing and the wire format of one worker belong together
(each relies on the others' invariants); the process-tree scans live in proctree.py.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import mmap
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Iterator, cast

import numpy as np

from pytest_ditar.core.errors import CandidateError
from pytest_ditar.core.vocabulary import ENV_CPU_THREADS, WIRE_MAX_MESSAGE
from pytest_ditar.interface import PipelineSpec, Request
from pytest_ditar.runtime import boxdir, logs, proctree, sandbox_check, sandbox_mounts, zygote
from pytest_ditar.runtime.clock import judge_clock
from pytest_ditar.runtime.harness import frame_text

ALLOWED_DTYPES = {"<f4": np.float32, "|u1": np.uint8, "<f2": np.float16}
MAX_ARRAY_BYTES = 1 << 31
BUILD_DETAIL = ("build_cpu_s", "open_s", "open_in_build_s")  # what a build reply may say of itself
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
CLOCK_SLACK_S = 0.002  # timer resolution and rounding across two processes
START_TIMEOUT_S = 600.0  # interpreter + torch import + CUDA context on a cold, busy host
# A reply the judge waits for, watched (issue 49): a worker whose process stops (a SIGSTOP of its
# own process group, which inside its PID namespace `os.kill(os.getppid(), ...)` becomes) for
# STOPPED_S while the judge did not pause it, or whose processes use no CPU time at all for
# max(HANG_FACTOR x the other roles' own build or slowest call, HANG_FLOOR_S), will not answer:
# a CRASH naming which, at once, not at the configured timeout (30 min for a build). A compile
# burns CPU, in the worker or its compile workers, so it is never taken for a hang; a worker that
# spins without answering is still bounded by the configured timeouts only.
WATCH_AFTER_S = 1.0  # replies quicker than this are never watched (every timed call of a small suite)
WATCH_EVERY_S = 0.5
STOPPED_S = 1.0
HANG_FACTOR = 10.0
HANG_FLOOR_S = 30.0


@dataclass
class Outputs:
    latents: np.ndarray  # float32 [B, C, h, w]
    images: np.ndarray  # uint8 [B, H, W, 3]
    seconds: float  # judge's clock, request sent -> outputs received
    worker_s: float  # the worker's own account of generate + device sync (a cross-check only)
    stamps: dict[str, float]  # judge's and worker's monotonic stamps of this call (where the time went)
    idle_probe_s: float | None = None  # a tiny kernel's time before the call (core.interference); None on CPU


class CandidateWorker:
    """One candidate pipeline in a process of its own."""

    unix_sockets = False  # socket(AF_UNIX) refused in its sandbox (runtime.seccomp); a CUDA group's NCCL needs it

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

    # ---- life cycle -------------------------------------------------------------------------
    def start(self, fingerprint: bool = False) -> "CandidateWorker":
        """Spawn the process and say hello; returns at once (the reply is read when needed)."""
        if self._launcher is not None or self._proc is not None:
            return self
        if not _SUBREAPER:  # orphans of the candidates come back to the judge, never to init
            _SUBREAPER.append(proctree.become_subreaper())
        box = self._sandbox_spec() if self.sandboxed else None  # SandboxUnavailable before any process starts
        parent, child = socket.socketpair()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ) if self.env is None else dict(self.env)
        if box is not None:  # tempfile and friends write in its scratch, the one place they can
            env["TMPDIR"] = env["PWD"] = boxdir.WORK
        self._box = box
        if self.buffer_dir is None:  # sandboxed or not, the buffer lies in a folder of its own
            self.buffer_dir = boxdir.new("io")
        z = zygote.zygote()
        if z is None:
            self._proc = self._spawn(child.fileno(), env)
            child.close()
        else:
            # The zygote answers a fork only once its imports are done: asking on a thread of its
            # own keeps the judge's start-up (collection, guards) from waiting for that. Processes
            # are only ever created on the judge's main thread: a worker dies with the thread that
            # spawned it (PR_SET_PDEATHSIG), so a short-lived thread must never be its parent.
            self._child = (child, env)
            self._launcher = threading.Thread(target=self._launch, args=(z, child, env),
                                              name=f"ditar-start-{self.name}", daemon=True)
            self._launcher.start()
        self.conn = Connection(parent.detach())
        _LIVE.add(self)
        name = str(self.buffer_dir / Path(boxdir.BUFFER).name)
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self.buffer_file = os.fdopen(fd, "rb")  # unlinked once the worker has opened it: nothing left behind
        self.buffer_path = Path(name)
        self._send("hello", device=self.spec.device, cpu_threads=self.cpu_threads, fingerprint=fingerprint,
                   buffer=boxdir.BUFFER if box is not None else name)
        return self

    def package_inside(self) -> str:
        """The candidate package's path as its worker sees it: under boxdir.CODE in a sandbox, where
        every role's code lies at the same path."""
        if self._box is None:
            return str(self.candidate_dir)
        return f"{boxdir.CODE}/{self.candidate_dir.name}"

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
            reads=(str(self.spec.model_dir), *self.reads), unix_sockets=self.unix_sockets,
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

    def hello(self, timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
        """The worker's pid, argv and (if asked at start) hardware fingerprint."""
        self.start()
        self._drain("hello", timeout_s)
        return self.info

    def cap_memory(self, gib: float | None) -> None:
        """The allocator cap of builds sent from now on (a gated run's target memory; None: none)."""
        self.memory_budget_gib = gib

    def drop_compile_writes(self) -> None:
        """Delete what a read-only compile cache took in (runtime.compiled), once the worker has ended."""
        if self.compile_writes is not None:
            from pytest_ditar.runtime import compiled  # worker start-up: the judge's side only, once at the end

            compiled.remove(self.compile_writes)
            self.compile_writes = None

    def request_build(self) -> None:
        """Send the build without waiting, so several workers build at the same time."""
        self.start()
        if self.build_s is None and "build" not in self.pending:
            spec = {**asdict(self.spec), "model_dir": str(self.spec.model_dir)}
            self._send("build", candidate_dir=self.package_inside(), spec=spec,
                       memory_budget_gib=self.memory_budget_gib)

    def built(self, timeout_s: float | None = None) -> "CandidateWorker":
        """Wait until the pipeline is built (raising its CandidateError if it failed): the worker's
        start-up gets START_TIMEOUT_S, the candidate's build() `timeout_s`, else the worker's
        build_timeout_s, else START_TIMEOUT_S. The item timeout of a later request (generate)
        counts from here, from the end of the build."""
        self.request_build()
        self._drain("hello", START_TIMEOUT_S)
        self._drain("build", timeout_s or self.build_timeout_s or START_TIMEOUT_S)
        return self

    def ask_to_quit(self) -> None:
        """Send the quit without waiting, so several workers tear down (CUDA contexts, interpreters) at
        the same time; close() then waits. A worker still starting or building is killed instead."""
        if self.proc is None or self._quit_sent:
            return
        self._quit_sent = True
        if self.pending:  # still starting or building (a refused run): nothing of it is worth waiting for
            self.kill()
        with contextlib.suppress(OSError, ValueError):
            self.resume()
            if self.error is None and self.proc.poll() is None:
                cast(Connection, self.conn).send_bytes(json.dumps({"op": "quit"}).encode())

    def close(self) -> None:
        """Ask the worker to quit (unless ask_to_quit did), killing it if it does not within a few
        seconds; then end every process it started."""
        if self.proc is None:
            return
        conn = cast(Connection, self.conn)  # start() opened it
        self.ask_to_quit()
        _LIVE.discard(self)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
        _end_candidate_processes(self)
        with contextlib.suppress(OSError):
            conn.close()
        self._drop_buffer()

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

    # ---- requests ---------------------------------------------------------------------------
    def generate(self, request: Request, timeout_s: float | None = None) -> Outputs:
        self.built()
        t0 = judge_clock()
        reply, arrays = self._call("generate", timeout_s, request=_request_dict(request))
        t1 = judge_clock()
        if len(arrays) != 2:
            raise self._fail(CandidateError("exception", f"worker {self.name} sent {len(arrays)} arrays, expected 2"))
        stamps = {k: float(v) for k, v in (reply.get("stamps") or {}).items() if isinstance(v, (int, float))}
        stamps.update(sent=t0, header=self.t_header, copied=t1)
        worker_s = float(reply.get("worker_s", 0.0))
        if worker_s > (t1 - t0) + CLOCK_SLACK_S:
            # the worker's interval lies inside the judge's on one monotonic clock: a longer one
            # means the candidate reached its process's clock
            raise self._fail(CandidateError("exception", f"worker {self.name} reports {worker_s:.4f}s for a call the "
                                                         f"judge timed at {t1 - t0:.4f}s: its clock was tampered with"))
        self.slowest_s = max(self.slowest_s, t1 - t0)
        probe = reply.get("idle_probe_s")
        return Outputs(arrays[0], arrays[1], t1 - t0, worker_s, stamps,
                       float(probe) if isinstance(probe, (int, float)) else None)

    def flops(self, request: Request, timeout_s: float | None = None) -> float | None:
        reply, _ = self._call("flops", timeout_s, request=_request_dict(request))
        return reply.get("flops")

    def probe_flops(self, seconds: float = 0.5) -> float:
        """The host's achievable float32 FLOP/s at this worker's thread count (a CPU worker)."""
        reply, _ = self._call("probe_flops", 60.0 + seconds, seconds=seconds)
        return float(reply["flops_per_s"])

    def profile(self, request: Request, warm: Request, warmup: int, reference: Request | None,
                timeout_s: float | None = None) -> tuple[Path, Path]:
        """One call of `request` under torch.profiler in the worker (runtime.profiler), after
        `warmup` calls of `warm` and one unprofiled call of `reference`: the paths of the Chrome
        trace and the data file it wrote into its scratch (the candidate's process wrote them:
        read them as data, never as code)."""
        where = Path(self.cwd) if self.cwd is not None else Path(tempfile.mkdtemp(prefix=f"ditar-{self.name}-profile-"))
        reply, _ = self._call("profile", timeout_s, request=_request_dict(request), warm=_request_dict(warm),
                              warmup=warmup, reference=_request_dict(reference) if reference else None,
                              out_dir=boxdir.WORK if self._box is not None else str(where))
        trace, data = reply.get("trace"), reply.get("data")
        if not all(isinstance(n, str) and n and Path(n).name == n for n in (trace, data)):
            raise self._fail(CandidateError("exception", f"worker {self.name} sent malformed profile files: "
                                                         f"{[trace, data]}"))
        return where / str(trace), where / str(data)

    def empty(self, timeout_s: float | None = 60.0) -> None:
        """A call that does no work (runtime.calls.empty_call times its round trip)."""
        self._call("empty", timeout_s)

    def dtypes(self, timeout_s: float | None = None) -> set[str]:
        reply, _ = self._call("dtypes", timeout_s)
        return set(reply.get("dtypes", ()))

    def memory(self, reset: bool = False) -> tuple[float | None, float | None]:
        reply, _ = self._call("memory", 60.0, reset=reset)
        return reply.get("allocated_gib"), reply.get("reserved_gib")

    def peak(self, reset: bool = False) -> tuple[float | None, str]:
        """Peak memory since the last reset (GiB; None where unreadable) and where: "device" or "host"."""
        reply, _ = self._call("peak", 60.0, reset=reset)
        return reply.get("gib"), str(reply.get("where"))

    def steady(self, on: bool, pin_cpu: bool = False, cpu: int | None = None) -> None:
        self._call("steady", 60.0, on=on, pin_cpu=pin_cpu, **({"cpu": cpu} if cpu is not None else {}))

    # ---- plumbing ---------------------------------------------------------------------------
    def _call(self, op: str, timeout_s: float | None, **args: Any) -> tuple[dict[str, Any], list[np.ndarray]]:
        self.built()
        self.resume()
        self._send(op, **args)
        return self._receive(op, timeout_s)

    def _send(self, op: str, **args: Any) -> None:
        if self.error is not None:
            raise self.error
        conn = cast(Connection, self.conn)  # start() opened it before its first message
        try:
            conn.send_bytes(json.dumps({"op": op, **args}).encode())
        except OSError:
            raise self._died() from None
        self.pending.append(op)

    def _drain(self, op: str, timeout_s: float | None) -> None:
        """Read replies up to and including the pending `op` (hello and build are pipelined)."""
        if self.error is not None:
            raise self.error
        while op in self.pending:
            self._receive(self.pending[0], timeout_s)

    def _receive(self, op: str, timeout_s: float | None) -> tuple[dict[str, Any], list[np.ndarray]]:
        conn = cast(Connection, self.conn)  # a reply follows a message: start() opened it
        try:
            if timeout_s is not None and not self._await(conn, op, timeout_s):
                raise self._fail(CandidateError("timeout", f"{self.name} {op}", seconds=timeout_s))
            header = json.loads(conn.recv_bytes(WIRE_MAX_MESSAGE))
            self.t_header = judge_clock()
            arrays = [self._array(spec) for spec in header.get("arrays", [])]
        except (EOFError, OSError):
            raise self._died() from None
        except (ValueError, TypeError, KeyError) as exc:
            raise self._fail(CandidateError("exception", f"worker {self.name} sent malformed data: {exc}")) from None
        self.pending.pop(0)
        if not header.get("ok"):
            err = CandidateError(header.get("kind", "exception"), header.get("message", "unknown error"),
                                 where=frame_text(header.get("where")))
            if op in ("hello", "build"):
                self.error = err  # a pipeline that did not build is not retried
            raise err
        if op == "hello":
            self.info = {k: header[k] for k in ("pid", "argv", "fingerprint") if k in header}
            # both sides hold it open; no name needed any more (start() named it, with hello)
            cast(Path, self.buffer_path).unlink(missing_ok=True)
        elif op == "build":
            self.build_s = float(header.get("build_s", 0.0))
            self.build_detail = {k: float(header[k]) for k in BUILD_DETAIL if isinstance(header.get(k), (int, float))}
        return header, arrays

    def _await(self, conn: Connection, op: str, timeout_s: float) -> bool:
        """Whether a reply came within `timeout_s`; raises the CRASH of a worker that stopped or hung
        (WATCH_AFTER_S above) before that."""
        if conn.poll(min(WATCH_AFTER_S, timeout_s)):
            return True
        t0 = judge_clock()
        deadline = t0 - WATCH_AFTER_S + timeout_s
        last: proctree.Activity | None = None
        idle_since = stopped_since = t0
        while (left := deadline - judge_clock()) > 0:
            if conn.poll(min(WATCH_EVERY_S, left)):
                return True
            now = judge_clock()
            seen = proctree.activity(self._proc.pid) if self._proc is not None and not self.paused else None
            if seen is None:  # no /proc, gone (its EOF comes next), or paused by the judge: nothing to watch
                last, idle_since, stopped_since = None, now, now
                continue
            if not seen.root_stopped:
                stopped_since = now
            if last is None or seen.ticks != last.ticks:
                idle_since = now
            last = seen
            bound = self.hang_bound(op)
            if now - stopped_since >= STOPPED_S:
                raise self._fail(CandidateError("timeout", f"{self.name} {op}: its processes were stopped (SIGSTOP of "
                                                           f"its process group), not by the judge", seconds=now - t0
                                                + WATCH_AFTER_S))
            if now - idle_since >= bound:
                how = ("stopped (a SIGSTOP), no reply" if seen.stopped else "hung: no reply and no CPU time") + \
                    f" for {now - idle_since:.0f}s (bound {bound:.0f}s: {HANG_FACTOR:g}x the other roles' own times, " \
                    f"at least {HANG_FLOOR_S:g}s)"
                raise self._fail(CandidateError("timeout", f"{self.name} {op}: {how}",
                                                seconds=now - t0 + WATCH_AFTER_S))
        return False

    def hang_bound(self, op: str) -> float:
        """How long this worker's processes may use no CPU time while the judge waits for `op`:
        HANG_FACTOR x the longest build (for a build) or call the other live workers (the champion,
        its twin, the holdout's baseline) took themselves, at least HANG_FLOOR_S."""
        others = [o for o in list(_LIVE) if o is not self]
        times = [o.build_s for o in others if o.build_s] if op == "build" else \
            [o.slowest_s for o in others if o.slowest_s] or [o.build_s for o in others if o.build_s]
        return max(HANG_FLOOR_S, HANG_FACTOR * max(times, default=0.0))

    def _array(self, spec: dict[str, Any]) -> np.ndarray:
        """A copy of one array out of the shared file (the next reply overwrites it)."""
        dtype = ALLOWED_DTYPES.get(spec["dtype"])
        shape = tuple(int(n) for n in spec["shape"])
        offset = int(spec["offset"])
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize if dtype is not None else -1
        if dtype is None or any(n < 0 for n in shape) or offset < 0 or not 0 <= nbytes <= MAX_ARRAY_BYTES:
            raise ValueError(f"array {spec['dtype']}{list(shape)} not accepted")
        if self.view is None or len(self.view) < offset + nbytes:
            size = os.fstat(self.buffer_file.fileno()).st_size
            if size < offset + nbytes:
                raise ValueError(f"array at {offset}+{nbytes} beyond the shared buffer ({size} bytes)")
            if self.view is not None:
                self.view.close()
            self.view = mmap.mmap(self.buffer_file.fileno(), size, access=mmap.ACCESS_READ)
        axes = [int(i) for i in spec.get("axes", range(len(shape)))]
        if sorted(axes) != list(range(len(shape))):
            raise ValueError(f"axes {axes} are not a permutation of {len(shape)} axes")
        block = np.frombuffer(self.view, dtype=dtype, count=int(np.prod(shape)), offset=offset).reshape(shape).copy()
        return block.transpose(np.argsort(axes))  # back to the candidate's axis order, as a view

    def _died(self) -> CandidateError:
        code = self.proc.wait(timeout=30) if self.proc is not None else None
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
        last = self.log_tail(1)[-500:]
        kind = "oom" if "out of memory" in last.lower() else "exception"
        return self._fail(CandidateError(kind, f"worker {self.name} {how}" + (f": {last}" if last else "")
                                         + f" (log: {self.log_path})"))

    def _fail(self, err: CandidateError) -> CandidateError:
        self.error = err
        self.kill()
        _LIVE.discard(self)
        return err

    def add_stray(self, pid: int) -> None:
        if all(p != pid for p, _ in self.strays):
            self.strays.append((pid, proctree.cmdline(pid)))

    def log_tail(self, lines: int = 20) -> str:
        return logs.tail(self.log_path, lines)  # from its last bytes: the worker may write gigabytes


@contextlib.contextmanager
def only_running(active: CandidateWorker, others: "list[CandidateWorker | None]") -> Iterator[None]:
    """Pause every other worker, and stop every other process of the candidates, while `active` is
    timed; they resume when asked again (held processes once no worker is paused)."""
    for w in others:
        if w is not None and w is not active:
            w._stop_group()  # the rest below, with one scan for all of them
    active.resume()
    if active.proc is not None:
        _hold(keep=[active.proc.pid])
    yield


def background_processes(worker: CandidateWorker) -> list[str]:
    """"pid N: command line" of each process that `worker` started outside its process group
    (detached, or in a session of its own), found while pausing (`proctree.strays` says whose an
    orphan is). Empty without /proc (macOS)."""
    return [f"pid {pid}: {cmd}" for pid, cmd in worker.strays]


# ---- the candidates' processes beyond the workers' groups (runtime.proctree) -----------------
_SUBREAPER: list[bool] = []


def _spared() -> set[int]:
    pid = zygote.running_pid()  # the judge's, idle between forks: nothing of a candidate
    return {pid} if pid else set()


def _live_pids(but: CandidateWorker | None = None) -> dict[int, CandidateWorker]:
    return {w.proc.pid: w for w in _LIVE if w.proc is not None and w is not but}


def _hold(keep: list[int]) -> None:
    paused = {pid for pid, w in _live_pids().items() if w.paused}
    table = proctree.hold(keep, paused, _spared())
    live = _live_pids()
    for pid, strays in (proctree.strays(table, list(live), _spared()) if table else {}).items():
        for p in strays:
            live[pid].add_stray(p)


def _end_candidate_processes(w: CandidateWorker) -> None:
    proctree.end_all_but(list(_live_pids(but=w)), _spared(), known_children={w.proc.pid})


def _fork_from_zygote(z: Any, fds: list[int], log_path: Path, cwd: Path | None, env: dict[str, str],
                      box: str | None = None, ranks: int = 0) -> Any:
    try:
        return z.spawn(fds, log_path, cwd, env, box, ranks)
    except (OSError, ValueError, KeyError):
        return None  # a zygote that cannot fork (or refused to: CUDA touched): spawn directly


def _request_dict(r: Request) -> dict[str, Any]:
    return {"labels": list(r.labels), "seeds": list(r.seeds), "steps": r.steps}


_LIVE: set[CandidateWorker] = set()


@atexit.register
def _close_all() -> None:
    """No worker outlives the judge (a crashed or interrupted run included)."""
    for w in list(_LIVE):
        with contextlib.suppress(Exception):
            w.kill()
    zygote.close()

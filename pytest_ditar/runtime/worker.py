"""The judge's side of a candidate worker's calls: build, request, time, and read the replies.

Candidate code never runs in the judge's process. Each pipeline (the candidate, the champion,
the baseline code of the holdout) runs in a worker process of its own (`worker_main`), forked
from the zygote or spawned with a fresh interpreter (never a fork of the judge: no CUDA state, no
judge memory shared); its process (sandbox, start, pause, kill) is runtime.worker_process's.

A call is timed here, on the judge's clock, from the request sent to the outputs received; the
worker synchronizes its device before it replies. While one worker is timed, every other process
the candidates started is stopped (runtime.worker_process.only_running). A worker that dies, hangs
past the timeout or sends malformed data is killed and becomes a CandidateError (a CRASH), never a
hung judge.
"""
from __future__ import annotations

import contextlib
import json
import mmap
import os
import socket
import subprocess
import tempfile
import threading
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

import numpy as np

from pytest_ditar.core.errors import CandidateError
from pytest_ditar.core.vocabulary import WIRE_MAX_MESSAGE
from pytest_ditar.interface import Request
from pytest_ditar.runtime import boxdir, proctree, zygote
from pytest_ditar.runtime.clock import judge_clock
from pytest_ditar.runtime.harness import frame_text
from pytest_ditar.runtime.worker_process import _LIVE, _SUBREAPER, WorkerProcess, _end_candidate_processes

ALLOWED_DTYPES = {"<f4": np.float32, "|u1": np.uint8, "<f2": np.float16}
MAX_ARRAY_BYTES = 1 << 31
BUILD_DETAIL = ("build_cpu_s", "open_s", "open_in_build_s")  # what a build reply may say of itself
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


class CandidateWorker(WorkerProcess):
    """One candidate pipeline in a process of its own."""

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

    def hello(self, timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
        """The worker's pid, argv and (if asked at start) hardware fingerprint."""
        self.start()
        self._drain("hello", timeout_s)
        return self.info

    def cap_memory(self, gib: float | None) -> None:
        """The allocator cap of builds sent from now on (a gated run's target memory; None: none)."""
        self.memory_budget_gib = gib

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

    def empty(self, timeout_s: float | None = 60.0) -> int:
        """A call that does no work (runtime.calls.empty_call times its round trip); its reply carries
        the last call's arrays again: their bytes."""
        _, arrays = self._call("empty", timeout_s)
        return sum(a.nbytes for a in arrays)

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


def _request_dict(r: Request) -> dict[str, Any]:
    return {"labels": list(r.labels), "seeds": list(r.seeds), "steps": r.steps}


"""The candidate worker: the only process where candidate code runs.

The judge (`runtime.worker.CandidateWorker`) starts it as
`python -m pytest_ditar.runtime.worker_main FD`, FD being its end of a socket pair. It builds one
candidate pipeline and then serves requests, strictly one reply per message, in order. It knows
nothing of pytest, git, the state directory or the statistics: the judge owns all of those.

Wire format: a JSON header per message over the socket; arrays of a reply are written into a
shared-memory file the judge created (its path comes with hello), their dtype, shape and offset
in the header. One copy on each side: 4x faster than sending 1.7 MB through the socket (0.42 vs
1.7 ms for a throughput_b8 reply on this project's CI host). The judge never unpickles anything a
worker sends, so candidate code that writes to the socket can at worst send wrong numbers.
"""
from __future__ import annotations

import contextlib
import gc
import json
import mmap
import os
import signal
import socket
import sys
import time
import traceback
from io import BufferedRandom
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, NoReturn, Sequence, TypedDict

import numpy as np

from pytest_ditar.core.vocabulary import WIRE_MAX_MESSAGE
from pytest_ditar.hardware.fingerprint import collect, object_dtypes
from pytest_ditar.interface import Candidate, PipelineSpec, Request
from pytest_ditar.runtime import sandbox, sandbox_mounts
from pytest_ditar.runtime.harness import (
    build_candidate,
    candidate_frames,
    classify_exception,
    pin_to_cpu,
    pin_to_current_cpu,
)
from pytest_ditar.runtime.proctree import become_subreaper
from pytest_ditar.runtime.profiler import profile_call

ALIGN = 64  # each array starts on a cache line
Reply = dict[str, object]  # an operation's reply header, sent as JSON


class RequestMessage(TypedDict):
    """A Request on the wire (interface.Request's fields)."""

    labels: list[int]
    seeds: list[int]
    steps: int


class SpawnMessage(TypedDict, total=False):
    """The zygote's `spawn` request (runtime.zygote): the worker's environment, folder, log, sandbox
    (a sandbox_mounts.Spec as JSON) and, for a group, its ranks."""

    op: str
    env: dict[str, str]
    cwd: str
    log: str
    sandbox: str
    ranks: int
MAX_FDS = 64  # file descriptors one zygote request may pass: a group's sockets and logs, 32 ranks


def die_with_parent() -> None:
    """Linux: SIGKILL this worker when the judge dies, even while it is stopped (SIGSTOP)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def set_dumpable(on: bool) -> None:
    """Linux: whether processes of the same user may ptrace this one or read its memory (the
    zygote is not: nothing can be planted in the image workers are forked from; a worker is, as
    any process)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(4, int(on), 0, 0, 0)  # PR_SET_DUMPABLE
        except (OSError, AttributeError):
            pass


def contain_orphans() -> None:
    """Orphans of what the candidate starts come back to this worker, staying in its tree (paused
    and ended with it) and counted as its own. Candidate code can undo this; then they land in the
    zygote or the judge, subreapers too, and count as strays of every worker."""
    become_subreaper()


def _error(exc: BaseException, candidate_dir: str | None, seen: dict[str, int]) -> Reply:
    """The failure reply, with the candidate's own innermost frame as `where` (the CRASH reason
    names it). The whole traceback goes to this worker's log (its stderr) the first time an error
    is seen; every repeat (the next batch raising the same) is one line, so the log stays readable."""
    err = classify_exception(exc)
    frames = candidate_frames(exc, Path(candidate_dir) if candidate_dir else None)
    err.where = where = frames[-1] if frames else err.where
    said = str(err)  # "candidate raised: NameError: ... (mutable/pipeline.py:57 in generate)"
    seen[said] = seen.get(said, 0) + 1
    trace = "".join(traceback.format_exception(exc))
    if seen[said] == 1:
        chain = "".join(f"  {f}\n" for f in frames)
        sys.stderr.write(f"ditar worker: {said}\n"
                         + (f"the candidate's frames, outermost first:\n{chain}" if chain else "")
                         + trace)
    else:
        sys.stderr.write(f"ditar worker: the same error again ({seen[said]} times): {said}\n")
    sys.stderr.flush()
    return {"ok": False, "kind": err.kind, "message": err.message, "where": where, "traceback": trace[-4000:]}


# When this process's device opening ran (perf_counter): its build reply says how much of it fell
# inside the build, which waits on it for its first device call.
_OPENING: dict[str, float] = {}


def _open_device(device: str) -> None:
    _OPENING["start"] = time.perf_counter()
    try:
        _open(device)
    finally:
        _OPENING["end"] = time.perf_counter()


def _open(device: str) -> None:
    """The context, then each library a DiT's first call loads on first use: cuBLAS(Lt) for the
    half-precision GEMMs, cuDNN for the VAE's convolutions, the fused attention kernels. Loaded
    here, beside the judge's start-up and the build's CPU work, not in the quality phase's first
    call; every worker loads the same, so no side is favoured, and only libraries are kept."""
    import torch
    import torch.nn.functional as F

    with contextlib.suppress(Exception):  # an optimisation only: the build opens what this did not
        x = torch.ones(8, 8, device=device)
        torch.mm(x, x)
        for dt in (torch.float16, torch.bfloat16):
            h = torch.ones(64, 64, device=device, dtype=dt)
            torch.mm(h, h)
            img = torch.ones(1, 32, 8, 8, device=device, dtype=dt)
            F.group_norm(F.conv2d(img, torch.ones(32, 32, 3, 3, device=device, dtype=dt), padding=1), 8)
            q = torch.ones(1, 2, 16, 64, device=device, dtype=dt)
            F.scaled_dot_product_attention(q, q, q)
            F.layer_norm(h, (64,))
        torch.cuda.synchronize(device)
        del x, h, img, q
        torch.cuda.empty_cache()


class Worker:
    def __init__(self, conn: Connection):
        self.conn = conn
        self.device = "cpu"
        self._candidate: Candidate | None = None
        self.gc_was_enabled = True
        self.buffer: BufferedRandom | None = None  # the open shared-memory file
        self.view: mmap.mmap | None = None
        self.candidate_dir: str | None = None  # the package built: its files are the candidate's frames
        self.errors_seen: dict[str, int] = {}  # each error's one-line text -> times it was replied

    # ---- operations (each returns the reply header; arrays go in self.arrays) -------------------
    def op_hello(self, device: str, cpu_threads: int, fingerprint: bool, buffer: str,
                 group: str | None = None) -> Reply:
        import torch

        self.buffer = open(buffer, "r+b")
        # its name is gone before any candidate code runs (the judge holds it open too): what a
        # worker sees of its buffer never depends on when the judge read this reply
        with contextlib.suppress(OSError):
            os.unlink(buffer)
        self.device = device
        # The judge's share (runtime.worker.worker_threads): pools that spin-wait against other
        # workers' turn CPU timing noise into outliers and a GPU run's parallel builds into a crawl.
        torch.set_num_threads(cpu_threads)
        if group:  # a rank of a group (runtime.group): the process group exists before build()
            _join_group(group, device)
        reply: Reply = {"pid": os.getpid(), "argv": sys.argv}
        if fingerprint:
            reply["fingerprint"] = collect(device).to_dict()
        if device.startswith("cuda"):
            # The device's context, allocator and BLAS libraries open now, while the judge collects
            # and runs its guards, rather than inside the build it then waits on. What a candidate
            # would open anyway, opened before any of its code runs: nothing of it is carried over.
            import threading

            threading.Thread(target=_open_device, args=(device,), name="ditar-open-device", daemon=True).start()
        return reply

    def op_build(self, candidate_dir: str, spec: dict[str, Any], memory_budget_gib: float | None) -> Reply:
        self._bind_memory_budget(memory_budget_gib)
        self.candidate_dir = candidate_dir
        # No bytecode written next to the candidate: a champion's worktree must stay exactly its
        # commit (loop.run.session checks), and `import mutable.x` finds this package's own parent.
        sys.dont_write_bytecode = True
        sys.path.insert(0, str(Path(candidate_dir).parent))
        spec_obj = PipelineSpec(**{**spec, "model_dir": Path(spec["model_dir"])})
        t0, cpu0 = time.perf_counter(), time.thread_time()
        self._candidate = build_candidate(Path(candidate_dir), spec_obj)
        self._sync()
        t1 = time.perf_counter()
        reply: Reply = {"build_s": t1 - t0, "build_cpu_s": time.thread_time() - cpu0}
        if "start" in _OPENING:  # what of the device's opening the build overlapped (and may have waited on)
            end = _OPENING.get("end", t1)
            reply["open_s"] = end - _OPENING["start"]
            reply["open_in_build_s"] = max(0.0, min(end, t1) - max(_OPENING["start"], t0))
        return reply

    @property
    def candidate(self) -> Candidate:
        """The candidate built (op_build); an op that needs it before then is the judge's error."""
        if self._candidate is None:
            raise RuntimeError("no candidate built yet (build before this operation)")
        return self._candidate

    def op_generate(self, request: RequestMessage, outputs: bool = True) -> Reply:
        """One call, device synchronized; `outputs`: False for a group's other ranks, whose reply
        carries only their time (rank 0's outputs are the group's)."""
        t_received = self.t_received
        req = _request(request)
        idle_s = self._idle_probe()
        t0 = time.perf_counter()
        gen = self.candidate.generate(req)
        self._sync()  # the reply means the device work is done: the judge's clock needs no device
        worker_s = time.perf_counter() - t0
        latents = gen.latents
        if outputs:
            if hasattr(latents, "detach"):
                latents = latents.detach().float().cpu().numpy()
            self.arrays = [np.asarray(latents, dtype=np.float32), np.asarray(gen.images)]
        # perf_counter is CLOCK_MONOTONIC on Linux, one clock for every process: the judge can
        # place these stamps on its own timeline to see where a round trip's time goes.
        return {"worker_s": worker_s, "idle_probe_s": idle_s,
                "stamps": {"received": t_received, "generated": t0 + worker_s, "converted": time.perf_counter()}}

    def op_probe_flops(self, seconds: float) -> Reply:
        """The host's achievable FLOP/s: best of float32 square matmuls at this worker's thread
        count, for at most about `seconds` (the CPU roofline's ceiling, loop.run.champion)."""
        import torch

        n = 1024  # 2.1 GFLOP: large enough for the BLAS kernels' best throughput, ~20-100 ms per call
        a, b = torch.randn(n, n), torch.randn(n, n)
        out = torch.mm(a, b)  # warm: thread pool, page faults, kernel selection
        best, deadline = float("inf"), time.perf_counter() + seconds
        for _ in range(20):
            t0 = time.perf_counter()
            torch.mm(a, b, out=out)
            best = min(best, time.perf_counter() - t0)
            if time.perf_counter() > deadline:
                break
        return {"flops_per_s": 2.0 * n ** 3 / best}

    def op_flops(self, request: RequestMessage) -> Reply:
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            self.candidate.generate(_request(request))
        return {"flops": float(counter.get_total_flops())}

    def op_profile(self, request: RequestMessage, warm: RequestMessage, warmup: int,
                   reference: RequestMessage | None, out_dir: str) -> Reply:
        """One call of `request` under torch.profiler, the pipeline's parts marked
        (runtime.profiler): the trace and the spans go into `out_dir` (this worker's scratch)."""
        return profile_call(self.candidate, _request(request), _request(warm), int(warmup),
                            _request(reference) if reference else None, self.device, Path(out_dir))

    def op_empty(self) -> Reply:
        """No work: the judge times this round trip beside each call (the harness's own share)."""
        return {}

    def op_dtypes(self) -> Reply:
        return {"dtypes": sorted(object_dtypes(self.candidate))}

    def op_memory(self, reset: bool) -> Reply:
        if not self.device.startswith("cuda"):
            return {"allocated_gib": None, "reserved_gib": None}
        import torch

        torch.cuda.synchronize(self.device)
        if reset:
            torch.cuda.reset_peak_memory_stats(self.device)
        return {"allocated_gib": torch.cuda.max_memory_allocated(self.device) / 2**30,
                "reserved_gib": torch.cuda.max_memory_reserved(self.device) / 2**30}

    def op_peak(self, reset: bool) -> Reply:
        """This worker's peak memory since the last reset, in GiB: the device's reserved bytes on CUDA,
        the process's resident set (VmHWM, reset through clear_refs) on the CPU; None where unreadable."""
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)
            if reset:
                torch.cuda.reset_peak_memory_stats(self.device)
            return {"gib": torch.cuda.max_memory_reserved(self.device) / 2**30, "where": "device"}
        try:
            if reset:
                with open("/proc/self/clear_refs", "w") as fh:
                    fh.write("5")  # the resident set's high-water mark starts again from now
            with open("/proc/self/status") as fh:
                kib = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
        except (OSError, StopIteration, ValueError):
            return {"gib": None, "where": "host"}
        return {"gib": kib / 2**20, "where": "host"}

    def op_steady(self, on: bool, pin_cpu: bool, cpu: int | None = None) -> Reply:
        """No garbage-collector pause inside a timed round; with pin_cpu, no migration between
        launches; with `cpu`, on that core (every worker of a CPU lane on the same one)."""
        if on:
            self.gc_was_enabled = gc.isenabled()
            gc.collect()
            gc.disable()
            self.old_mask = pin_to_cpu(cpu) if cpu is not None else pin_to_current_cpu() if pin_cpu else None
        else:
            old_mask = getattr(self, "old_mask", None)
            if old_mask is not None:
                os.sched_setaffinity(0, old_mask)
            if self.gc_was_enabled:
                gc.enable()
        return {}

    # ---- plumbing ---------------------------------------------------------------------------
    def _idle_probe(self) -> float | None:
        """Seconds one tiny kernel takes from launch to completion before the timed work starts
        (core.interference): tens of microseconds on an idle GPU, a time slice when another
        process's work is still queued on it. None on CPU (a paused CPU worker runs nothing)."""
        if not self.device.startswith("cuda"):
            return None
        import torch

        if getattr(self, "probe_tensor", None) is None:
            self.probe_tensor = torch.zeros(1, device=self.device)
            torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        self.probe_tensor.add_(1.0)
        torch.cuda.synchronize(self.device)
        return time.perf_counter() - t0

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)

    def _bind_memory_budget(self, budget_gib: float | None) -> None:
        """The allocator raises OOM at the target's size: a candidate that only fits a bigger card crashes."""
        if not budget_gib or not self.device.startswith("cuda"):
            return
        import torch

        dev = torch.device(self.device)
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        total = torch.cuda.get_device_properties(index).total_memory / 2**30
        if budget_gib < total:
            torch.cuda.set_per_process_memory_fraction(budget_gib / total, index)

    def serve(self) -> None:
        while True:
            try:
                raw = self.conn.recv_bytes(WIRE_MAX_MESSAGE)
                self.t_received = time.perf_counter()
                msg = json.loads(raw)
            except (EOFError, OSError):
                return  # the judge is gone
            op = msg.pop("op")
            if op == "quit":
                self._reply({"ok": True})
                return
            self.arrays = []
            try:
                reply = {"ok": True, **getattr(self, f"op_{op}")(**msg)}
            except BaseException as exc:  # noqa: BLE001 - every failure is a reply, never a silent exit
                if isinstance(exc, KeyboardInterrupt):
                    raise
                reply, self.arrays = _error(exc, self.candidate_dir, self.errors_seen), []
            self._reply(reply)

    def _reply(self, header: Reply) -> None:
        arrays: list[dict[str, int | str | list[int]]] = []
        header["arrays"], offset = arrays, 0
        stored, offsets = [], []
        for a in self.arrays:
            # A permuted view (HWC images made from a CHW tensor) goes as its memory lies, with the
            # permutation: a transposing copy of a batch of 8 images costs 4 ms, a plain one 0.1.
            axes = [int(i) for i in np.argsort([-s for s in a.strides], kind="stable")]
            block = a.transpose(axes)
            if not block.flags.c_contiguous:
                block, axes = np.ascontiguousarray(a), list(range(a.ndim))
            stored.append(block)
            arrays.append({"dtype": a.dtype.str, "shape": list(block.shape), "axes": axes, "offset": offset})
            offsets.append(offset)
            offset += -(-block.nbytes // ALIGN) * ALIGN
        self.arrays = stored
        if self.arrays:
            view = self._view(offset)
            for a, at in zip(self.arrays, offsets):
                view[at:at + a.nbytes] = a.data.cast("B")  # a.data: memoryview(a)
        stamps = header.get("stamps")
        if isinstance(stamps, dict):
            stamps["written"] = time.perf_counter()
        self.conn.send_bytes(json.dumps(header, default=str).encode())
        self.arrays = []

    def _view(self, size: int) -> mmap.mmap:
        """The shared file mapped at `size` bytes or more (grown, never shrunk)."""
        if self.buffer is None:
            raise RuntimeError("no shared buffer yet (hello before this operation)")
        if self.view is None or len(self.view) < size:
            if os.fstat(self.buffer.fileno()).st_size < size:
                self.buffer.truncate(size)
            if self.view is not None:
                self.view.close()
            self.view = mmap.mmap(self.buffer.fileno(), size)
        return self.view


def _request(d: RequestMessage) -> Request:
    return Request(labels=tuple(d["labels"]), seeds=tuple(d["seeds"]), steps=int(d["steps"]))


def main(argv: list[str]) -> int:
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the judge's to handle; it stops us
    contain_orphans()
    if argv[1] == "--group":
        return group([int(fd) for fd in argv[2].split(",")], [int(fd) for fd in argv[4].split(",")])
    Worker(Connection(int(argv[1]))).serve()
    return 0


def _join_group(backend: str, device: str) -> None:
    """torch.distributed's process group of this rank (RANK, WORLD_SIZE, MASTER_* set by group())."""
    import torch
    import torch.distributed as dist

    extra: dict[str, Any] = {}  # Any: init_process_group checks each keyword against its own parameter
    if backend == "nccl":
        torch.cuda.set_device(device)
        extra["device_id"] = torch.device(device)  # NCCL bound to this rank's GPU up front
    else:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(backend, init_method="env://", **extra)


def group(fds: list[int], logs: list[int]) -> int:
    """A group's launcher (runtime.group): one rank per judge socket (and log), each forked from
    this process (so from the zygote's imports, where the zygote forked it), every rank in this
    process group (so paused and killed as one). The ranks meet on this process's loopback, a free
    port of it: in the sandbox's own network namespace. The
    first rank to fail ends the others: a rank that waits in a collective for a dead peer would
    otherwise hang until the judge's timeout."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pids = {}
    for rank, fd in enumerate(fds):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _serve_rank(rank, fds, logs, port)
        pids[pid] = rank
    for fd in (*fds, *logs):
        os.close(fd)
    return _wait_ranks(pids)


def _serve_rank(rank: int, fds: list[int], logs: list[int], port: int) -> NoReturn:
    """A forked rank: its own socket and log only, its place in the group in its environment; serves
    the judge until the socket closes, and never returns into the launcher."""
    fd = fds[rank]
    code = 1
    try:
        for other in (*fds, *logs):
            if other not in (fd, logs[rank]):
                os.close(other)  # its own log stays open as its stdout and stderr, below
        os.dup2(logs[rank], 1)
        os.dup2(logs[rank], 2)
        os.close(logs[rank])
        die_with_parent()
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(len(fds)),
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        sys.argv = [__file__, str(fd)]
        Worker(Connection(fd)).serve()
        code = 0
    except BaseException:  # noqa: BLE001 - a forked rank never returns into the launcher
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _wait_ranks(pids: dict[int, int]) -> int:
    """Wait for every rank (pid -> rank); the first to fail ends the others. The first failure's
    exit status, else 0."""
    code = 0
    while pids:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        if pid not in pids:
            continue  # an orphan re-parented here (this launcher is a subreaper)
        rank = pids.pop(pid)
        if status != 0 and pids:
            sys.stderr.write(f"ditar group: rank {rank} ended ({os.waitstatus_to_exitcode(status)}): "
                             "ending the others\n")
            for other in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(other, signal.SIGKILL)
        code = code or (os.waitstatus_to_exitcode(status) & 0xFF)
    return code


def _fork_worker(zygote_sock: socket.socket, fds: list[int], req: SpawnMessage,
                 close: Sequence[socket.socket] = ()) -> int:
    """Fork a worker serving the judge's socket fds[0]; or, for a group of `req["ranks"]` ranks,
    the group's launcher (group()): fds are then the ranks' sockets, then their logs. The zygote's
    own sockets (`zygote_sock`, `close`) are closed in the child."""
    sys.stdout.flush()
    sys.stderr.flush()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(ready_w)
        os.read(ready_r, 1)  # its session exists before the judge hears of it: killpg finds the group
        os.close(ready_r)
        return pid
    code = 1
    try:
        zygote_sock.close()
        for sock in close:
            sock.close()
        os.close(ready_r)
        # A session of its own (so a process group of its own: paused and killed with whatever it
        # starts), and nothing it starts can rejoin the judge's session (runtime.proctree).
        os.setsid()
        os.close(ready_w)
        set_dumpable(True)
        die_with_parent()
        contain_orphans()
        os.environ.clear()
        os.environ.update(req["env"])  # what the judge chose for this worker, not the zygote's own
        if req.get("cwd"):
            os.chdir(req["cwd"])
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        if req.get("sandbox"):
            # this fork stays outside as the keeper; its child runs the worker in the sandbox
            fds = sandbox.enter(sandbox_mounts.Spec.from_dict(json.loads(req["sandbox"])), req.get("cwd"), keep_fds=fds)
            contain_orphans()
        ranks = int(req.get("ranks") or 0)
        if ranks:
            code = group(fds[:ranks], fds[ranks:])
        else:
            sys.argv = [__file__, str(fds[0])]
            Worker(Connection(fds[0])).serve()
            code = 0
    except BaseException:  # noqa: BLE001 - a forked child must never return into the zygote's loop
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv))

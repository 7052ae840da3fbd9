"""The candidate worker: the only process where candidate code runs.

The judge (`runtime.worker.CandidateWorker`) starts it as
`python -m pytest_ditar.runtime.worker_main FD`, FD being its end of a socket pair. It builds one
candidate pipeline and then serves requests, strictly one reply per message, in order. It knows
nothing of pytest, git, the state directory or the statistics: the judge owns all of those.

How a worker process comes to be (spawned, forked from the zygote, a group's ranks) is here, with
the timed calls; the wire format and the loop that serves the judge: runtime.worker_protocol; the
device's setup and state: runtime.worker_device.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import NoReturn, Sequence, TypedDict

import numpy as np

from pytest_ditar.interface import Request
from pytest_ditar.runtime import sandbox, sandbox_mounts
from pytest_ditar.runtime.proctree import become_subreaper
from pytest_ditar.runtime.profiler import profile_call
from pytest_ditar.runtime.worker_device import DeviceOps
from pytest_ditar.runtime.worker_protocol import Reply


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


class Worker(DeviceOps):
    """The candidate's worker: the device's operations, and the timed calls of its candidate."""

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
            self.echo = self.arrays
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
        """No work: the judge times this round trip beside each call (the harness's own share). Its
        reply carries the last call's arrays again, so the round trip holds what a call's reply
        costs (writing, reading back): without them an empty call was a third of it on the tiny suite."""
        self.arrays = list(getattr(self, "echo", []))
        return {}


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

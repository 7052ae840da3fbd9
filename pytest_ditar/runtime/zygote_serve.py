"""The zygote's own process: import what every worker needs once, never touch CUDA, fork a worker
per request (the judge's side is runtime.zygote).

    python -P -m pytest_ditar.runtime.zygote_serve --zygote FD [--serve NAME --idle SECONDS]

FD is the starting judge's end of a socket pair. Without `--serve` the zygote is the run's own
and exits when that judge hangs up (its workers die with it). With `--serve` it is kept warm for
the tag's next gated run: it also listens on the abstract socket NAME (its user's alone, checked
by the peer's credentials), serves one judge at a time (a second is hung up on at once and starts
its own zygote), kills everything the previous judge's workers left when that judge hangs up, and
exits after SECONDS without a judge. Which judge may use it is decided by the judge, from the run
record (runtime.zygote.adopt), never by what this process says.
"""
from __future__ import annotations

import gc
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from typing import Any

from pytest_ditar.core.vocabulary import WIRE_MAX_MESSAGE
from pytest_ditar.hardware.fingerprint import cuda_nodes_present
from pytest_ditar.runtime import proctree
from pytest_ditar.runtime.worker_main import MAX_FDS, _fork_worker, contain_orphans, die_with_parent, set_dumpable


def import_libraries() -> float:
    """Import numpy, torch and diffusers without initializing CUDA; their seconds."""
    started = time.perf_counter()
    import numpy  # noqa: F401
    import torch

    # diffusers asks at import whether CUDA is there (torch.accelerator.is_available), and torch's
    # answer initializes CUDA, which poisons every later fork. The device nodes answer the same
    # question touching neither CUDA nor NVML (an NVML state inherited into a sandboxed worker
    # counted no GPU there); the test fork in serve() proves nothing else did.
    probe = torch.cuda.is_available
    torch.cuda.is_available = cuda_nodes_present
    try:
        from diffusers import AutoencoderKL, DiTPipeline, DPMSolverMultistepScheduler  # noqa: F401
    finally:
        torch.cuda.is_available = probe
    return time.perf_counter() - started


def fork_is_clean() -> bool:
    """Whether a child forked now may use CUDA (torch marks a fork after CUDA initialization bad)."""
    pid = os.fork()
    if pid == 0:
        import torch

        bad = getattr(torch._C, "_cuda_isInBadFork", lambda: False)()
        os._exit(1 if bad or torch.cuda.is_initialized() else 0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _listen(name: str) -> socket.socket:
    lst = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    lst.bind("\0" + name)  # abstract: no file to plant or remove; unreachable from a sandbox's network namespace
    lst.listen(4)
    return lst


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


class Server:
    """The zygote's loop: its judge's requests, and (kept) the next judge's connection."""

    def __init__(self, first: socket.socket, listener: socket.socket | None, idle_s: float, imports_s: float):
        self.judge: socket.socket | None = first
        self.listener = listener
        self.idle_s = idle_s
        self.imports_s = imports_s
        self.exited: dict[int, int | None] = {}  # worker pid -> exit code, None while it runs
        self.served = 0  # judges served so far: the first paid the imports, the others found them done

    def run(self) -> int:
        # Reap at once, not only at the next request: what a killed sandbox leaves (its bwrap, its PID 1)
        # is re-parented here and must not linger as a zombie in the worker's process group.
        signal.signal(signal.SIGCHLD, lambda *_: self.reap())
        idle_since = time.monotonic()
        while True:
            watch = [s for s in (self.judge, self.listener) if s is not None]
            if not watch:
                return 0
            wait = None if self.judge is not None else max(0.0, self.idle_s - (time.monotonic() - idle_since))
            try:
                ready, _, _ = select.select(watch, [], [], wait)
            except InterruptedError:
                continue
            if not ready and self.judge is None:
                return 0  # no judge came for idle_s: gone
            if self.listener is not None and self.listener in ready:
                self.accept()
            if self.judge is not None and self.judge in ready and not self.serve_one():
                self.hang_up()
                if self.listener is None:
                    return 0  # the run's own zygote: its judge is gone
                idle_since = time.monotonic()

    def accept(self) -> None:
        assert self.listener is not None
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        if self.judge is not None or _peer_uid(conn) != os.getuid():
            conn.close()  # one judge at a time, and only its user's: the other starts a zygote of its own
            return
        self.judge = conn
        conn.send(json.dumps({"pid": os.getpid(), "served": self.served}).encode())

    def serve_one(self) -> bool:
        """Answer one request of the judge; False once it hung up."""
        assert self.judge is not None
        try:
            msg, fds, _, _ = socket.recv_fds(self.judge, WIRE_MAX_MESSAGE, MAX_FDS)
        except OSError:
            return False
        if not msg:
            return False
        self.reap()
        req = json.loads(msg)
        reply: dict[str, Any]
        if req["op"] == "spawn":
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the fork starts with no handler of ours
            pid = _fork_worker(self.judge, fds, req, close=[s for s in (self.listener,) if s is not None])
            self.exited[pid] = None  # before anything reaps it: its exit code is kept for the judge
            signal.signal(signal.SIGCHLD, lambda *_: self.reap())
            self.reap()
            reply = {"pid": pid, "imports_s": self.imports_s if self.served == 0 else 0.0}
            for fd in fds:
                os.close(fd)
        else:
            reply = {"code": self.exited.get(int(req["pid"]), -9)}  # never ours, or reaped and reported: gone
        try:
            self.judge.send(json.dumps(reply).encode())
        except OSError:
            return False
        return True

    def hang_up(self) -> None:
        """The judge is gone (done, or killed): nothing it started may outlive it, here or for the
        next judge, so every descendant of this process is killed and reaped."""
        if self.judge is not None:
            self.judge.close()
            self.judge = None
        self.served += 1
        me = os.getpid()
        proctree.settle(lambda t: {p for p in t.tree(me) if p != me and t.alive(p)}, signal.SIGKILL, [me])
        deadline = time.monotonic() + 2.0
        while any(code is None for code in self.exited.values()) and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.005)
        self.reap()
        self.exited.clear()

    def reap(self) -> None:
        """Collect every child that has exited: a worker's exit code is kept for the judge to ask;
        orphans re-parented here (this zygote is a subreaper) are just released."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if not pid:
                return
            if pid in self.exited:
                self.exited[pid] = os.waitstatus_to_exitcode(status)


def main(argv: list[str]) -> int:
    set_dumpable(False)  # before any import
    args = dict(zip(argv[1::2], argv[2::2]))
    keep = "--serve" in args
    if not keep:
        die_with_parent()  # the run's own: gone with its judge
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the judge's to handle; it stops us
    contain_orphans()
    first = socket.socket(fileno=int(args["--zygote"]))
    try:
        listener = _listen(args["--serve"]) if keep else None
    except OSError:
        return 4  # the name is taken: the judge sees the zygote gone and spawns its workers itself
    imports_s = import_libraries()
    # The libraries' objects move to the collector's permanent generation: a worker's gc.collect()
    # (before every lane, runtime.worker_device op_steady) then walks only what the worker made
    # itself (0.3-0.8 s less per worker and lane on a 2-core CPU), and never dirties these shared pages.
    gc.collect()
    gc.freeze()
    if not fork_is_clean():
        return 3  # likewise
    return Server(first, listener, float(args.get("--idle", "0")), imports_s).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))

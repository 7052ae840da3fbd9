"""The judge's side of a group lane: a candidate that spans `lane.gpus` ranks, as one worker.

A GroupWorker is a CandidateWorker to everything that times, audits, pauses or kills one: the
lanes time it on the judge's clock from the request sent to every rank until the last rank's
reply, rank 0's outputs are the group's (read through the same wire protocol and shared-memory
buffer as any worker's), and the champion of a group lane is a GroupWorker too.

One process tree per group: a launcher (`worker_main.group`, forked from the zygote like any
worker, else a fresh interpreter) in one sandbox forks one worker per rank, each serving the judge
on a socket of its own, all in the launcher's process group.
So the group is paused (SIGSTOP of that group) and killed as one, while the other side is timed;
the ranks meet on the sandbox's own loopback (its network namespace: nothing outside reaches it),
NCCL on CUDA with rank r on GPU r, gloo on CPU. Every rank joins torch.distributed before its
`build(spec)` runs (spec.device = its device) and answers every request; a candidate finds its
rank with torch.distributed or RANK/WORLD_SIZE. The first rank to fail ends the group: the
launcher kills the rest, and the judge sees a CRASH naming the rank.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict, replace
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, cast

import numpy as np

from pytest_ditar.core.errors import CandidateError
from pytest_ditar.interface import PipelineSpec, Request
from pytest_ditar.runtime import boxdir, proctree, worker as w, worker_process as wp, zygote
from pytest_ditar.runtime.clock import judge_clock
from pytest_ditar.runtime.worker import CLOCK_SLACK_S, START_TIMEOUT_S, CandidateWorker, Outputs


def backend_for(device: str) -> str:
    return "nccl" if device.startswith("cuda") else "gloo"


def rank_device(device: str, rank: int) -> str:
    """Rank r's device: GPU r on CUDA (the group owns the visible GPUs), the CPU otherwise."""
    return f"cuda:{rank}" if device.startswith("cuda") else device


class GroupWorker(CandidateWorker):
    """`ranks` workers of one pipeline in one process tree, timed and judged as one."""

    def __init__(self, name: str, candidate_dir: Path, spec: PipelineSpec, ranks: int, **kwargs: Any):
        if ranks < 2:
            raise ValueError(f"a group has at least 2 ranks, got {ranks}")
        super().__init__(name, candidate_dir, spec, **kwargs)
        # NCCL's ranks pass CUDA memory handles over Unix sockets (allowed on CUDA:
        # sandbox_mounts.unix_sockets_needed); gloo's meet over TCP on the loopback
        # wire endpoints only, their process the group's; each rank logs to a file of its own (the
        # launcher to the group's), so lines never interleave
        self.ranks = [_Rank(self, f"{name}.rank{r}", candidate_dir, replace(spec, device=rank_device(spec.device, r)),
                            log_path=self.log_path.with_name(f"{name}.rank{r}.log"),
                            memory_budget_gib=self.memory_budget_gib, build_timeout_s=self.build_timeout_s,
                            sandboxed=False)
                      for r in range(ranks)]
        self._ends: list[Any] = []  # the launcher's ends (rank sockets, then logs) until it runs
        self._group_env: dict[str, str] = {}

    # ---- life cycle -------------------------------------------------------------------------
    def start(self, fingerprint: bool = False) -> "GroupWorker":
        """Launch the group's process tree (forked from the zygote on a thread of its own, as a
        worker is, else a fresh interpreter) and say hello to every rank; returns at once."""
        if self._launcher is not None or self._proc is not None:
            return self
        if self.spec.device.startswith("cuda"):
            import torch

            if torch.cuda.device_count() < len(self.ranks):
                raise CandidateError("exception", f"a {len(self.ranks)}-GPU lane needs {len(self.ranks)} GPUs; "
                                                  f"{torch.cuda.device_count()} visible")
        if not wp._SUBREAPER:
            wp._SUBREAPER.append(proctree.become_subreaper())
        self._box = self._sandbox_spec() if self.sandboxed else None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ) if self.env is None else dict(self.env)
        if self._box is not None:
            env["TMPDIR"] = env["PWD"] = boxdir.WORK
        if self.buffer_dir is None:
            self.buffer_dir = boxdir.new("io")
        socks, logs = [], []
        for r in self.ranks:
            parent, child = socket.socketpair()
            r.conn = Connection(parent.detach())
            fd, path = tempfile.mkstemp(prefix="rank-", suffix=".buf", dir=self.buffer_dir)
            r.buffer_file, r.buffer_path = os.fdopen(fd, "rb"), Path(path)
            socks.append(child)
            logs.append(open(r.log_path, "ab"))
        self._ends, self._group_env = [*socks, *logs], env
        z = zygote.zygote()
        if z is None:
            self._proc = self._spawn_group()
        else:
            self._launcher = threading.Thread(target=self._launch_group, args=(z,), name=f"ditar-start-{self.name}",
                                              daemon=True)
            self._launcher.start()
        wp._LIVE.add(self)
        backend = backend_for(self.spec.device)
        for i, r in enumerate(self.ranks):
            r._send("hello", device=r.spec.device, cpu_threads=self.cpu_threads, fingerprint=fingerprint and i == 0,
                    buffer=f"{boxdir.IO}/{Path(str(r.buffer_path)).name}" if self._box is not None
                    else str(r.buffer_path),
                    group=backend)
        return self

    def _fds(self) -> list[int]:
        return [e.fileno() for e in self._ends]

    def _launch_group(self, z: Any) -> None:
        box = self._box.to_json() if self._box is not None else None
        self._proc = wp._fork_from_zygote(z, self._fds(), self.log_path, self.cwd, self._group_env, box,
                                         ranks=len(self.ranks))

    def _spawn_group(self) -> subprocess.Popen:
        """The launcher in a fresh interpreter (no zygote here), a session of its own."""
        fds = self._fds()
        n = len(self.ranks)
        keep = ",".join(map(str, fds))
        inside = ["-m", "pytest_ditar.runtime.sandbox", self._box.to_json(), "--keep", keep] if self._box else []
        try:
            with open(self.log_path, "ab") as log:
                return subprocess.Popen([sys.executable, *zygote.PYTHON_FLAGS, *inside, "-m",
                                         "pytest_ditar.runtime.worker_main", "--group", ",".join(map(str, fds[:n])),
                                         "--logs", ",".join(map(str, fds[n:]))],
                                        pass_fds=fds, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        cwd=self.cwd, env=self._group_env, start_new_session=True)
        finally:
            self._close_ends()

    def _close_ends(self) -> None:
        for end in self._ends:
            end.close()
        self._ends = []

    def _launched(self) -> None:
        if self._proc is None:  # the zygote refused or died: a fresh interpreter, from this thread
            self._proc = self._spawn_group()
        self._close_ends()

    def hello(self, timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
        self.start()
        self._gather("hello", timeout_s)
        return self.info

    def request_build(self) -> None:
        self.start()
        if self.build_s is None and "build" not in self.ranks[0].pending:
            for r in self.ranks:
                spec = {**asdict(r.spec), "model_dir": str(r.spec.model_dir)}
                r._send("build", candidate_dir=self.package_inside(), spec=spec,
                        memory_budget_gib=self.memory_budget_gib)

    def built(self, timeout_s: float | None = None) -> "GroupWorker":
        self.request_build()
        if self.ranks[0].pending and self.ranks[0].pending[0] == "hello":
            self._gather("hello", START_TIMEOUT_S)
        if self.build_s is None:
            replies = self._gather("build", timeout_s or self.build_timeout_s or START_TIMEOUT_S)
            self.build_s = max(float(h.get("build_s", 0.0)) for h, _ in replies)
        return self

    def ask_to_quit(self) -> None:
        if self.proc is None or self._quit_sent:
            return
        self._quit_sent = True
        if any(r.pending for r in self.ranks):
            self.kill()
        with contextlib.suppress(OSError, ValueError):
            self.resume()
            if self.error is None and self.proc.poll() is None:
                for r in self.ranks:
                    cast(Connection, r.conn).send_bytes(json.dumps({"op": "quit"}).encode())

    def close(self) -> None:
        if self.proc is None:
            return
        self.ask_to_quit()
        wp._LIVE.discard(self)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
        wp._end_candidate_processes(self)
        for r in self.ranks:
            with contextlib.suppress(OSError):
                cast(Connection, r.conn).close()
        self._drop_buffer()

    def _drop_buffer(self) -> None:
        for r in self.ranks:
            r.buffer_dir = None  # the group's folder, removed once below
            r._drop_buffer()
        super()._drop_buffer()

    # ---- requests ---------------------------------------------------------------------------
    def generate(self, request: Request, timeout_s: float | None = None) -> Outputs:
        """Every rank gets the request; the call ends with the last rank's reply (the group's time,
        slowest rank included). Rank 0's outputs are the group's; every rank's own account of its
        call must lie inside the judge's interval."""
        self.built()
        self.resume()
        req = w._request_dict(request)
        t0 = judge_clock()
        for i, r in enumerate(self.ranks):
            r._send("generate", request=req, outputs=i == 0)
        replies = self._gather("generate", timeout_s)
        t1 = judge_clock()
        head, arrays = replies[0]
        if len(arrays) != 2:
            raise self._fail(CandidateError("exception", f"worker {self.name} rank 0 sent {len(arrays)} arrays, "
                                                         "expected 2"))
        worker_s = 0.0
        for i, (h, _) in enumerate(replies):
            own = float(h.get("worker_s", 0.0))
            if own > (t1 - t0) + CLOCK_SLACK_S:
                raise self._fail(CandidateError("exception", f"worker {self.name} rank {i} reports {own:.4f}s for a "
                                                             f"call the judge timed at {t1 - t0:.4f}s: its clock was "
                                                             "tampered with"))
            worker_s = max(worker_s, own)
        stamps = {k: float(v) for k, v in (head.get("stamps") or {}).items() if isinstance(v, (int, float))}
        stamps.update(sent=t0, header=self.ranks[0].t_header, copied=t1)
        probes = [float(p) for h, _ in replies if isinstance(p := h.get("idle_probe_s"), (int, float))]
        return Outputs(arrays[0], arrays[1], t1 - t0, worker_s, stamps, max(probes) if probes else None)

    def flops(self, request: Request, timeout_s: float | None = None) -> float | None:
        """The group's FLOPs: every rank's count, summed (each rank does its share)."""
        got = [h.get("flops") for h, _ in self._call_all("flops", timeout_s, request=w._request_dict(request))]
        counts = [float(c) for c in got if isinstance(c, (int, float))]
        return sum(counts) if len(counts) == len(got) else None

    def probe_flops(self, seconds: float = 0.5) -> float:
        return float(self._call_all("probe_flops", 60.0 + seconds, seconds=seconds)[0][0]["flops_per_s"])

    def profile(self, request: Request, warm: Request, warmup: int, reference: Request | None,
                timeout_s: float | None = None) -> tuple[Path, Path]:
        raise CandidateError("exception", f"{self.name}: profiling a {len(self.ranks)}-rank group is not supported; "
                                          "profile the lane's one-GPU pipeline")

    def empty(self, timeout_s: float | None = 60.0) -> int:
        """A call that does no work on every rank: the group's round trip, to the last rank's reply
        (rank 0's carries its last call's arrays again, as a call's does: their bytes)."""
        return sum(a.nbytes for _, arrays in self._call_all("empty", timeout_s) for a in arrays)

    def dtypes(self, timeout_s: float | None = None) -> set[str]:
        return set().union(*(set(h.get("dtypes", ())) for h, _ in self._call_all("dtypes", timeout_s)))

    def memory(self, reset: bool = False) -> tuple[float | None, float | None]:
        """The largest rank's peak (each rank has its own device)."""
        got = [(h.get("allocated_gib"), h.get("reserved_gib")) for h, _ in self._call_all("memory", 60.0, reset=reset)]
        alloc = [a for a, _ in got if a is not None]
        res = [r for _, r in got if r is not None]
        return (max(alloc) if alloc else None), (max(res) if res else None)

    def steady(self, on: bool, pin_cpu: bool = False, cpu: int | None = None) -> None:
        # never the lane's one core: the ranks run at the same time, and one core would serialize them
        self._call_all("steady", 60.0, on=on, pin_cpu=pin_cpu)

    # ---- plumbing ---------------------------------------------------------------------------
    def _call_all(self, op: str, timeout_s: float | None, **args: Any) -> list[tuple[dict[str, Any], list[np.ndarray]]]:
        self.built()
        self.resume()
        for r in self.ranks:
            r._send(op, **args)
        return self._gather(op, timeout_s)

    def _gather(self, op: str, timeout_s: float | None) -> list[tuple[dict[str, Any], list[np.ndarray]]]:
        """Every rank's reply to `op`, read as each arrives; the first rank that fails (raises, dies,
        sends malformed data, or is still silent at the timeout) ends the group as a CRASH."""
        if self.error is not None:
            raise self.error
        got: dict[int, tuple[dict[str, Any], list[np.ndarray]]] = {}
        deadline = None if timeout_s is None else judge_clock() + timeout_s
        while len(got) < len(self.ranks):
            waiting = {cast(Connection, r.conn): i for i, r in enumerate(self.ranks) if i not in got}
            left = None if deadline is None else max(0.0, deadline - judge_clock())
            ready = wait(list(waiting), left)
            if not ready:
                slow = sorted(waiting.values())
                raise self._fail(CandidateError("timeout", f"{self.name} {op} (rank {', '.join(map(str, slow))})",
                                                seconds=timeout_s))
            for conn in ready:
                i = waiting[cast(Connection, conn)]
                r = self.ranks[i]
                try:  # every caller drained the ops sent before `op` (built() reads hello first)
                    got[i] = r._receive(op, None)
                except CandidateError as exc:
                    raise self._fail(_ranked(exc, i, len(self.ranks))) from None
        if op == "hello":
            self.info = {k: got[0][0][k] for k in ("pid", "argv", "fingerprint") if k in got[0][0]}
            self.info["rank_pids"] = [got[i][0].get("pid") for i in range(len(self.ranks))]
        return [got[i] for i in range(len(self.ranks))]

    def _fail(self, err: CandidateError) -> CandidateError:
        for r in self.ranks:
            r.error = r.error or err
        return super()._fail(err)

    def _died(self) -> CandidateError:
        return self.ranks[0]._died()


class _Rank(CandidateWorker):
    """One rank's wire endpoint: its socket, its buffer and its log; its process is the group's."""

    def __init__(self, group: GroupWorker, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.group = group

    def start(self, fingerprint: bool = False) -> "_Rank":
        return self  # the group launches every rank

    @property
    def proc(self) -> Any:
        return self.group.proc


def _ranked(exc: CandidateError, rank: int, world: int) -> CandidateError:
    """The rank's error, saying which rank of how many."""
    return CandidateError(exc.kind, f"rank {rank} of {world}: {exc.message}", item=exc.item, seconds=exc.seconds,
                          where=exc.where)

"""Multi-GPU lanes: a candidate that spans `lane.gpus` devices, launched with torch.distributed.

The harness starts one process per rank with torch.multiprocessing.spawn (NCCL on CUDA, one GPU
per rank; gloo on CPU, so the same code runs in CPU tests), every rank in one sandbox
(runtime.sandbox: `python -m pytest_ditar.runtime.sandbox SPEC -m pytest_ditar.runtime.multigpu
ARGS`, writable only in the group's folder, the ranks meeting on its loopback), initialises the process group, and
builds the candidate in every rank (`build(spec)` with spec.device = that rank's device; a
candidate finds its rank with torch.distributed). Every rank calls `generate(request)` together;
rank 0's result is the group's output. A timed round is barrier -> generate -> device sync ->
barrier on every rank, so the time rank 0 records is the whole group's, slowest rank included.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pytest_ditar.core.errors import CandidateError, DitarError
from pytest_ditar.core.vocabulary import ENV_CPU_THREADS
from pytest_ditar.interface import PipelineSpec, Request


def backend_for(device: str) -> str:
    return "nccl" if device.startswith("cuda") else "gloo"


def _rank_main(rank: int, world: int, init_file: str, backend: str, candidate_dir: str, spec: PipelineSpec,
               requests: Sequence[Request], mode: str, warmup: int, repeats: int, out_dir: str) -> None:
    import torch
    import torch.distributed as dist

    from pytest_ditar.runtime.harness import build_candidate

    cuda = backend == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(int(os.environ.get(ENV_CPU_THREADS, "1")))  # as a candidate worker does
    # device_id binds NCCL to this rank's GPU up front (no guessing from the rank, no warning)
    extra: dict[str, Any] = {"device_id": torch.device("cuda", rank)} if cuda else {}
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world, **extra)
    try:
        device = f"cuda:{rank}" if cuda else "cpu"
        cand = build_candidate(Path(candidate_dir), replace(spec, device=device))
        out = Path(out_dir)
        if mode == "outputs":
            arrays: dict[str, Any] = {}  # ndarrays; Any: savez's **kwds would also fill its allow_pickle
            for n, req in enumerate(requests):
                gen = cand.generate(req)
                lat = (gen.latents.detach().float().cpu().numpy() if hasattr(gen.latents, "detach")
                       else np.asarray(gen.latents))
                arrays[f"lat{n}"], arrays[f"img{n}"] = lat.astype(np.float32), np.asarray(gen.images)
            if rank == 0:
                np.savez(out / "outputs.npz", **arrays)
            return
        samples: list[float] = []
        warm: list[float] = []
        for i in range(warmup + repeats):
            dist.barrier()
            t0 = time.perf_counter()
            cand.generate(requests[0])
            if cuda:
                torch.cuda.synchronize(device)
            dist.barrier()  # the group's time: until the slowest rank is done
            (warm if i < warmup else samples).append(time.perf_counter() - t0)
        if rank == 0:
            peak = torch.cuda.max_memory_reserved(device) / 2**30 if cuda else None
            (out / "times.json").write_text(json.dumps({"samples": samples, "warmup": warm, "peak_reserved_gib": peak}))
    finally:
        dist.destroy_process_group()


def _spawn(candidate_dir: Path, spec: PipelineSpec, requests: Sequence[Request], world: int, mode: str,
           warmup: int = 0, repeats: int = 0, sandboxed: bool = True, compile_cache: Path | None = None) -> Path:
    """Run the group; returns the folder its rank 0 wrote into. The group runs in one sandbox
    (runtime.sandbox: its ranks share its /dev/shm and loopback, NCCL's and gloo's transports),
    which may write only that folder; the compile cache, as the candidate's, is an overlay."""
    backend = backend_for(spec.device)
    if backend == "nccl":
        import torch

        if torch.cuda.device_count() < world:
            raise CandidateError("exception",
                                 f"a {world}-GPU lane needs {world} GPUs; {torch.cuda.device_count()} visible")
    tmp = Path(tempfile.mkdtemp(prefix="ditar-group-"))
    args = (world, str(tmp / "rendezvous"), backend, str(candidate_dir), spec, tuple(requests), mode, warmup, repeats,
            str(tmp))
    try:
        if sandboxed:
            _run_sandboxed(args, tmp, spec, compile_cache)
        else:
            import torch.multiprocessing as mp

            mp.spawn(_rank_main, args=args, nprocs=world, join=True)
    except Exception as exc:  # noqa: BLE001 - a rank that raised is the candidate's crash
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, DitarError):
            raise
        raise CandidateError("exception", f"{world}-process group failed: {_last_line(exc)[:300]}") from None
    return tmp


def _last_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return next((line for line in reversed(text) if line.strip()), type(exc).__name__)


class _GroupFailed(Exception):
    pass


def _run_sandboxed(args: tuple, tmp: Path, spec: PipelineSpec, compile_cache: Path | None) -> None:
    from pytest_ditar.runtime import sandbox

    avail = sandbox.availability()
    if avail.problem:
        raise sandbox.SandboxUnavailable(avail.problem)
    world, init_file, backend, cand, _, requests, mode, warmup, repeats, out = args
    (tmp / "group.json").write_text(json.dumps({
        "world": world, "init_file": init_file, "backend": backend, "candidate_dir": cand,
        "spec": {**asdict(spec), "model_dir": str(spec.model_dir)},
        "requests": [{"labels": list(r.labels), "seeds": list(r.seeds), "steps": r.steps} for r in requests],
        "mode": mode, "warmup": warmup, "repeats": repeats, "out_dir": out}))
    private: tuple[str, ...] = ()
    if compile_cache is not None:
        (compile_cache / "triton").mkdir(parents=True, exist_ok=True)
        private = (str(compile_cache.resolve()),)
    box = sandbox.Spec(bwrap=str(avail.bwrap), writable=(str(tmp.resolve()),), private=private,
                       devices=sandbox.device_nodes(spec.device), overlay=avail.overlay,
                       # the ranks meet on the sandbox's loopback, its only network
                       env={"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo", "TMPDIR": str(tmp.resolve())})
    res = subprocess.run([sys.executable, *(("-P",) if sys.version_info >= (3, 11) else ()), "-m",
                          "pytest_ditar.runtime.sandbox", box.to_json(), "-m", "pytest_ditar.runtime.multigpu",
                          str(tmp / "group.json")], cwd=tmp, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if res.returncode != 0:
        said = (tmp / "error.txt").read_text() if (tmp / "error.txt").is_file() else ""
        lines = (said or res.stderr or res.stdout).strip().splitlines()
        raise _GroupFailed(lines[-1] if lines else f"exit code {res.returncode}")


def _group_main(path: str) -> int:
    """Inside the group's sandbox: spawn the ranks; a failure's last line goes to error.txt."""
    import torch.multiprocessing as mp

    a = json.loads(Path(path).read_text())
    spec = PipelineSpec(**{**a["spec"], "model_dir": Path(a["spec"]["model_dir"])})
    requests = tuple(Request(tuple(r["labels"]), tuple(r["seeds"]), int(r["steps"])) for r in a["requests"])
    try:
        mp.spawn(_rank_main, args=(a["world"], a["init_file"], a["backend"], a["candidate_dir"], spec, requests,
                                   a["mode"], a["warmup"], a["repeats"], a["out_dir"]), nprocs=a["world"], join=True)
    except Exception as exc:  # noqa: BLE001 - the judge reads the line
        (Path(a["out_dir"]) / "error.txt").write_text(_last_line(exc))
        return 1
    return 0


def group_outputs(candidate_dir: Path, spec: PipelineSpec, requests: Sequence[Request], world: int = 2,
                  sandboxed: bool = True, compile_cache: Path | None = None):
    """Rank 0's (latents, images) per request, from a `world`-process group."""
    tmp = _spawn(candidate_dir, spec, requests, world, "outputs", sandboxed=sandboxed, compile_cache=compile_cache)
    try:
        with np.load(tmp / "outputs.npz") as z:
            return [(z[f"lat{n}"], z[f"img{n}"]) for n in range(len(requests))]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def group_times(candidate_dir: Path, spec: PipelineSpec, request: Request, world: int = 2, warmup: int = 1,
                repeats: int = 5, sandboxed: bool = True, compile_cache: Path | None = None) -> dict[str, Any]:
    tmp = _spawn(candidate_dir, spec, [request], world, "time", warmup, repeats, sandboxed, compile_cache)
    try:
        return json.loads((tmp / "times.json").read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure_group_lane(sess: Any, lane: Any):
    """A `gpus: N` lane as a LaneMeasurement (candidate only: no in-process champion interleave)."""
    from pytest_ditar.runtime.harness import make_spec
    from pytest_ditar.runtime.lanes import LaneMeasurement, lane_request

    spec = make_spec(sess.suite, sess.model_dir(), sess.resolved_device())
    t0 = time.perf_counter()
    r = group_times(sess.cfg.candidate_path, spec, lane_request(sess.suite, lane), world=lane.gpus,
                    warmup=lane.warmup, repeats=lane.repeats, sandboxed=sess.cfg.sandboxed,
                    compile_cache=sess.compile_cache())
    return LaneMeasurement(lane.name, r["samples"], r["warmup"], peak_reserved_gib=r["peak_reserved_gib"],
                           wall_s=time.perf_counter() - t0)


if __name__ == "__main__":
    sys.exit(_group_main(sys.argv[1]))

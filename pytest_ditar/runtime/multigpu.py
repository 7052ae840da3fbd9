"""Multi-GPU lanes: a candidate that spans `lane.gpus` devices, launched with torch.distributed.

The harness starts one process per rank with torch.multiprocessing.spawn (NCCL on CUDA, one GPU
per rank; gloo on CPU, so the same code runs in CPU tests), initialises the process group, and
builds the candidate in every rank (`build(spec)` with spec.device = that rank's device; a
candidate finds its rank with torch.distributed). Every rank calls `generate(request)` together;
rank 0's result is the group's output. A timed round is barrier -> generate -> device sync ->
barrier on every rank, so the time rank 0 records is the whole group's, slowest rank included.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pytest_ditar.core.errors import CandidateError
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
    extra = {"device_id": torch.device("cuda", rank)} if cuda else {}
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world, **extra)
    try:
        device = f"cuda:{rank}" if cuda else "cpu"
        cand = build_candidate(Path(candidate_dir), replace(spec, device=device))
        out = Path(out_dir)
        if mode == "outputs":
            arrays = {}
            for n, req in enumerate(requests):
                gen = cand.generate(req)
                lat = gen.latents.detach().float().cpu().numpy() if hasattr(gen.latents, "detach") else np.asarray(gen.latents)
                arrays[f"lat{n}"], arrays[f"img{n}"] = lat.astype(np.float32), np.asarray(gen.images)
            if rank == 0:
                np.savez(out / "outputs.npz", **arrays)
            return
        samples, warm = [], []
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
           warmup: int = 0, repeats: int = 0) -> Path:
    import torch.multiprocessing as mp

    backend = backend_for(spec.device)
    if backend == "nccl":
        import torch

        if torch.cuda.device_count() < world:
            raise CandidateError("exception", f"a {world}-GPU lane needs {world} GPUs; {torch.cuda.device_count()} visible")
    tmp = Path(tempfile.mkdtemp(prefix="ditar-group-"))
    try:
        mp.spawn(_rank_main, args=(world, str(tmp / "rendezvous"), backend, str(candidate_dir), spec, tuple(requests),
                                   mode, warmup, repeats, str(tmp)), nprocs=world, join=True)
    except Exception as exc:  # noqa: BLE001 - a rank that raised is the candidate's crash
        shutil.rmtree(tmp, ignore_errors=True)
        text = str(exc).strip().splitlines()
        last = next((l for l in reversed(text) if l.strip()), type(exc).__name__)
        raise CandidateError("exception", f"{world}-process group failed: {last[:300]}") from None
    return tmp


def group_outputs(candidate_dir: Path, spec: PipelineSpec, requests: Sequence[Request], world: int = 2):
    """Rank 0's (latents, images) per request, from a `world`-process group."""
    tmp = _spawn(candidate_dir, spec, requests, world, "outputs")
    try:
        with np.load(tmp / "outputs.npz") as z:
            return [(z[f"lat{n}"], z[f"img{n}"]) for n in range(len(requests))]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def group_times(candidate_dir: Path, spec: PipelineSpec, request: Request, world: int = 2, warmup: int = 1,
                repeats: int = 5) -> dict[str, Any]:
    tmp = _spawn(candidate_dir, spec, [request], world, "time", warmup, repeats)
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
                    warmup=lane.warmup, repeats=lane.repeats)
    return LaneMeasurement(lane.name, r["samples"], r["warmup"], peak_reserved_gib=r["peak_reserved_gib"],
                           wall_s=time.perf_counter() - t0)

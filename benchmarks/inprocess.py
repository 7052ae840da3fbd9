"""An in-process reference pipeline for benchmarks, called like a candidate worker.

The gate never runs candidate code in its own process (pytest_ditar.runtime.worker). Benchmarks
still want an in-process reference: the old lanes' timing (generate + device sync, nothing
else) to price the worker round trip against, or a stock pipeline's outputs in a probe that must
not start another process. `InProcessCandidate` builds with the worker's own function
(`harness.build_candidate`) and answers `generate(request, timeout_s)` with the worker's
`Outputs`, so `harness.run_batch` accepts it. The timeout is not enforced here.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from pytest_ditar.interface import PipelineSpec, Request
from pytest_ditar.runtime.harness import build_candidate
from pytest_ditar.runtime.worker import Outputs


class InProcessCandidate:
    def __init__(self, candidate_dir: Path, spec: PipelineSpec):
        self.spec = spec
        t0 = time.perf_counter()
        self.candidate = build_candidate(Path(candidate_dir), spec)
        self.sync()
        self.build_s = time.perf_counter() - t0

    def sync(self) -> None:
        if self.spec.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.spec.device)

    def timed(self, request: Request) -> tuple[float, object]:
        """What the old in-process lanes timed: generate + device sync (perf_counter)."""
        t0 = time.perf_counter()
        gen = self.candidate.generate(request)
        self.sync()
        return time.perf_counter() - t0, gen

    def generate(self, request: Request, timeout_s: float | None = None) -> Outputs:
        seconds, gen = self.timed(request)
        latents = gen.latents
        if hasattr(latents, "detach"):
            latents = latents.detach().float().cpu().numpy()
        return Outputs(np.ascontiguousarray(latents, dtype=np.float32), np.ascontiguousarray(gen.images),
                       seconds, seconds, {})

    # the worker's life-cycle calls, for code that handles both kinds alike
    def built(self, timeout_s: float | None = None) -> "InProcessCandidate":
        return self

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    def close(self) -> None:
        self.candidate = None

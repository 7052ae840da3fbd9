"""The one-line alternative to the whole loop: stock diffusers DiTPipeline with its transformer
under `torch.compile`. The ladder times it beside its final champion in one call
(benchmarks/compile_reference.py), so "the loop beats torch.compile" is measured, not claimed.

COMPILE_MODE is the switch the script rewrites: "reduce-overhead" (CUDA graphs of the compiled
graph) or "max-autotune" (also searches GEMM and conv kernels: minutes of compile on a GPU).
"""
from __future__ import annotations

import numpy as np
import torch
from diffusers import DiTPipeline, DPMSolverMultistepScheduler

from pytest_ditar.interface import Generated, PipelineSpec, Request

COMPILE_MODE = "reduce-overhead"


class CompiledStockDiT:
    def __init__(self, spec: PipelineSpec):
        dtype = getattr(torch, spec.dtype)
        pipe = DiTPipeline.from_pretrained(spec.model_dir, dtype=dtype, local_files_only=True)
        pipe.scheduler = DPMSolverMultistepScheduler.from_config(pipe.scheduler.config)
        pipe.set_progress_bar_config(disable=True)
        self.pipe = pipe.to(spec.device)
        # fullgraph: a graph break would time eager code under the compiled label
        pipe.transformer = torch.compile(pipe.transformer, mode=COMPILE_MODE, fullgraph=True)
        self.spec = spec
        self._latents = None
        decode = pipe.vae.decode

        def capture(z, *args, **kwargs):  # keep the decoder input: the contract's "final latents"
            self._latents = z
            return decode(z, *args, **kwargs)

        pipe.vae.decode = capture

    def generate(self, request: Request) -> Generated:
        generators = [torch.Generator("cpu").manual_seed(s) for s in request.seeds]
        out = self.pipe(class_labels=list(request.labels), guidance_scale=self.spec.guidance,
                        generator=generators, num_inference_steps=request.steps, output_type="np")
        images = np.clip(np.rint(out.images * 255.0), 0, 255).astype(np.uint8)
        return Generated(latents=self._latents, images=images)


def build(spec: PipelineSpec) -> CompiledStockDiT:
    return CompiledStockDiT(spec)

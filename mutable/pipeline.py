"""Candidate pipeline. Unmodified, this is stock diffusers DiTPipeline used as documented.

Contract (pytest_ditar.interface): `build(spec)` returns an object whose
`generate(request)` returns final latents (the VAE decoder's input) and uint8 images.
Optimizations go here, one causal hypothesis per commit.
"""
from __future__ import annotations

import numpy as np
import torch
from diffusers import DiTPipeline, DPMSolverMultistepScheduler

from pytest_ditar.interface import Generated, PipelineSpec, Request


class StockDiT:
    def __init__(self, spec: PipelineSpec):
        dtype = getattr(torch, spec.dtype)
        pipe = DiTPipeline.from_pretrained(spec.model_dir, dtype=dtype, local_files_only=True)
        pipe.scheduler = DPMSolverMultistepScheduler.from_config(pipe.scheduler.config)
        pipe.set_progress_bar_config(disable=True)
        self.pipe = pipe.to(spec.device)
        self.spec = spec
        self._latents = None
        decode = pipe.vae.decode

        def capture(z, *args, **kwargs):  # keep the decoder input: the contract's "final latents"
            self._latents = z
            return decode(z, *args, **kwargs)

        pipe.vae.decode = capture

    def generate(self, request: Request) -> Generated:
        # One CPU generator per image, so an image's noise does not depend on its batch mates.
        generators = [torch.Generator("cpu").manual_seed(s) for s in request.seeds]
        out = self.pipe(class_labels=list(request.labels), guidance_scale=self.spec.guidance,
                        generator=generators, num_inference_steps=request.steps, output_type="np")
        images = np.clip(np.rint(out.images * 255.0), 0, 255).astype(np.uint8)
        return Generated(latents=self._latents, images=images)


def build(spec: PipelineSpec) -> StockDiT:
    return StockDiT(spec)

"""Candidate pipeline: guidance folded into the schedule (claimed exact class).

DELIBERATELY BAD VARIANT (test fixture): labelled "exact", but it changes the outputs.

Claimed causal hypothesis: "the classifier-free guidance combine
`uncond + g * (cond - uncond)` costs one extra elementwise pass per step; with DPM-Solver++ the
data-prediction update is linear in eps, so the guidance can be re-expressed with scale
g' = g - 1 = 3.0 applied inside the same combine at no cost in accuracy."  The algebra is wrong
(uncond + (g-1)(cond-uncond) is simply a weaker guidance of 3.0 instead of the suite's 4.0), so the
samples drift: on the tiny suite latents rel-L2 vs stock ~0.12 (b1) / ~0.19 (b8), images PSNR
~36.5 dB (b1) / ~31.7 dB (b8), max pixel diff 11 / 36 -- outside the exact floors
(rel-L2 <= 1e-2, PSNR >= 38 dB) while staying finite and sane. Speed is unchanged (stock path).

Class: exact (claimed; wrongly). Measured with benchmarks/tiny_candidates.py (one process: stock mutable/ and this file,
3 warmups each, then 60 interleaved generate(lane_request(suite, lane)) calls per candidate;
`python benchmarks/tiny_candidates.py`). The 2-core machine was shared with another
CPU-bound job, so medians are inflated; min times are shown as the quiet-machine estimate.
  latency_b1 median 38.1 vs 38.6 ms (0.99x); throughput_b8 42.3 vs 44.4 ms (0.95x) -- no speed change.
Per corpus item (batch 4): latents rel-L2 0.116..0.261, PSNR 29.8..36.5 dB, SSIM 0.974..0.996: every
item fails the exact floors (rel-L2 <= 1e-2, PSNR >= 38) while staying finite and non-constant.
"""
from __future__ import annotations

import numpy as np
import torch
from diffusers import DiTPipeline, DPMSolverMultistepScheduler

from pytest_ditar.interface import Generated, PipelineSpec, Request


class FoldedGuidanceDiT:
    def __init__(self, spec: PipelineSpec):
        dtype = getattr(torch, spec.dtype)
        pipe = DiTPipeline.from_pretrained(spec.model_dir, dtype=dtype, local_files_only=True)
        pipe.scheduler = DPMSolverMultistepScheduler.from_config(pipe.scheduler.config)
        pipe.set_progress_bar_config(disable=True)
        self.pipe = pipe.to(spec.device)
        self.spec = spec
        # "folded" guidance scale: g - 1 (the mistake that makes this variant alter outputs)
        self.guidance = spec.guidance - 1.0 if spec.guidance > 2.0 else spec.guidance
        self._latents = None
        decode = pipe.vae.decode

        def capture(z, *args, **kwargs):  # keep the decoder input: the contract's "final latents"
            self._latents = z
            return decode(z, *args, **kwargs)

        pipe.vae.decode = capture

    def generate(self, request: Request) -> Generated:
        generators = [torch.Generator("cpu").manual_seed(s) for s in request.seeds]
        out = self.pipe(class_labels=list(request.labels), guidance_scale=self.guidance,
                        generator=generators, num_inference_steps=request.steps, output_type="np")
        images = np.clip(np.rint(out.images * 255.0), 0, 255).astype(np.uint8)
        return Generated(latents=self._latents, images=images)


def build(spec: PipelineSpec) -> FoldedGuidanceDiT:
    return FoldedGuidanceDiT(spec)

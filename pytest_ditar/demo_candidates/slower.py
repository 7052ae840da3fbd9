"""Candidate pipeline: batch-invariant, two-pass classifier-free guidance (exact class).

DELIBERATELY BAD VARIANT (test fixture): honest and exact, but slower.

Causal hypothesis (as a contributor might pitch it): DiTPipeline concatenates the conditional
and unconditional halves into one 2B batch per step and then runs the scheduler on 2B rows whose
halves are identical copies. Denoising each image on its own, with two plain transformer passes
(its class label, then the null label 1000) and its own scheduler instance, removes the per-step
`torch.cat([half, half])` and the duplicated scheduler rows, halves peak activation memory and
makes every image independent of its batch mates (like its per-image noise generator already is).
Same weights, same math per row, same DPM-Solver++(2M) schedule, same per-image CPU generators,
so outputs match stock within float rounding.

Why it is really slower: on this tiny CPU model a transformer call costs ~1 ms of fixed
Python/dispatch overhead whatever its batch, so replacing one 2B call per step with 2 calls per
image per step roughly doubles the denoising time (x B more at larger batches). The hand-written
loop also runs without `torch.no_grad()` (the stock `__call__` is decorated with it), so autograd
records a graph for every op, adding ~25% per call.

Class: exact. Measured with benchmarks/tiny_candidates.py (one process: stock mutable/ and this file,
3 warmups each, then 60 interleaved generate(lane_request(suite, lane)) calls per candidate;
`python benchmarks/tiny_candidates.py`). The 2-core machine was shared with another
CPU-bound job, so medians are inflated; min times are shown as the quiet-machine estimate.
  latency_b1:    median 38.1 -> 59.2 ms (0.64x, i.e. 1.56x slower); min 21.8 -> 35.5 ms (0.61x)
  throughput_b8: median 42.3 -> 420 ms (0.10x); min 27.2 -> 270 ms
Outputs vs stock: latents rel-L2 3.1e-7 (b1) / 2.7e-7 (b8), max |diff| 2e-3 on latents of magnitude
~1e3, images identical (PSNR inf) on both lanes and all 12 corpus items.
"""
from __future__ import annotations

import numpy as np
import torch
from diffusers import DiTPipeline, DPMSolverMultistepScheduler
from diffusers.utils.torch_utils import randn_tensor

from pytest_ditar.interface import Generated, PipelineSpec, Request


class PerImageCfgDiT:
    def __init__(self, spec: PipelineSpec):
        dtype = getattr(torch, spec.dtype)
        pipe = DiTPipeline.from_pretrained(spec.model_dir, dtype=dtype, local_files_only=True)
        pipe.scheduler = DPMSolverMultistepScheduler.from_config(pipe.scheduler.config)
        pipe.set_progress_bar_config(disable=True)
        self.pipe = pipe.to(spec.device)
        self.spec = spec

    def _denoise_one(self, latents: torch.Tensor, label: int, steps: int) -> torch.Tensor:
        pipe, guidance = self.pipe, self.spec.guidance
        tr = pipe.transformer
        dev = latents.device
        ch = tr.config.in_channels
        sch = DPMSolverMultistepScheduler.from_config(pipe.scheduler.config)  # per-image solver state
        sch.set_timesteps(steps)
        cls = torch.tensor([label], device=dev)
        null = torch.tensor([1000], device=dev)
        for t in sch.timesteps:
            model_in = sch.scale_model_input(latents, t)
            ts = t[None].to(dev)
            cond = tr(model_in, timestep=ts, class_labels=cls).sample[:, :ch]
            if guidance > 1:
                uncond = tr(model_in, timestep=ts, class_labels=null).sample[:, :ch]
                eps = uncond + guidance * (cond - uncond)
            else:
                eps = cond
            latents = sch.step(eps, t, latents).prev_sample
        return latents

    def generate(self, request: Request) -> Generated:
        pipe = self.pipe
        tr, vae = pipe.transformer, pipe.vae
        dev = pipe._execution_device
        bsz = len(request.labels)
        ch, size = tr.config.in_channels, tr.config.sample_size
        generators = [torch.Generator("cpu").manual_seed(s) for s in request.seeds]
        noise = randn_tensor((bsz, ch, size, size), generator=generators, device=dev, dtype=tr.dtype)
        latents = torch.cat([self._denoise_one(noise[i:i + 1], lab, request.steps)
                             for i, lab in enumerate(request.labels)], dim=0)
        z = (1 / vae.config.scaling_factor * latents).detach()
        with torch.no_grad():
            samples = vae.decode(z).sample
        samples = (samples / 2 + 0.5).clamp(0, 1).cpu().permute(0, 2, 3, 1).float().numpy()
        images = np.clip(np.rint(samples * 255.0), 0, 255).astype(np.uint8)
        return Generated(latents=z, images=images)


def build(spec: PipelineSpec) -> PerImageCfgDiT:
    return PerImageCfgDiT(spec)

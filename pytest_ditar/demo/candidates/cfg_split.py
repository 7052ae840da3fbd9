"""Candidate pipeline: classifier-free guidance split over two GPUs (exact class).

Causal hypothesis: every DiT step runs the transformer on 2B rows (B conditional, B
unconditional) whose halves are independent until the guidance mix. On two GPUs, rank 0 runs
the conditional half and rank 1 the unconditional half at batch B, then they exchange their
noise predictions (one all_gather of B x C x h x w per step) and both apply the identical
guidance mix and DPM-Solver++ update, so their latents stay in lock-step. The per-step
transformer time roughly halves when the forward is compute- or launch-bound per rank and the
link is fast (NVLink: the exchange is a few microseconds; over a slow PCIe path `dit-ar doctor`
warns). Same algorithm and weights; only the row partition of the transformer batch changes,
hence "exact" (on CPU the batch-B vs batch-2B GEMMs may round differently in the last bit).

Run by the judge in a torch.distributed group on a `gpus: 2` lane (pytest_ditar.runtime.group,
NCCL on CUDA, gloo on CPU). Outside a 2-rank group it is the single-process lean pipeline it derives from.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from diffusers.utils.torch_utils import randn_tensor

from pytest_ditar.demo.candidates.faster_exact import LeanDiT
from pytest_ditar.interface import Generated, PipelineSpec, Request


class CfgSplitDiT(LeanDiT):
    @torch.inference_mode()
    def generate(self, request: Request) -> Generated:
        import torch.distributed as dist

        guidance = self.spec.guidance
        if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() == 2 and guidance > 1):
            return super().generate(request)
        rank = dist.get_rank()
        dev, dtype = self.device, self.dtype
        bsz = len(request.labels)
        generators = [torch.Generator("cpu").manual_seed(s) for s in request.seeds]
        size = self.pipe.transformer.config.sample_size
        # same seeds on both ranks: identical initial noise, so both hold the same latents
        x = randn_tensor((bsz, self.in_ch, size, size), generator=generators, device=dev, dtype=dtype)
        label_ids = list(request.labels) if rank == 0 else [1000] * bsz  # 1000: DiT's null class
        labels = torch.tensor(label_ids, device=dev).reshape(-1)
        class_emb = [F.embedding(labels, b["table"]) for b in self.blocks]
        halves = [torch.empty((bsz, self.in_ch, size, size), device=dev, dtype=dtype) for _ in range(2)]
        prev_x0 = None
        for t, sigma_s, alpha_s, order, c_sample, c_d0, inv_r0, c_d1 in self._schedule(request.steps):
            out = self._transformer(x, t[None].to(dev).expand(bsz), class_emb)
            dist.all_gather(halves, out[:, :self.in_ch].contiguous())  # [cond eps, uncond eps]
            cond_eps, uncond_eps = halves
            eps = uncond_eps + guidance * (cond_eps - uncond_eps)
            x0 = (x - sigma_s * eps) / alpha_s
            x32 = x.to(torch.float32)
            if order == 1:
                nx = c_sample * x32 - c_d0 * x0
            else:
                nx = c_sample * x32 - c_d0 * x0 - c_d1 * (inv_r0 * (x0 - prev_x0))
            x = nx.to(x0.dtype)
            prev_x0 = x0
        latents = 1 / self.vae.config.scaling_factor * x
        if rank != 0:  # only rank 0's images are the group's output: skip the decode
            side = size * 8
            return Generated(latents=latents.clone(), images=np.zeros((bsz, side, side, 3), np.uint8))
        samples = self.vae.decode(latents).sample
        samples = (samples / 2 + 0.5).clamp(0, 1).cpu().permute(0, 2, 3, 1).float().numpy()
        images = np.clip(np.rint(samples * 255.0), 0, 255).astype(np.uint8)
        return Generated(latents=latents.clone(), images=images)


def build(spec: PipelineSpec) -> CfgSplitDiT:
    return CfgSplitDiT(spec)

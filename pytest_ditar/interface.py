"""The contract between the harness and every candidate pipeline in `mutable/`.

A candidate package exposes `pipeline.build(spec: PipelineSpec) -> Candidate`, where a
Candidate has `generate(request: Request) -> Generated`. The harness calls `build` once per
session and `generate` per batch; everything else about the candidate is free to change.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class PipelineSpec:
    model_dir: Path  # a diffusers DiTPipeline directory, loaded with local_files_only=True
    device: str  # "cpu" or "cuda[:n]"
    dtype: str  # "float32" | "float16" | "bfloat16": the suite's setting for this device
    scheduler: str  # "dpm-solver-multistep"
    guidance: float
    resolution: int


@dataclass(frozen=True)
class Request:
    labels: tuple[int, ...]  # ImageNet class ids, one per image
    seeds: tuple[int, ...]  # one seed per image: the initial noise comes from its own CPU generator
    steps: int


@dataclass
class Generated:
    latents: Any  # torch.Tensor [B, C, h, w], the final latents fed to the VAE decoder
    images: Any  # numpy uint8 [B, H, W, 3]


class Candidate(Protocol):
    def generate(self, request: Request) -> Generated: ...

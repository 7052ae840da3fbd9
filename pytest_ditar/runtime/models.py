"""Model sources: the embedded tiny DiT, a random-init architecture, or a local directory.

Nothing is ever downloaded. Generated models are written with `save_pretrained` into a cache
directory and always read back with `from_pretrained(local_files_only=True)`, so the real
loading path runs in every test.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from pytest_ditar.config.suite import Suite
from pytest_ditar.core.errors import ConfigError
from pytest_ditar.core.vocabulary import ENV_CACHE, ENV_WEIGHTS_DIR

# The one runtime -> store import the contracts allow (pyproject: "runtime-no-state").
from pytest_ditar.store.atomic import publish_dir, temp_dir_beside

# Architecture kwargs. DiT-XL/2-256 follows facebook/DiT-XL-2-256 (learned sigma: out_channels 8)
# and the SD-1 VAE; the tiny one keeps the same structure at toy width so CPU runs take seconds.
ARCHS = {
    "tiny": {
        "transformer": dict(num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=8,
                            num_layers=2, sample_size=8, patch_size=2, num_embeds_ada_norm=1000,
                            norm_type="ada_norm_zero"),
        "vae": dict(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 2,
                    up_block_types=["UpDecoderBlock2D"] * 2, block_out_channels=[8, 16], latent_channels=4,
                    norm_num_groups=8, layers_per_block=1, sample_size=16, scaling_factor=0.18215),
    },
    "dit-xl-2-256": {
        "transformer": dict(num_attention_heads=16, attention_head_dim=72, in_channels=4, out_channels=8,
                            num_layers=28, sample_size=32, patch_size=2, num_embeds_ada_norm=1000,
                            norm_type="ada_norm_zero"),
        "vae": dict(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 4,
                    up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=[128, 256, 512, 512],
                    latent_channels=4, norm_num_groups=32, layers_per_block=2, sample_size=256,
                    scaling_factor=0.18215),
    },
}


def cache_root() -> Path:
    env = os.environ.get(ENV_CACHE)
    return Path(env) if env else Path.home() / ".cache" / "pytest-ditar"


def resolve_model_dir(suite: Suite) -> Path:
    """Return a local DiTPipeline directory for the suite, building it on first use."""
    target = model_location(suite)
    if not (target / "model_index.json").is_file():
        _build_random_init(suite.model.arch, suite.model.seed, target)
    return target


def model_location(suite: Suite) -> Path:
    """Where the suite's DiTPipeline directory is (a local one, checked) or will be built (a
    random-init architecture, under the model cache); builds nothing."""
    src = suite.model
    if src.source == "local" or os.environ.get(ENV_WEIGHTS_DIR):
        raw = os.environ.get(ENV_WEIGHTS_DIR) or src.weights_dir
        if not raw:
            raise ConfigError(f"{suite.path}: key 'model.weights_dir' is empty "
                              f"(set it, or {ENV_WEIGHTS_DIR}, to a local DiT pipeline directory)")
        path = Path(raw).expanduser()
        if not path.is_absolute():
            path = (suite.path.parent / path).resolve()
        if not (path / "model_index.json").is_file():
            raise ConfigError(f"{suite.path}: weights directory {path} missing or not a diffusers pipeline "
                              f"(no model_index.json); point 'model.weights_dir' or {ENV_WEIGHTS_DIR} "
                              "at a local copy of the facebook/DiT-XL-2-256 layout")
        return path
    if src.arch not in ARCHS:
        raise ConfigError(f"{suite.path}: key 'model.arch' must be one of {', '.join(ARCHS)}, got '{src.arch}'")
    spec = {"arch": ARCHS[src.arch], "seed": src.seed, "v": 1}
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "models" / f"{src.arch}-{key}"


def _build_random_init(arch: str, seed: int, target: Path) -> None:
    import torch
    from diffusers import AutoencoderKL, DiTPipeline, DiTTransformer2DModel, DPMSolverMultistepScheduler

    torch.manual_seed(seed)
    transformer = DiTTransformer2DModel(**ARCHS[arch]["transformer"])
    vae = AutoencoderKL(**ARCHS[arch]["vae"])
    # The random init leaves adaLN-zero gates tiny but non-zero; good enough for shapes and FLOPs.
    scheduler = DPMSolverMultistepScheduler()
    pipe = DiTPipeline(transformer=transformer, vae=vae, scheduler=scheduler)
    tmp = temp_dir_beside(target)
    try:
        pipe.save_pretrained(tmp)  # type: ignore[attr-defined]  # mypy sees diffusers' dummy DiTPipeline
        # A concurrent builder either wins or finds ours; theirs will do once it is complete.
        if not publish_dir(tmp, target) and not (target / "model_index.json").is_file():
            raise OSError(f"{target}: exists but holds no model_index.json (remove it to rebuild)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

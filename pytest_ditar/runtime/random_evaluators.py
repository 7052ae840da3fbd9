"""Random-init semantic evaluators written to local files, for tests and for timing.

These are NOT real CLIP/LPIPS: the weights are random, so the scores carry no meaning. They
exist so the real loading path (config key -> local file -> open_clip / lpips) and the batched
scoring run in CI without any download (a tiny open_clip architecture), and so benchmarks can
time the firewall at full size (`clip_arch="ViT-B-32"`: open_clip's own architecture, random
weights, the same FLOPs as the real checkpoint). Thresholds in tests are set from measured values.
"""
from __future__ import annotations

import json
from pathlib import Path

TINY_CLIP = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "head_width": 32, "patch_size": 8},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
}


def write_random_evaluators(dest: Path, seed: int = 0, clip_arch: str | None = None) -> dict:
    """Save random-init evaluators under `dest`; return the `semantic` config section.

    `clip_arch` names an open_clip architecture (e.g. ViT-B-32); None: the tiny test one."""
    import lpips
    import open_clip
    import torch

    dest.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    if clip_arch:
        name, model_key = clip_arch, clip_arch
    else:
        arch = dest / "tiny-clip.json"
        arch.write_text(json.dumps(TINY_CLIP))
        open_clip.add_model_config(arch)
        name, model_key = "tiny-clip", str(arch)
    clip = open_clip.create_model(name, pretrained=None)  # random init (no weights at all)
    torch.save(clip.state_dict(), dest / f"{name}.pt")
    lp = lpips.LPIPS(pretrained=False, net="alex", pnet_rand=True, verbose=False)  # random trunk and layers
    with torch.no_grad():
        for lin in lp.lins:  # real LPIPS layers are non-negative; keep distances >= 0 like the real thing
            lin.model[-1].weight.abs_()
    torch.save(lp.state_dict(), dest / "lpips-alex.pt")
    return {"clip_model": model_key, "clip_weights": str(dest / f"{name}.pt"),
            "lpips_weights": str(dest / "lpips-alex.pt"), "lpips_net": "alex"}

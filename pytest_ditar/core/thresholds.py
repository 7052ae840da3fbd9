"""Per-class quality floors: the type the project config is parsed into and the quality
contracts check. Here, not in config, so that core imports nothing of the package.

Annotations stay strings (`from __future__`): config.project type-checks raw values against them.
"""
from __future__ import annotations

from dataclasses import dataclass

# Scores defined on the image alone, so candidate and baseline each have one per item (paired test).
PAIRED_SCORES = ("clip_score",)


@dataclass(frozen=True)
class Thresholds:
    """Per-class quality floors; None disables a check for that class."""

    latent_rel_l2_max: float | None = None
    latent_max_abs_max: float | None = None
    psnr_min: float | None = None
    ssim_min: float | None = None
    latent_range_factor: float = 4.0  # sanity: candidate |latent| max may not exceed this x the baseline's
    lpips_max: float | None = None
    clip_drop_max: float | None = None  # CLIP score may drop at most this much per item
    semantic_required: bool = False
    zero_regression: bool = False  # quantization: paired test, no required score may drop
    regression_alpha: float = 0.05
    # Paired scores that may not regress under zero_regression (PAIRED_SCORES).
    required_scores: tuple[str, ...] = ()
    clip_score_item_tolerance: float = 0.005  # largest per-item CLIP score drop zero_regression allows

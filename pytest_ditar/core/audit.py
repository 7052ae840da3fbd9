"""The audit of timed outputs: what a candidate returned while it was timed must be what it
returns when it is checked (MLPerf's TEST01, in spirit). Cheap on purpose, so every timed round
can afford it: finiteness, a non-constant image, the latent sanity range and, for a class that
claims to reproduce the champion, latent rel-L2 / max-abs and PSNR against the champion's output
for the same request. No SSIM, no semantic scores (the corpus and the holdout carry those)."""
from __future__ import annotations

import math

import numpy as np

from pytest_ditar.core.quality import psnr_uint8
from pytest_ditar.core.thresholds import Thresholds
from pytest_ditar.core.vocabulary import REPRODUCING_CLASSES


def audit_batch(claimed_class: str, t: Thresholds, latents: np.ndarray, images: np.ndarray,
                ref_latents: np.ndarray | None, ref_images: np.ndarray | None) -> tuple[int, str] | None:
    """(index in the batch, what is wrong) for the first image that fails, else None.
    Without a reference (no champion in the run) only the self-checks apply."""
    if latents.shape[0] != images.shape[0]:
        return 0, f"{latents.shape[0]} latents for {images.shape[0]} images"
    # the champion's latents and images come as a pair: both or neither
    if ref_latents is not None and ref_images is not None \
            and (latents.shape != ref_latents.shape or images.shape != ref_images.shape):
        return 0, f"output shape {tuple(images.shape)} differs from the champion's {tuple(ref_images.shape)}"
    for i in range(images.shape[0]):
        problem = _one(claimed_class, t, latents[i], images[i],
                       None if ref_latents is None else ref_latents[i], None if ref_images is None else ref_images[i])
        if problem:
            return i, problem
    return None


def _one(claimed_class: str, t: Thresholds, lat: np.ndarray, img: np.ndarray, ref_lat: np.ndarray | None,
         ref_img: np.ndarray | None) -> str | None:
    if not np.isfinite(lat).all():
        return "non-finite latents"
    if img.min() == img.max():
        return "constant image"
    if ref_lat is None or ref_img is None:
        return None
    c, b = lat.astype(np.float64), ref_lat.astype(np.float64)
    ref_max = float(np.max(np.abs(b)))
    if float(np.max(np.abs(c))) > t.latent_range_factor * ref_max:
        return f"latent |max| outside {t.latent_range_factor:g} x the champion's {ref_max:.4g}"
    if claimed_class not in REPRODUCING_CLASSES:
        return None  # an approximate claim is judged against the baseline, on the corpus and holdout
    rel = float(np.linalg.norm(c - b) / (np.linalg.norm(b) or 1.0))
    if t.latent_rel_l2_max is not None and rel > t.latent_rel_l2_max:
        return f"labelled '{claimed_class}' but latent_rel_l2 {rel:.4g} > {t.latent_rel_l2_max:g} against the champion"
    worst = float(np.max(np.abs(c - b)))
    if t.latent_max_abs_max is not None and worst > t.latent_max_abs_max:
        return (f"labelled '{claimed_class}' but latent_max_abs {worst:.4g} > {t.latent_max_abs_max:g} "
                "against the champion")
    psnr = psnr_uint8(img, ref_img)
    if t.psnr_min is not None and psnr < t.psnr_min and not math.isinf(psnr):
        return f"labelled '{claimed_class}' but psnr {psnr:.4g} dB < {t.psnr_min:g} dB against the champion"
    return None

"""Quality metrics and contracts. Pure: arrays in, numbers and verdicts out."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from pytest_ditar.core.distributions import wilcoxon_p
from pytest_ditar.core.thresholds import Thresholds


@dataclass(frozen=True)
class Metrics:
    finite: bool
    latent_rel_l2: float
    latent_max_abs: float
    latent_abs_max: float  # largest |value| in the candidate latents (sanity range)
    baseline_abs_max: float
    psnr: float  # dB, float64, inf when identical
    ssim: float
    constant_image: bool
    lpips: float | None = None
    clip_score: float | None = None
    clip_score_baseline: float | None = None

    def as_dict(self) -> dict[str, float | bool | None]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class ContractResult:
    item_id: str
    class_name: str  # the class whose contract it is: the run's judged class, or a claim checked
    metrics: Metrics
    failures: tuple[str, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return not self.failures


def psnr_uint8(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return math.inf if mse == 0 else float(10.0 * math.log10(255.0**2 / mse))


def _box_mean(x: np.ndarray, w: int, axes: tuple[int, ...]) -> np.ndarray:
    """The mean over a window of `w` along each of `axes`, the edges mirrored (d c b a | a b c d):
    scipy.ndimage.uniform_filter's default, as running sums (numpy only: the judge never imports
    scipy.ndimage, a second of every run's quality phase on a CPU host)."""
    front = w // 2
    for axis in axes:
        widths = [(0, 0)] * x.ndim
        widths[axis] = (front + 1, w - 1 - front)  # one more in front, zeroed: where the running sum starts
        padded = np.pad(x, widths, mode="symmetric")
        padded[(slice(None),) * axis + (0,)] = 0.0
        sums = np.cumsum(padded, axis=axis)
        n = x.shape[axis]
        x = (sums[(slice(None),) * axis + (slice(w, n + w),)] - sums[(slice(None),) * axis + (slice(0, n),)]) / w
    return x


def ssim_uint8(a: np.ndarray, b: np.ndarray) -> float:
    """Mean SSIM of two HxWxC uint8 images, channel by channel then averaged: Wang et al.'s index
    with a uniform 7x7 window (smaller and odd for tiny images), K1 0.01, K2 0.03, sample
    covariances, the window's half-width cropped at the borders (scikit-image's
    `structural_similarity(channel_axis=-1, data_range=255)`, to 1e-14:
    tests/unit/core/test_ssim.py)."""
    side = min(a.shape[0], a.shape[1])
    win = min(7, side if side % 2 else side - 1)  # tiny images need a smaller odd window
    c1, c2 = (0.01 * 255.0) ** 2, (0.03 * 255.0) ** 2
    norm = win * win / (win * win - 1)  # sample, not population, covariances
    x, y = a.astype(np.float64), b.astype(np.float64)
    ux, uy, uxx, uyy, uxy = _box_mean(np.stack([x, y, x * x, y * y, x * y]), win, (1, 2))
    vx, vy, vxy = norm * (uxx - ux * ux), norm * (uyy - uy * uy), norm * (uxy - ux * uy)
    s = ((2 * ux * uy + c1) * (2 * vxy + c2)) / ((ux * ux + uy * uy + c1) * (vx + vy + c2))
    crop = (win - 1) // 2
    inner = s[crop:s.shape[0] - crop, crop:s.shape[1] - crop]
    return float(inner.reshape(-1, s.shape[-1]).mean(axis=0, dtype=np.float64).mean())


def compute_metrics(cand_latents: np.ndarray, cand_image: np.ndarray, base_latents: np.ndarray,
                    base_image: np.ndarray) -> Metrics:
    finite = bool(np.isfinite(cand_latents).all())
    if not finite or cand_latents.shape != base_latents.shape or cand_image.shape != base_image.shape:
        nan = float("nan")
        return Metrics(finite, nan, nan, nan, nan, nan, nan, False)
    c = cand_latents.astype(np.float64)
    b = base_latents.astype(np.float64)
    denom = np.linalg.norm(b) or 1.0
    return Metrics(
        finite=True,
        latent_rel_l2=float(np.linalg.norm(c - b) / denom),
        latent_max_abs=float(np.max(np.abs(c - b))),
        latent_abs_max=float(np.max(np.abs(c))),
        baseline_abs_max=float(np.max(np.abs(b))),
        psnr=psnr_uint8(cand_image, base_image),
        ssim=ssim_uint8(cand_image, base_image),
        constant_image=bool(cand_image.min() == cand_image.max()),
    )


def check_contract(item_id: str, class_name: str, m: Metrics, t: Thresholds) -> ContractResult:
    """Apply one class's floors to one item's metrics; every broken floor is listed."""
    fails: list[str] = []
    if not m.finite:
        fails.append("non-finite values (NaN/Inf) in latents")
        return ContractResult(item_id, class_name, m, tuple(fails))
    if math.isnan(m.psnr):
        fails.append("output shape differs from the baseline")
        return ContractResult(item_id, class_name, m, tuple(fails))
    if m.constant_image:
        fails.append("image is constant (a blank output)")
    if m.latent_abs_max > t.latent_range_factor * m.baseline_abs_max:
        fails.append(f"latent |max| {m.latent_abs_max:.4g} outside the sane range "
                     f"({t.latent_range_factor:g} x the baseline's {m.baseline_abs_max:.4g})")
    _upper(fails, "latent_rel_l2", m.latent_rel_l2, t.latent_rel_l2_max)
    _upper(fails, "latent_max_abs", m.latent_max_abs, t.latent_max_abs_max)
    _lower(fails, "psnr", m.psnr, t.psnr_min, "dB")
    _lower(fails, "ssim", m.ssim, t.ssim_min)
    if t.semantic_required and (m.lpips is None or m.clip_score is None):
        fails.append(f"class '{class_name}' needs the semantic evaluators (CLIP, LPIPS) and they are not configured")
    _upper(fails, "lpips", m.lpips, t.lpips_max)
    if t.clip_drop_max is not None and m.clip_score is not None and m.clip_score_baseline is not None:
        drop = m.clip_score_baseline - m.clip_score
        if drop > t.clip_drop_max:
            fails.append(f"clip_score dropped {drop:.4f} > {t.clip_drop_max:g} "
                         f"({m.clip_score:.4f} vs baseline {m.clip_score_baseline:.4f})")
    return ContractResult(item_id, class_name, m, tuple(fails))


def _upper(fails: list[str], name: str, value: float | None, limit: float | None) -> None:
    if limit is not None and value is not None and value > limit:
        fails.append(f"{name} {value:.4g} > {limit:g}")


def _lower(fails: list[str], name: str, value: float | None, floor: float | None, unit: str = "") -> None:
    if floor is not None and value is not None and value < floor:
        fails.append(f"{name} {value:.4g}{unit} < {floor:g}{unit}")


def format_failure(res: ContractResult, where: Mapping[str, str] | None = None) -> str:
    m = res.metrics
    lines = [f"quality contract '{res.class_name}' failed for item {res.item_id}:"]
    lines += [f"  - {f}" for f in res.failures]
    lines.append("  metrics: " + ", ".join(f"{k}={_fmt(v)}" for k, v in m.as_dict().items() if v is not None))
    for label, path in (where or {}).items():
        lines.append(f"  {label}: {path}")
    return "\n".join(lines)


def _fmt(v: object) -> str:
    return f"{v:.5g}" if isinstance(v, float) else str(v)


@dataclass(frozen=True)
class RegressionResult:
    score: str
    ok: bool
    reason: str
    p_value: float | None
    worst_item: str | None
    worst_drop: float


def zero_regression(score: str, baseline: Mapping[str, float], candidate: Mapping[str, float],
                    per_item_tolerance: float, alpha: float = 0.05, higher_is_better: bool = True) -> RegressionResult:
    """Paired check over the corpus: no item may drop beyond tolerance, and a one-sided
    Wilcoxon signed-rank test over items must not show a drop. A lower mean never passes."""
    ids = sorted(set(baseline) & set(candidate))
    sign = 1.0 if higher_is_better else -1.0
    drops = {i: sign * (baseline[i] - candidate[i]) for i in ids}
    worst = max(ids, key=lambda i: drops[i]) if ids else None
    worst_drop = drops[worst] if worst else 0.0
    mean_drop = float(np.mean(list(drops.values()))) if ids else 0.0
    if worst is not None and worst_drop > per_item_tolerance:
        return RegressionResult(score, False, f"{score} dropped {worst_drop:.4g} on {worst} (> {per_item_tolerance:g})",
                                None, worst, worst_drop)
    if mean_drop > 0:
        return RegressionResult(score, False, f"{score} mean dropped {mean_drop:.4g} over {len(ids)} items",
                                None, worst, worst_drop)
    p = None
    nonzero = [d for d in drops.values() if d != 0]
    if len(nonzero) >= 6:
        p = wilcoxon_p(list(drops.values()), "greater", zero_method="zsplit")
        if p < alpha:
            return RegressionResult(score, False, f"{score} paired test shows a drop (p={p:.3g})", p, worst, worst_drop)
    return RegressionResult(score, True, "", p, worst, worst_drop)


def aggregate(results: Sequence[ContractResult]) -> tuple[int, int, tuple[str, ...]]:
    failed = [f"{r.item_id}: {r.failures[0]}" for r in results if not r.passed]
    return len(results) - len(failed), len(results), tuple(failed)


def margins(results: Sequence[ContractResult], floors: Thresholds) -> list[str]:
    """Each floor of the class with the worst item's value and its distance to it: how close a
    candidate came to failing (the smoke check and `dit-ar try` print these)."""
    out = []
    checks = (("latent rel-L2", "latent_rel_l2", floors.latent_rel_l2_max, max, "<="),
              ("PSNR", "psnr", floors.psnr_min, min, ">="), ("SSIM", "ssim", floors.ssim_min, min, ">="),
              ("LPIPS", "lpips", floors.lpips_max, max, "<="))
    for label, key, floor, worst_of, op in checks:
        vals = [getattr(r.metrics, key) for r in results if getattr(r.metrics, key) is not None]
        if floor is None or not vals:
            continue
        worst = worst_of(vals)
        room = (worst - floor) if op == ">=" else (floor - worst)
        out.append(f"{label} worst {worst:.4g} ({op} {floor:g}: {'+' if room >= 0 else ''}{room:.4g})")
    return out

"""The judge's SSIM (core.quality.ssim_uint8, numpy only) against scikit-image's, the reference the
contracts' thresholds were set with: every size the suites use and the tiny ones, random, close,
identical and opposite images."""
from __future__ import annotations

import numpy as np
import pytest
from skimage.metrics import structural_similarity

from pytest_ditar.core.quality import ssim_uint8


def _reference(a: np.ndarray, b: np.ndarray) -> float:
    side = min(a.shape[0], a.shape[1])
    win = min(7, side if side % 2 else side - 1)
    return float(structural_similarity(a, b, channel_axis=-1, data_range=255, win_size=win))


@pytest.mark.parametrize("shape", [(3, 3, 3), (4, 5, 3), (5, 5, 1), (6, 8, 3), (7, 7, 3), (8, 8, 3), (9, 11, 3),
                                   (16, 16, 3), (31, 32, 3), (64, 64, 3), (256, 256, 3)])
def test_ssim_equals_scikit_image(shape):
    rng = np.random.default_rng(sum(shape))
    a = rng.integers(0, 256, shape, dtype=np.uint8)
    pairs = [
        (a, rng.integers(0, 256, shape, dtype=np.uint8)),  # unrelated
        (a, np.clip(a.astype(int) + rng.integers(-12, 13, shape), 0, 255).astype(np.uint8)),  # close
        (a, a.copy()),  # identical: 1
        (np.zeros(shape, np.uint8), np.full(shape, 255, np.uint8)),  # flat and opposite
    ]
    for x, y in pairs:
        assert ssim_uint8(x, y) == pytest.approx(_reference(x, y), rel=0, abs=1e-13)
    assert ssim_uint8(a, a) == pytest.approx(1.0, abs=1e-15)

"""The report's images: where they are found, |difference| heatmaps, and the de-duplicating pool.

Each distinct PNG becomes one CSS class with a data-URI background, so an item's baseline (shown
next to every candidate) is embedded once, and exact keeps (identical outputs) cost nothing extra.
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pytest_ditar.report.data import Experiment
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.snapshot import MANIFEST


class ImagePool:
    """Distinct images by content hash; rendered once as CSS classes with data-URI backgrounds."""

    def __init__(self) -> None:
        self._css: dict[str, str] = {}

    def add(self, data: bytes, mime: str = "image/png") -> str:
        key = "i" + hashlib.sha1(data).hexdigest()[:14]
        if key not in self._css:
            self._css[key] = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
        return key

    def css(self) -> str:
        return "\n".join(f".{k}{{background-image:url({v})}}" for k, v in self._css.items())

    def __len__(self) -> int:
        return len(self._css)


def load_rgb(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


_LUT: np.ndarray | None = None


def _inferno() -> np.ndarray:
    global _LUT
    if _LUT is None:  # built once: matplotlib's colormap import is slow
        from matplotlib import colormaps

        _LUT = (colormaps["inferno"](np.linspace(0, 1, 256))[:, :3] * 255).astype(np.uint8)
    return _LUT


def _diff_index(cand: np.ndarray, base: np.ndarray) -> tuple[np.ndarray, float, float]:
    d = np.abs(cand.astype(np.int16) - base.astype(np.int16)).mean(axis=-1)
    peak = float(d.max()) if d.size else 0.0
    gain = 255.0 / peak if peak > 0 else 1.0
    return np.clip(d * gain, 0, 255).astype(np.uint8), peak, gain


def diff_heatmap(cand: np.ndarray, base: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Per-pixel mean |difference| amplified so the largest difference is full scale.

    Returns (RGB heatmap, max abs difference in 0..255, gain). Identical images give a black map
    with gain 1, so "no difference" reads as black, not as noise stretched to full scale.
    """
    idx, peak, gain = _diff_index(cand, base)
    return _inferno()[idx], peak, gain


def heatmap_png(cand: np.ndarray, base: np.ndarray) -> tuple[bytes, float, float]:
    """The heatmap as a palette PNG: one byte a pixel encodes ~3x faster than RGB, and is smaller."""
    from PIL import Image

    idx, peak, gain = _diff_index(cand, base)
    im = Image.fromarray(idx, mode="L").convert("P")
    im.putpalette(_inferno().tobytes())
    buf = io.BytesIO()
    im.save(buf, format="PNG", compress_level=1)
    return buf.getvalue(), peak, gain


@dataclass
class ImageSource:
    """Where a report finds images: the baseline's and each champion's manifests, failed runs' PNGs.

    Manifests and decoded arrays are cached: the same baseline image is compared with many candidates.
    """

    state_dir: Path
    _manifests: dict[Path, dict[str, Any] | None] = field(default_factory=dict)
    _arrays: dict[Path, np.ndarray] = field(default_factory=dict)

    def snapshot_image(self, snap: Path, item_id: str) -> Path | None:
        if snap not in self._manifests:
            try:
                self._manifests[snap] = json.loads((snap / MANIFEST).read_text())
            except (OSError, json.JSONDecodeError):
                self._manifests[snap] = None
        m = self._manifests[snap]
        entry = (m or {}).get("items", {}).get(item_id) if m else None
        p = snap / entry["image"] if entry and entry.get("image") else None
        return p if p is not None and p.is_file() else None

    def baseline_image(self, item_id: str) -> Path | None:
        return self.snapshot_image(TagPaths(self.state_dir).baseline, item_id)

    def candidate_image(self, e: Experiment, item_id: str) -> Path | None:
        """A keep's image is in its champion snapshot; a failure's only for failed items (runs/*/failures/)."""
        if e.status == "KEEP":
            p = self.snapshot_image(TagPaths(self.state_dir).champion(e.commit), item_id)
            if p:
                return p
        if e.run_dir is not None:
            p = e.run_dir / "failures" / f"{item_id}.png"
            if p.is_file():
                return p
        return None

    def array(self, path: Path) -> np.ndarray:
        if path not in self._arrays:
            self._arrays[path] = load_rgb(path)
        return self._arrays[path]

"""Snapshots (baseline, champion): per-item outputs + manifest with a sha256 per file.

Written into a temporary sibling directory and published with store.atomic.publish_dir (files
fsynced, one rename), so a crash leaves either the old snapshot or the new one, never half of
each. Verified on every load.
"""
from __future__ import annotations

import io
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from pytest_ditar.core.errors import SnapshotError
from pytest_ditar.core.outputs import ItemOutput
from pytest_ditar.store.atomic import publish_dir, sha256_file, temp_dir_beside
from pytest_ditar.store.records import read_lanes

MANIFEST = "manifest.json"


def _png_bytes(image: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


def _safe_name(item_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in item_id)


def write_snapshot(target: Path, outputs: Iterable[ItemOutput], meta: Mapping[str, Any],
                   extra_files: Mapping[str, bytes] | None = None, force: bool = False) -> Path:
    """Write a snapshot directory atomically. Refuses to replace one unless `force`."""
    target = Path(target)
    if target.exists() and not force:
        raise SnapshotError(f"{target}: a snapshot already exists (use --force to replace it)")
    tmp = temp_dir_beside(target)
    try:
        files: dict[str, str] = {}
        items: dict[str, dict[str, str]] = {}
        (tmp / "items").mkdir()
        for out in outputs:
            stem = f"items/{_safe_name(out.item_id)}"
            np.save(tmp / f"{stem}.latent.npy", np.ascontiguousarray(out.latents, dtype=np.float32))
            (tmp / f"{stem}.png").write_bytes(_png_bytes(out.image))
            items[out.item_id] = {"latent": f"{stem}.latent.npy", "image": f"{stem}.png",
                                  "seconds": f"{out.seconds:.6f}"}
        for rel, data in (extra_files or {}).items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(data)
        for p in sorted(tmp.rglob("*")):
            if p.is_file():
                rel = p.relative_to(tmp).as_posix()
                files[rel] = sha256_file(p)
        manifest = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **meta,
                    "items": items, "files": files}
        (tmp / MANIFEST).write_bytes(json.dumps(manifest, indent=1, sort_keys=True).encode())
        published = publish_dir(tmp, target, replace=force)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not published:  # another writer stored one since the check above
        raise SnapshotError(f"{target}: a snapshot already exists (use --force to replace it)")
    return target


@dataclass
class Snapshot:
    path: Path
    manifest: dict[str, Any]

    @property
    def item_ids(self) -> list[str]:
        return list(self.manifest["items"])

    def output(self, item_id: str) -> ItemOutput:
        from PIL import Image

        entry = self.manifest["items"].get(item_id)
        if entry is None:
            raise SnapshotError(f"{self.path}: no stored output for item '{item_id}' "
                                "(the corpus changed? re-create the baseline)")
        latents = np.load(self.path / entry["latent"])
        image = np.asarray(Image.open(self.path / entry["image"]).convert("RGB"))
        return ItemOutput(item_id, latents, image, float(entry.get("seconds", 0)))

    def read_json(self, rel: str) -> Any:
        p = self.path / rel
        return json.loads(p.read_text()) if p.is_file() else None

    def image_path(self, item_id: str) -> Path:
        image: str = self.manifest["items"][item_id]["image"]
        return self.path / image


def load_snapshot(path: Path, kind: str = "baseline", verify: bool = True) -> Snapshot:
    path = Path(path)
    mpath = path / MANIFEST
    if not mpath.is_file():
        hint = "run `dit-ar baseline` (or `pytest --ditar-baseline`) first" if kind == "baseline" else "no champion yet"
        raise SnapshotError(f"{path}: {kind} missing ({hint})")
    try:
        manifest = json.loads(mpath.read_text())
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{mpath}: {kind} manifest corrupted ({exc.msg}); "
                            "re-create it with `dit-ar baseline --force`") from None
    snap = Snapshot(path, manifest)
    if verify:
        problems = verify_snapshot(snap)
        if problems:
            raise SnapshotError(f"{path}: {kind} corrupted: {problems[0]}"
                                + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else "")
                                + "; restore it or re-create with `dit-ar baseline --force`")
    return snap


def verify_snapshot(snap: Snapshot) -> list[str]:
    problems = []
    files = snap.manifest.get("files", {})
    for rel, digest in files.items():
        p = snap.path / rel
        if not p.is_file():
            problems.append(f"{rel} is missing")
        elif sha256_file(p) != digest:
            problems.append(f"{rel} hash mismatch (edited?)")
    for p in snap.path.rglob("*"):
        rel = p.relative_to(snap.path).as_posix()
        if p.is_file() and rel != MANIFEST and rel not in files:
            problems.append(f"{rel} is not in the manifest (added?)")
    return problems


def lane_samples(lanes: Mapping[str, Any] | None) -> dict[str, list[float]]:
    """Per-lane timed seconds of a stored lanes.json (store.records reads either shape)."""
    return {name: rec.samples for name, rec in read_lanes(lanes).items()}

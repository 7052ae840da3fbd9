"""How long `build_report` takes for a long session: fabricates a 100-experiment state dir.

The ledger, run directories (summary.json, failures/*.png), baseline and champion snapshots are
written in the layout the gate writes, with 256x256 images (DiT-XL/2-256's output size) and 12
corpus items. The budget is 5 s on CPU for 100 experiments.

    python benchmarks/report_speed.py [--rows 100] [--repeat 3] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_ditar.report.html import build_report  # noqa: E402
from pytest_ditar.store.ledger import Ledger  # noqa: E402

BUDGET_S = 5.0


def _image(rng: np.random.Generator, size: int) -> np.ndarray:
    """Smooth colour field plus mild noise: compresses like a generated image, not like static."""
    y, x = np.mgrid[0:size, 0:size] / size
    base = np.stack([np.sin(x * rng.uniform(2, 8) + rng.uniform(0, 6)), np.cos(y * rng.uniform(2, 8)),
                     np.sin((x + y) * rng.uniform(2, 8))], axis=-1)
    img = (base * 0.5 + 0.5) * 255 + rng.normal(0, 6, base.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _perturb(rng: np.random.Generator, img: np.ndarray, amount: float) -> np.ndarray:
    return np.clip(img.astype(np.int16) + rng.normal(0, amount, img.shape).astype(np.int16), 0, 255).astype(np.uint8)


def _save_png(path: Path, img: np.ndarray) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img).save(path)


def _snapshot(path: Path, images: dict[str, np.ndarray], sha: str) -> None:
    items = {}
    for item_id, img in images.items():
        _save_png(path / "items" / f"{item_id}.png", img)
        items[item_id] = {"image": f"items/{item_id}.png", "latent": f"items/{item_id}.latent.npy"}
    (path / "manifest.json").write_text(json.dumps({"git_sha": sha, "items": items, "files": {}}))


def _metrics(rng: np.random.Generator, passed: bool, identical: bool) -> dict:
    psnr = float("inf") if identical else float(rng.uniform(18, 26) if not passed else rng.uniform(38, 60))
    return {"passed": passed, "failures": [] if passed else [f"psnr {psnr:.2f} dB < 40.0"], "finite": True,
            "latent_rel_l2": 0.0 if identical else float(rng.uniform(1e-4, 0.2)), "psnr": psnr,
            "ssim": 1.0 if identical else float(rng.uniform(0.5, 0.999))}


def fabricate(state: Path, rows: int = 100, items: int = 12, size: int = 256, seed: int = 0) -> dict[str, int]:
    """A plausible session: ~25% keeps, ~15% quality failures, ~10% crashes, the rest discards."""
    rng = np.random.default_rng(seed)
    pick = random.Random(seed)
    ids = [f"item-{i:03d}" for i in range(items)]
    base_imgs = {i: _image(rng, size) for i in ids}
    _snapshot(state / "baseline", base_imgs, "0" * 40)
    ledger = Ledger(state)
    ledger.append({"commit": "0" * 40, "status": "BASELINE", "description": "baseline", "quality_total": items})
    counts = {"KEEP": 0, "DISCARD": 0, "CRASH": 0, "quality_failures": 0}
    champ = dict(base_imgs)
    for n in range(rows):
        sha = f"{n + 1:07x}" + "".join(pick.choice("0123456789abcdef") for _ in range(33))
        run_dir = state / "runs" / f"20250101T{n // 60:02d}{n % 60:02d}00Z-{sha[:7]}"
        run_dir.mkdir(parents=True)
        r = pick.random()
        kind = "KEEP" if r < 0.25 else "QFAIL" if r < 0.40 else "CRASH" if r < 0.50 else "DISCARD"
        cls = pick.choice(["exact", "exact", "numerical"])
        row = {"commit": sha, "parent": "", "class": cls, "description": f"experiment {n + 1}: idea {kind.lower()}",
               "lane": "latency_b1", "quality_total": items, "device": "cpu", "off_target": 1, "cumulative_class": cls}
        quality, lanes = {}, {}
        if kind == "CRASH":
            row.update(status="CRASH", reason="candidate raised RuntimeError: kernel exploded", quality_pass=0)
        elif kind == "QFAIL":
            failed = set(pick.sample(ids, pick.randint(1, 4)))
            for i in ids:
                ok = i not in failed
                quality[i] = _metrics(rng, ok, ok and cls == "exact")
                if not ok:
                    _save_png(run_dir / "failures" / f"{i}.png", _perturb(rng, base_imgs[i], 25))
            row.update(status="DISCARD", reason=f"quality failed on {len(failed)} item(s)",
                       quality_pass=items - len(failed))
            counts["quality_failures"] += 1
        else:
            sp = pick.uniform(1.02, 1.25) if kind == "KEEP" else pick.uniform(0.85, 1.03)
            half = pick.uniform(0.005, 0.03)
            row.update(metric=sp, ci_low=sp - half, ci_high=sp + half, quality_pass=items, peak_vram_gib=0.1,
                       status=kind, reason="" if kind == "KEEP" else "not faster than the champion beyond noise")
            for i in ids:
                quality[i] = _metrics(rng, True, cls == "exact")
            lanes = {ln: {"outcome": {"name": ln, "objective": ln == "latency_b1",
                                      "verdict": "FASTER" if kind == "KEEP" else "SAME",
                                      "speedup": sp, "ci_low": sp - half, "ci_high": sp + half, "reason": "fabricated"}}
                     for ln in ("latency_b1", "throughput_b8")}
            if kind == "KEEP":
                if cls != "exact":
                    champ = {i: _perturb(rng, base_imgs[i], 2) for i in ids}
                _snapshot(state / "champions" / sha, champ, sha)
        summary = {"decision": row["status"], "reason": row.get("reason", ""), "commit": sha, "class": cls,
                   "quality": quality, "lanes": lanes}
        (run_dir / "summary.json").write_text(json.dumps(summary))
        ledger.append(row)
        counts[row["status"]] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--items", type=int, default=12)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default="benchmarks/report_speed.json", help="where to write the results")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ditar-report-bench-") as tmp:
        state = Path(tmp) / "state"
        t0 = time.perf_counter()
        counts = fabricate(state, args.rows, args.items, args.size)
        t_fab = time.perf_counter() - t0
        # The first build pays for importing matplotlib; a fresh `dit-ar report` process pays it too,
        # so it counts (the "cold" column).
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            index = build_report(state, lane="latency_b1", target="a5500")
            times.append(time.perf_counter() - t0)
        html_mib = index.stat().st_size / 2**20
        png_kib = (index.parent / "progress.png").stat().st_size / 2**10
    result = {"rows": args.rows, "items": args.items, "image_size": args.size, **counts,
              "cold_s": round(times[0], 3), "warm_median_s": round(statistics.median(times[1:] or times), 3),
              "html_mib": round(html_mib, 2), "progress_png_kib": round(png_kib, 1), "fabricate_s": round(t_fab, 2),
              "budget_s": BUDGET_S, "within_budget": times[0] < BUDGET_S,
              "python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
              "cpus": os.cpu_count()}
    print(f"{'rows':>5} {'keep':>5} {'disc':>5} {'crash':>5} {'qfail':>5} "
          f"{'cold s':>7} {'warm s':>7} {'html MiB':>9} {'budget':>7}")
    print(f"{args.rows:>5} {counts['KEEP']:>5} {counts['DISCARD']:>5} {counts['CRASH']:>5} "
          f"{counts['quality_failures']:>5} {result['cold_s']:>7.3f} {result['warm_median_s']:>7.3f} "
          f"{html_mib:>9.2f} {'OK' if result['within_budget'] else 'OVER':>7}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0 if result["within_budget"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""`dit-ar report`: one self-contained HTML page (plus progress.png) that shows a research session.

Reads only what the loop already writes: the ledger, `runs/*/summary.json`, `runs/*/failures/*.png`,
`baseline/` and `champions/<sha>/` snapshots. Nothing here imports torch, pytest or git, so the
report builds in about a second on CPU even for a long session.

This module turns the session into plain values (texts already formatted, sort keys, image
classes); `templates/report.html.j2` lays them out. The page embeds everything (CSS, plot, images
as base64 data URIs) so it opens from disk with no network.
"""
from __future__ import annotations

import base64
import json
import statistics
import time
from pathlib import Path
from typing import Iterable, NamedTuple, Sequence

from pytest_ditar.core.cumulative import cite
from pytest_ditar.core.decision import champion_row, kept_rows
from pytest_ditar.core.rerun import NOT_JUDGED, counts, row_judged
from pytest_ditar.report.data import Experiment, load_experiments, num
from pytest_ditar.report.images import ImagePool, ImageSource, heatmap_png
from pytest_ditar.report.plot import lane_histograms, plot_progress
from pytest_ditar.store.atomic import write_text_atomic
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.records import LedgerRow, read_lanes

Context = dict[str, object]  # values the template lays out

__all__ = ["build_report"]

WORST_ITEMS = 3  # items shown per experiment grid (lowest PSNR first)
TEMPLATE = "report.html.j2"
NO_VALUE = "-1e300"  # a missing number's sort key: sorts below every real value


class Num(NamedTuple):
    """A table cell's text and the number the page sorts it by."""

    text: str
    sort: str
    title: str = ""


class Tile(NamedTuple):
    image: str | None  # the ImagePool class, or None when there is no image to show
    label: str
    missing: str = ""


def _fmt(v: object, spec: str = ".3f") -> str:
    """A number formatted with `spec`; anything else as written ("-" for nothing, "inf" for infinity)."""
    x = num(v)
    if x is None:
        s = str(v) if v not in (None, "") else "-"
        return {"Infinity": "inf", "inf": "inf"}.get(s, s)
    return format(x, spec)


def _num_cell(v: object, spec: str = ".3f") -> Num:
    x = num(v)
    return Num(_fmt(v, spec), NO_VALUE if x is None else str(x))


def _bracket(low: object, high: object) -> str:
    return f"[{_fmt(low)}, {_fmt(high)}]"


def _ci(r: LedgerRow) -> str | None:
    """The row's CI as [low, high], or None when it has none."""
    return _bracket(r.ci_low, r.ci_high) if num(r.ci_low) is not None else None


# ---- tables ------------------------------------------------------------------------------------

def _list(v: object) -> list[object]:
    return v if isinstance(v, list) else []


def _ledger_rows(rows: Iterable[LedgerRow]) -> list[Context]:
    out: list[Context] = []
    for r in rows:
        has_quality = r.quality_total != ""
        qv = (num(r.quality_pass) or 0) / (num(r.quality_total) or 1)
        out.append({
            "run": _num_cell(r.run, ".0f"), "time": r.time.replace("+00:00", "Z"),
            "commit": r.commit[:7], "cls": r.cls, "status": r.status,
            "judged": row_judged(r) or r.status not in ("DISCARD", "CRASH"),
            "metric": _num_cell(r.metric), "ci": _ci(r) or "-",
            "quality": Num(f"{r.quality_pass}/{r.quality_total}" if has_quality else "-", str(qv)),
            "peak": _num_cell(r.peak_vram_gib, ".2f"), "device": r.device,
            "off_target": str(r.off_target) in ("1", "True"),
            "description": r.description, "reason": r.reason,
        })
    return out


def _lanes_table(exps: Sequence[Experiment]) -> Context | None:
    """Lane names (in first-seen order) and, per timed experiment, one cell per lane."""
    names: list[str] = []
    for e in exps:
        names += [n for n in e.lanes() if n not in names]
    timed = [e for e in exps if e.lanes()]
    if not timed:
        return None
    rows = []
    for e in timed:
        lanes = e.lanes()
        cells = []
        for n in names:
            oc = lanes.get(n)
            if not oc:
                cells.append(Num("-", NO_VALUE))
                continue
            sp = num(oc.get("speedup"))
            bracket = _bracket(oc.get("ci_low"), oc.get("ci_high"))
            shown = f"{sp:.3f}x {bracket} " if sp is not None else f"{oc['figure']} " if oc.get("figure") else ""
            text = shown + str(oc.get("verdict", ""))
            median = _median_ms(e, n)
            text += f" · {median:.2f} ms" if median is not None else ""
            role = "objective" if oc.get("objective") else "guard"
            cells.append(Num(text, NO_VALUE if sp is None else str(sp), f"{role}: {oc.get('reason', '')}"))
        rows.append({"run": Num(str(e.run), str(e.run)), "commit": e.commit[:7], "status": e.status,
                     "judged": row_judged(e.row), "cells": cells})
    return {"names": names, "rows": rows}


def _median_ms(e: Experiment, lane: str) -> float | None:
    """The candidate's median call on `lane` in that run, in ms (summary.json's samples)."""
    rec = e.summary.lanes.get(lane)
    samples = rec.measurement.get("samples") if rec is not None else None
    xs = [x for x in (num(v) for v in samples or []) if x is not None]
    return 1e3 * statistics.median(xs) if xs else None


def _baseline_facts(state_dir: Path) -> tuple[str, list[tuple[str, str]]]:
    """The host the baseline was stored on, in words, and each lane's baseline median in ms."""
    base = TagPaths(state_dir).baseline
    try:
        manifest = json.loads((base / "manifest.json").read_text())
    except (OSError, ValueError):
        manifest = {}
    fp = manifest.get("fingerprint") or {}
    host = ", ".join(str(fp[k]) for k in ("device_name", "cpu_model", "torch") if fp.get(k)) or "unknown"
    try:
        lanes = read_lanes(json.loads((base / "lanes.json").read_text()))
    except (OSError, ValueError):
        lanes = {}
    medians = []
    for name, rec in lanes.items():
        xs = rec.samples
        if xs:
            medians.append((f"baseline {name} median", f"{1e3 * statistics.median(xs):.2f} ms"))
    return host, medians


# ---- experiments and their image grids ---------------------------------------------------------

def _grid(e: Experiment, imgs: ImageSource, pool: ImagePool, n: int, failed_only: bool) -> Context:
    # For a failure only failed items have a stored candidate image (runs/*/failures/).
    items = e.worst_items(n, failed_only)
    if not items:
        why = ("no per-item quality results were recorded for this run" if e.run_dir
               else "no run directory found for this commit")
        return {"note": why, "items": []}
    cells = []
    for item_id, m in items:
        cells.append({
            "id": item_id, "state": "FAIL" if not m.get("passed", True) else "pass",
            "tiles": _tiles(imgs, pool, e, item_id),
            "psnr": _fmt(m.get("psnr"), ".2f"), "ssim": _fmt(m.get("ssim"), ".4f"),
            "latent_rel_l2": _fmt(m.get("latent_rel_l2"), ".2e"),
            "fails": "; ".join(str(f) for f in _list(m.get("failures"))),
        })
    return {"note": None, "items": cells}


def _tiles(imgs: ImageSource, pool: ImagePool, e: Experiment, item_id: str) -> list[Tile]:
    """Baseline, candidate and their |difference|, each either an image or why there is none."""
    base_p = imgs.baseline_image(item_id)
    cand_p = imgs.candidate_image(e, item_id)
    tiles = [Tile(pool.add(base_p.read_bytes()), "baseline") if base_p
             else Tile(None, "baseline", "baseline image missing"),
             Tile(pool.add(cand_p.read_bytes()), "candidate") if cand_p
             else Tile(None, "candidate", "candidate image not stored")]
    if not (base_p and cand_p):
        return tiles + [Tile(None, "|diff|", "needs both images")]
    b, c = imgs.array(base_p), imgs.array(cand_p)
    if b.shape != c.shape:
        return tiles + [Tile(None, "|diff|", f"shape {c.shape} vs {b.shape}")]
    heat, peak, gain = heatmap_png(c, b)
    return tiles + [Tile(pool.add(heat), f"|diff| x{gain:.0f} (max {peak:.1f}/255)")]


def _section(e: Experiment, imgs: ImageSource, pool: ImagePool, n: int, kind: str,
             failed_only: bool = False) -> Context:
    r = e.row
    ci = _ci(r)
    return {
        "run": e.run, "commit": e.commit[:7], "status": e.status, "kind": kind, "cls": r.cls,
        "metric": ((f"{_fmt(r.metric)}x" + (f" ci95 {ci}" if ci else "")) if e.metric is not None
                   else "not timed"),
        "quality": f"{r.quality_pass}/{r.quality_total}", "off_target": e.off_target,
        "description": r.description,
        "reason": r.reason if e.status != "KEEP" and r.reason else None,
        "run_dir": e.run_dir.name if e.run_dir else None,
        "grid": _grid(e, imgs, pool, n, failed_only),
        "hist_uri": _data_uri(lane_histograms(e)),
    }


def _data_uri(png: bytes | None) -> str | None:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii") if png else None


# ---- the page ----------------------------------------------------------------------------------

def _render(context: Context) -> str:
    import jinja2  # only the report needs it

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True)
    return env.get_template(TEMPLATE).render(context)


def build_report(state_dir: Path | str, out_dir: Path | str | None = None, *, lane: str = "", target: str = "",
                 title: str = "", worst: int = WORST_ITEMS) -> Path:
    """Write `<out_dir>/index.html` and `<out_dir>/progress.png`; returns the HTML path.

    `out_dir` defaults to `<state_dir>/report`. Missing images, run directories or snapshots are
    shown as such on the page, never an error: the report must work on a half-broken session.
    """
    t0 = time.perf_counter()
    state_dir = Path(state_dir)
    out = Path(out_dir) if out_dir else TagPaths(state_dir).report
    out.mkdir(parents=True, exist_ok=True)
    rows, exps = load_experiments(state_dir)
    lane = lane or next((r.lane for r in rows if r.lane), "objective")
    png = plot_progress(exps, out / "progress.png", lane=lane, target=target)

    pool = ImagePool()
    imgs = ImageSource(state_dir)
    n = counts(e.row for e in exps)  # a run that judged nothing is "not judged", not a DISCARD
    host, medians = _baseline_facts(state_dir)
    champ_row = champion_row(e.row for e in exps)
    champ = next((e for e in exps if e.row is champ_row), None)
    cited = cite(kept_rows(e.row for e in exps))
    keeps = [_section(e, imgs, pool, worst, "kept commit: worst items vs baseline") for e in exps if e.status == "KEEP"]
    failures = [_section(e, imgs, pool, worst, "quality failure", failed_only=True)
                for e in exps if e.is_quality_failure()]
    context = {
        # the state folder as the project names it, never the machine's absolute path
        "title": title or f"pytest-ditar report: {state_dir.name}",
        "state_dir": f"{state_dir.parent.name}/{state_dir.name}", "lane": lane, "host": host,
        "generated": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "cards": [("experiments", str(len(exps))), ("kept", str(n["KEEP"])), ("discarded", str(n["DISCARD"])),
                  ("crashed", str(n["CRASH"])), (NOT_JUDGED, str(n[NOT_JUDGED])), *medians,
                  # the one figure `status` and `compare baseline champion` cite (core.cumulative.cite)
                  (f"champion over the baseline on {lane} (cite this)", cited.text() if cited else "nothing kept yet"),
                  ("champion", champ.commit[:7] if champ else "baseline")],
        "n_experiments": len(exps), "n_off_target": sum(1 for e in exps if e.off_target),
        "target": target or "the target",
        "plot_uri": "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii"),
        "keeps": keeps, "failures": failures,
        "lanes": _lanes_table(exps), "ledger": _ledger_rows(rows),
    }
    # Last: the pool is complete only once every grid above has added its images.
    context.update(image_css=pool.css(), n_images=len(pool), elapsed=f"{time.perf_counter() - t0:.2f}")
    index = out / "index.html"
    write_text_atomic(index, _render(context))  # a reader never sees half a page
    return index

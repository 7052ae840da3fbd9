"""`dit-ar report`: one self-contained HTML page (plus progress.png) that shows a research session.

Reads only what the loop already writes: the ledger, `runs/*/summary.json`, `runs/*/failures/*.png`,
`baseline/` and `champions/<sha>/` snapshots. Nothing here imports torch, pytest or git, so the
report builds in about a second on CPU even for a long session.

The page embeds everything (CSS, plot, images as base64 data URIs) so it opens from disk with no
network. Images are de-duplicated by content: each distinct PNG is one CSS class with a data-URI
background, so an item's baseline (shown next to every candidate) is stored once, and exact keeps
(identical outputs) cost nothing extra.
"""
from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from pytest_ditar.store.ledger import Ledger

__all__ = ["Experiment", "ImagePool", "build_report", "cumulative_best", "load_experiments", "plot_progress"]

EXPERIMENT_STATUSES = ("KEEP", "DISCARD", "CRASH")
WORST_ITEMS = 3  # items shown per experiment grid (lowest PSNR first)


# ---- data --------------------------------------------------------------------------------------

@dataclass
class Experiment:
    """One ledger row joined with its run directory (when one was found)."""

    row: dict[str, Any]
    run_dir: Path | None = None
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return str(self.row.get("status", ""))

    @property
    def run(self) -> int:
        return int(self.row.get("run") or 0)

    @property
    def commit(self) -> str:
        return str(self.row.get("commit") or "")

    @property
    def metric(self) -> float | None:
        return _num(self.row.get("metric"))

    @property
    def off_target(self) -> bool:
        return str(self.row.get("off_target", "")).strip() in ("1", "True", "true")

    def quality(self) -> dict[str, dict[str, Any]]:
        q = self.summary.get("quality")
        return q if isinstance(q, dict) else {}

    def lanes(self) -> dict[str, dict[str, Any]]:
        """lane name -> outcome dict (verdict, speedup, ci_low, ci_high, objective, reason)."""
        out = {}
        for name, lane in (self.summary.get("lanes") or {}).items():
            oc = lane.get("outcome") if isinstance(lane, dict) else None
            if isinstance(oc, dict):
                out[name] = oc
        return out


def _num(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _read_rows(state_dir: Path) -> list[dict[str, Any]]:
    """Ledger rows; a broken chain is shown, not refused (the report is for looking)."""
    ledger = Ledger(state_dir)
    if not ledger.jsonl_path.exists():
        return []
    rows = []
    for line in ledger.jsonl_path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _run_summaries(state_dir: Path) -> dict[str, list[tuple[Path, dict[str, Any]]]]:
    """commit -> [(run dir, summary)] in directory (= time stamp) order."""
    by_commit: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    runs = state_dir / "runs"
    if not runs.is_dir():
        return by_commit
    for d in sorted(p for p in runs.iterdir() if p.is_dir()):
        try:
            summary = json.loads((d / "summary.json").read_text())
        except (OSError, json.JSONDecodeError):
            continue
        by_commit.setdefault(str(summary.get("commit") or ""), []).append((d, summary))
    return by_commit


def load_experiments(state_dir: Path) -> tuple[list[dict[str, Any]], list[Experiment]]:
    """All ledger rows, and the KEEP/DISCARD/CRASH ones joined with their run directories.

    Runs are matched to rows by commit, in order: the same commit tried twice (a crash that was
    fixed and re-run) takes the run directories in time order.
    """
    rows = _read_rows(state_dir)
    pending = _run_summaries(state_dir)
    exps: list[Experiment] = []
    for row in rows:
        if row.get("status") not in EXPERIMENT_STATUSES:
            continue
        queue = pending.get(str(row.get("commit") or ""), [])
        # Prefer the run whose recorded decision matches the row; else the oldest unused one.
        pick = next((i for i, (_, s) in enumerate(queue) if s.get("decision") == row.get("status")), 0 if queue else None)
        if pick is None:
            exps.append(Experiment(row))
        else:
            d, s = queue.pop(pick)
            exps.append(Experiment(row, d, s))
    return rows, exps


def cumulative_best(exps: Sequence[Experiment]) -> list[tuple[float, float, float]]:
    """The champion's speedup over the baseline after each experiment: (value, low, high).

    Each KEEP's metric is its speedup over the previous champion, so the cumulative speedup is
    the product of kept metrics. The band multiplies the kept ci_low (and ci_high) values: a
    simple propagation that treats the per-step intervals as independent and is conservative
    (wider than a joint interval) for more than one keep.
    """
    value = low = high = 1.0
    out = []
    for e in exps:
        m = e.metric
        if e.status == "KEEP" and m is not None:
            value *= m
            low *= _num(e.row.get("ci_low")) or m
            high *= _num(e.row.get("ci_high")) or m
        out.append((value, low, high))
    return out


# ---- the plot ----------------------------------------------------------------------------------

def plot_progress(exps: Sequence[Experiment], path: Path, *, lane: str = "", target: str = "") -> Path:
    """progress.png: every experiment at x = its ledger run number, y = cumulative speedup.

    A candidate is drawn where it would have put the champion (previous best x its metric), so
    keeps sit on the running-best line and discards below it. Runs without a metric (crashes,
    quality failures that were never timed) sit on the best line with their own markers.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    fig = Figure(figsize=(12, 4.6), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    ax.axhline(1.0, color="#555", lw=1, ls="--", label="baseline (1.0x)")
    best = cumulative_best(exps)
    if exps:
        xs = [e.run for e in exps]
        # Step line through the best after each run, started at the first run's left edge.
        sx = [xs[0] - 0.5, *xs]
        vals = [1.0, *(b[0] for b in best)]
        lows = [1.0, *(b[1] for b in best)]
        highs = [1.0, *(b[2] for b in best)]
        ax.fill_between(sx, lows, highs, step="post", color="#2a9d8f", alpha=0.18, lw=0,
                        label="best: 95% CI (product of kept CIs)")
        ax.step(sx, vals, where="post", color="#2a9d8f", lw=2, label=f"best {lane} speedup vs baseline")
        prev = [1.0, *(b[0] for b in best[:-1])]
        groups: dict[str, tuple[list[float], list[float]]] = {}
        for e, before in zip(exps, prev):
            m = e.metric
            if e.status == "KEEP":
                key = "KEEP"
            elif e.status == "CRASH":
                key = "CRASH"
            elif m is None:
                key = "DISCARD (quality/guard, not timed)"
            else:
                key = "DISCARD"
            y = before * m if m is not None else before
            groups.setdefault(key, ([], []))[0].append(e.run)
            groups[key][1].append(y)
        style = {"KEEP": dict(marker="o", s=70, color="#1b7f3b", edgecolor="black", zorder=5),
                 "DISCARD": dict(marker="o", s=26, color="#9aa0a6", zorder=3),
                 "DISCARD (quality/guard, not timed)": dict(marker="v", s=34, color="#e9a23b", zorder=4),
                 "CRASH": dict(marker="X", s=50, color="#d62828", zorder=4)}
        for key in ("KEEP", "DISCARD", "DISCARD (quality/guard, not timed)", "CRASH"):
            if key in groups:
                gx, gy = groups[key]
                ax.scatter(gx, gy, label=f"{key} ({len(gx)})", **style[key])
        off = [(e.run, (p * e.metric) if e.metric else p) for e, p in zip(exps, prev) if e.off_target]
        if off and len(off) == len(exps):
            ax.set_title(f"Research progress: all {len(exps)} runs OFF-TARGET (not measured on {target or 'the target'})",
                         fontsize=11, color="#b5179e")
        else:
            ax.set_title(f"Research progress: {len(exps)} experiments", fontsize=11)
            for x, y in off:
                ax.annotate("off-target", (x, y), xytext=(0, 8), textcoords="offset points", ha="center",
                            fontsize=7, color="#b5179e")
        kept = [(e, y) for e, y in zip(exps, (b[0] for b in best)) if e.status == "KEEP"]
        if len(kept) <= 12:  # label keeps while the plot stays readable
            for e, y in kept:
                desc = str(e.row.get("description", ""))
                ax.annotate(desc[:28] + ("..." if len(desc) > 28 else ""), (e.run, y), xytext=(4, -12),
                            textcoords="offset points", fontsize=7, color="#1b7f3b")
        ax.set_xlim(xs[0] - 1, xs[-1] + 1)
    else:
        ax.set_title("Research progress: no experiments yet", fontsize=11)
    ax.set_xlabel("experiment (ledger run number)")
    ax.set_ylabel("speedup vs baseline (x)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, framealpha=0.9)  # outside: never hides points
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


# ---- images ------------------------------------------------------------------------------------

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


def _load_rgb(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


_LUT: np.ndarray | None = None


def _inferno() -> np.ndarray:
    global _LUT
    if _LUT is None:
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


def _heatmap_png(cand: np.ndarray, base: np.ndarray) -> tuple[bytes, float, float]:
    """The heatmap as a palette PNG: one byte a pixel encodes ~3x faster than RGB, and is smaller."""
    from PIL import Image

    idx, peak, gain = _diff_index(cand, base)
    im = Image.fromarray(idx, mode="L").convert("P")
    im.putpalette(_inferno().tobytes())
    buf = io.BytesIO()
    im.save(buf, format="PNG", compress_level=1)
    return buf.getvalue(), peak, gain


@dataclass
class _Images:
    """Where a report finds images: the baseline's and each champion's manifests."""

    state_dir: Path
    _manifests: dict[Path, dict[str, Any] | None] = field(default_factory=dict)
    _arrays: dict[Path, np.ndarray] = field(default_factory=dict)

    def snapshot_image(self, snap: Path, item_id: str) -> Path | None:
        if snap not in self._manifests:
            try:
                self._manifests[snap] = json.loads((snap / "manifest.json").read_text())
            except (OSError, json.JSONDecodeError):
                self._manifests[snap] = None
        m = self._manifests[snap]
        entry = (m or {}).get("items", {}).get(item_id) if m else None
        p = snap / entry["image"] if entry and entry.get("image") else None
        return p if p is not None and p.is_file() else None

    def array(self, path: Path) -> np.ndarray:
        if path not in self._arrays:
            self._arrays[path] = _load_rgb(path)
        return self._arrays[path]


def _candidate_image(imgs: _Images, e: Experiment, item_id: str) -> Path | None:
    if e.status == "KEEP":
        p = imgs.snapshot_image(imgs.state_dir / "champions" / e.commit, item_id)
        if p:
            return p
    if e.run_dir is not None:
        p = e.run_dir / "failures" / f"{item_id}.png"
        if p.is_file():
            return p
    return None


def _worst_items(e: Experiment, n: int, failed_only: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """Items to show: failed ones first (a DISCARD's evidence), then the lowest PSNR."""
    q = e.quality()
    if failed_only:
        q = {k: v for k, v in q.items() if not v.get("passed", True)}

    def key(kv: tuple[str, dict[str, Any]]) -> tuple[int, float]:
        psnr = _num(kv[1].get("psnr"))
        return (0 if not kv[1].get("passed", True) else 1, psnr if psnr is not None else (-1.0 if str(kv[1].get("psnr")) in ("nan", "NaN") else math.inf))

    return sorted(q.items(), key=key)[:n]


def _fmt(v: Any, spec: str = ".3f", none: str = "-") -> str:
    x = _num(v)
    if x is None:
        s = str(v) if v not in (None, "") else none
        return {"Infinity": "inf", "inf": "inf"}.get(s, s)
    return format(x, spec)


def _grid_html(e: Experiment, imgs: _Images, pool: ImagePool, n: int, failed_only: bool = False) -> str:
    # For a failure only failed items have a stored candidate image (runs/*/failures/).
    items = _worst_items(e, n, failed_only)
    if not items:
        why = "no per-item quality results were recorded for this run" if e.run_dir else "no run directory found for this commit"
        return f'<p class="note">{html.escape(why)}</p>'
    cells = []
    for item_id, m in items:
        base_p = imgs.snapshot_image(imgs.state_dir / "baseline", item_id)
        cand_p = _candidate_image(imgs, e, item_id)
        tiles = [_tile(pool, base_p.read_bytes() if base_p else None, "baseline", "baseline image missing")]
        if cand_p:
            tiles.append(_tile(pool, cand_p.read_bytes(), "candidate", ""))
        else:
            tiles.append(_tile(pool, None, "candidate", "candidate image not stored"))
        if base_p and cand_p:
            b, c = imgs.array(base_p), imgs.array(cand_p)
            if b.shape == c.shape:
                heat, peak, gain = _heatmap_png(c, b)
                tiles.append(_tile(pool, heat, f"|diff| x{gain:.0f} (max {peak:.1f}/255)", ""))
            else:
                tiles.append(_tile(pool, None, "|diff|", f"shape {c.shape} vs {b.shape}"))
        else:
            tiles.append(_tile(pool, None, "|diff|", "needs both images"))
        state = "FAIL" if not m.get("passed", True) else "pass"
        fails = "; ".join(str(f) for f in m.get("failures") or [])
        metrics = (f"PSNR {_fmt(m.get('psnr'), '.2f')} dB &middot; SSIM {_fmt(m.get('ssim'), '.4f')} &middot; "
                   f"latent rel L2 {_fmt(m.get('latent_rel_l2'), '.2e')}")
        cells.append(f'<div class="item"><div class="ihead"><b>{html.escape(item_id)}</b> '
                     f'<span class="q-{state}">{state}</span></div><div class="tiles">{"".join(tiles)}</div>'
                     f'<div class="metrics">{metrics}</div>'
                     + (f'<div class="fails">{html.escape(fails)}</div>' if fails else "") + "</div>")
    return f'<div class="grid">{"".join(cells)}</div>'


def _tile(pool: ImagePool, data: bytes | None, label: str, missing: str) -> str:
    if data is None:
        return f'<figure><div class="im missing">{html.escape(missing)}</div><figcaption>{html.escape(label)}</figcaption></figure>'
    return f'<figure><div class="im {pool.add(data)}"></div><figcaption>{html.escape(label)}</figcaption></figure>'


# ---- the page ----------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#1d1d1f;background:#fafafa}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:14px;margin:18px 0 6px} .sub{color:#555} .note{color:#777;font-style:italic}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:14px 0} .card{background:#fff;border:1px solid #e3e3e3;border-radius:8px;padding:10px 14px}
.card b{display:block;font-size:20px} img.plot{max-width:100%;border:1px solid #e3e3e3;background:#fff}
table{border-collapse:collapse;background:#fff;font-size:12.5px} th,td{border:1px solid #e3e3e3;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f0f0f3;cursor:pointer;user-select:none;white-space:nowrap} th:after{content:" \\2195";color:#aaa}
td.num{text-align:right;font-variant-numeric:tabular-nums} .reason{max-width:420px;color:#555}
.st-KEEP{color:#1b7f3b;font-weight:600} .st-DISCARD{color:#8a6d00} .st-CRASH{color:#d62828;font-weight:600} .st-BASELINE{color:#555}
.exp{background:#fff;border:1px solid #e3e3e3;border-radius:8px;padding:8px 14px;margin:10px 0}
.grid{display:flex;flex-wrap:wrap;gap:14px} .item{border:1px solid #eee;border-radius:6px;padding:6px}
.tiles{display:flex;gap:6px} figure{margin:0;text-align:center} figcaption{font-size:11px;color:#555}
.im{width:160px;height:160px;background-size:contain;background-repeat:no-repeat;background-position:center;
image-rendering:pixelated;background-color:#222;border:1px solid #ccc}
.im.missing{background:repeating-linear-gradient(45deg,#eee,#eee 8px,#f8f8f8 8px,#f8f8f8 16px);color:#777;font-size:11px;
display:flex;align-items:center;justify-content:center;text-align:center;padding:6px;box-sizing:border-box}
.metrics{font-size:11.5px;margin-top:4px} .fails{font-size:11px;color:#d62828;max-width:490px}
.q-FAIL{color:#d62828;font-weight:600} .q-pass{color:#1b7f3b} .off{color:#b5179e;font-weight:600}
"""

# Sort a table by the clicked column; cells carry data-v (a number) when they are numeric.
_JS = """
document.querySelectorAll('table.sortable th').forEach((th,i)=>{th.addEventListener('click',()=>{
const tb=th.closest('table').tBodies[0],rows=[...tb.rows],asc=th.dataset.asc!=='1';th.dataset.asc=asc?'1':'0';
const v=r=>{const c=r.cells[i];return c.dataset.v!==undefined?parseFloat(c.dataset.v):c.textContent.trim().toLowerCase()};
rows.sort((a,b)=>{const x=v(a),y=v(b);return (x>y?1:x<y?-1:0)*(asc?1:-1)});rows.forEach(r=>tb.appendChild(r));});});
"""


def _cell(v: Any, *, num: bool = False, spec: str = ".3f", cls: str = "") -> str:
    x = _num(v)
    if num:
        data = f' data-v="{x}"' if x is not None else ' data-v="-1e300"'
        return f'<td class="num {cls}"{data}>{html.escape(_fmt(v, spec))}</td>'
    return f'<td class="{cls}">{html.escape(str(v if v is not None else ""))}</td>'


def _ledger_table(rows: Iterable[dict[str, Any]]) -> str:
    head = ["run", "time", "commit", "class", "status", "metric", "ci95", "quality", "peak GiB", "device", "description", "reason"]
    body = []
    for r in rows:
        st = str(r.get("status", ""))
        ci = f"[{_fmt(r.get('ci_low'))}, {_fmt(r.get('ci_high'))}]" if _num(r.get("ci_low")) is not None else "-"
        q = f"{r.get('quality_pass', '')}/{r.get('quality_total', '')}" if r.get("quality_total") not in ("", None) else "-"
        qv = (_num(r.get("quality_pass")) or 0) / (_num(r.get("quality_total")) or 1)
        dev = html.escape(str(r.get("device", ""))) + (' <span class="off">off-target</span>' if str(r.get("off_target")) in ("1", "True") else "")
        body.append("<tr>" + _cell(r.get("run"), num=True, spec=".0f") + _cell(str(r.get("time", "")).replace("+00:00", "Z"))
                    + f'<td><code>{html.escape(str(r.get("commit", ""))[:7])}</code></td>' + _cell(r.get("class"))
                    + _cell(st, cls=f"st-{st}") + _cell(r.get("metric"), num=True) + f"<td>{ci}</td>"
                    + f'<td class="num" data-v="{qv}">{html.escape(q)}</td>' + _cell(r.get("peak_vram_gib"), num=True, spec=".2f")
                    + f"<td>{dev}</td>" + _cell(r.get("description")) + _cell(r.get("reason"), cls="reason") + "</tr>")
    ths = "".join(f"<th>{h}</th>" for h in head)
    return f'<table class="sortable" id="ledger"><thead><tr>{ths}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _lanes_table(exps: Sequence[Experiment]) -> str:
    names: list[str] = []
    for e in exps:
        for n in e.lanes():
            if n not in names:
                names.append(n)
    timed = [e for e in exps if e.lanes()]
    if not timed:
        return '<p class="note">no lane was timed yet</p>'
    ths = "".join(f"<th>{html.escape(n)}</th>" for n in names)
    body = []
    for e in timed:
        lanes = e.lanes()
        tds = []
        for n in names:
            oc = lanes.get(n)
            if not oc:
                tds.append('<td class="num" data-v="-1e300">-</td>')
                continue
            sp = _num(oc.get("speedup"))
            txt = (f"{sp:.3f}x [{_fmt(oc.get('ci_low'))}, {_fmt(oc.get('ci_high'))}] " if sp is not None else "") + str(oc.get("verdict", ""))
            role = "objective" if oc.get("objective") else "guard"
            tds.append(f'<td class="num" data-v="{sp if sp is not None else -1e300}" title="{html.escape(role + ": " + str(oc.get("reason", "")))}">'
                       f"{html.escape(txt)}</td>")
        body.append(f'<tr><td class="num" data-v="{e.run}">{e.run}</td><td><code>{e.commit[:7]}</code></td>'
                    f'<td class="st-{e.status}">{e.status}</td>{"".join(tds)}</tr>')
    return (f'<table class="sortable" id="lanes"><thead><tr><th>run</th><th>commit</th><th>status</th>{ths}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table><p class="sub">Each cell: speedup of the candidate over the champion of its time, '
            "95% CI, lane verdict (hover for the statistics' reason).</p>")


def _experiment_section(e: Experiment, imgs: _Images, pool: ImagePool, n: int, kind: str,
                        failed_only: bool = False) -> str:
    r = e.row
    ci = f" ci95 [{_fmt(r.get('ci_low'))}, {_fmt(r.get('ci_high'))}]" if _num(r.get("ci_low")) is not None else ""
    metric = f"{_fmt(r.get('metric'))}x{ci}" if e.metric is not None else "not timed"
    off = ' <span class="off">off-target</span>' if e.off_target else ""
    reason = f'<div class="reason">{html.escape(str(r.get("reason", "")))}</div>' if e.status != "KEEP" and r.get("reason") else ""
    where = f'<div class="sub">run dir: <code>{html.escape(e.run_dir.name)}</code></div>' if e.run_dir else ""
    return (f'<div class="exp" id="run-{e.run}"><h3>#{e.run} <code>{html.escape(e.commit[:7])}</code> '
            f'<span class="st-{e.status}">{e.status}</span> ({kind}) &middot; {html.escape(str(r.get("class", "")))} &middot; '
            f'{html.escape(metric)} &middot; quality {r.get("quality_pass", "")}/{r.get("quality_total", "")}{off}</h3>'
            f'<div>{html.escape(str(r.get("description", "")))}</div>{reason}{where}{_grid_html(e, imgs, pool, n, failed_only)}</div>')


def _is_quality_failure(e: Experiment) -> bool:
    q = e.quality()
    if q:
        return any(not v.get("passed", True) for v in q.values())
    qp, qt = _num(e.row.get("quality_pass")), _num(e.row.get("quality_total"))
    # No per-item results: only a DISCARD's counts can say so (a CRASH's 0/N is not a verdict on quality).
    return e.status == "DISCARD" and qp is not None and qt is not None and 0 < qt and qp < qt


def build_report(state_dir: Path | str, out_dir: Path | str | None = None, *, lane: str = "", target: str = "",
                 title: str = "", worst: int = WORST_ITEMS) -> Path:
    """Write `<out_dir>/index.html` and `<out_dir>/progress.png`; returns the HTML path.

    `out_dir` defaults to `<state_dir>/report`. Missing images, run directories or snapshots are
    shown as such on the page, never an error: the report must work on a half-broken session.
    """
    t0 = time.perf_counter()
    state_dir = Path(state_dir)
    out = Path(out_dir) if out_dir else state_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    rows, exps = load_experiments(state_dir)
    lane = lane or next((str(r.get("lane")) for r in rows if r.get("lane")), "objective")
    png = plot_progress(exps, out / "progress.png", lane=lane, target=target)
    plot_uri = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")

    pool = ImagePool()
    imgs = _Images(state_dir)
    best = cumulative_best(exps)
    counts = {s: sum(1 for e in exps if e.status == s) for s in EXPERIMENT_STATUSES}
    champ = next((e for e in reversed(exps) if e.status == "KEEP"), None)
    cum = best[-1] if best else (1.0, 1.0, 1.0)
    cards = [("experiments", str(len(exps))), ("kept", str(counts["KEEP"])), ("discarded", str(counts["DISCARD"])),
             ("crashed", str(counts["CRASH"])), (f"best {lane} vs baseline", f"{cum[0]:.3f}x"),
             ("CI (product of kept CIs)", f"[{cum[1]:.3f}, {cum[2]:.3f}]"),
             ("champion", champ.commit[:7] if champ else "baseline")]
    failures = [e for e in exps if _is_quality_failure(e)]
    keeps = [e for e in exps if e.status == "KEEP"]
    sections_keep = "".join(_experiment_section(e, imgs, pool, worst, "kept commit: worst items vs baseline") for e in keeps) \
        or '<p class="note">nothing kept yet</p>'
    sections_fail = "".join(_experiment_section(e, imgs, pool, worst, "quality failure", failed_only=True) for e in failures) \
        or '<p class="note">no quality failures</p>'
    n_off = sum(1 for e in exps if e.off_target)
    off_note = (f'<p class="off">{n_off} of {len(exps)} experiments ran off-target (not on {html.escape(target or "the target")}): '
                "their timings do not predict the target.</p>") if n_off else ""
    title = title or f"pytest-ditar report: {state_dir.name}"
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{_CSS}
{pool.css()}</style></head><body>
<h1>{html.escape(title)}</h1>
<div class="sub">state <code>{html.escape(str(state_dir))}</code> &middot; objective lane <b>{html.escape(lane)}</b> &middot;
generated {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}</div>
<div class="cards">{"".join(f'<div class="card">{html.escape(k)}<b>{html.escape(v)}</b></div>' for k, v in cards)}</div>
{off_note}
<h2 id="progress">Progress</h2>
<img class="plot" id="progress-plot" alt="progress plot" src="{plot_uri}">
<p class="sub">Running best = product of the kept speedups (each is measured against the champion of its time);
its band multiplies the kept 95% CI bounds (treats the steps as independent; conservative).</p>
<h2 id="quality-failures">Quality failures ({len(failures)})</h2>
<p class="sub">Candidate vs the ORIGINAL baseline for the worst items (failed first, then lowest PSNR); the heatmap is the
per-pixel mean |difference| stretched so its maximum is full scale (gain shown).</p>
{sections_fail}
<h2 id="keeps">Kept commits ({len(keeps)})</h2>
{sections_keep}
<h2 id="lanes">Lanes: speedup and 95% CI per experiment</h2>
{_lanes_table(exps)}
<h2 id="ledger-table">Ledger ({len(rows)} rows; click a header to sort)</h2>
{_ledger_table(rows)}
<p class="sub">built in {time.perf_counter() - t0:.2f}s &middot; {len(pool)} distinct images embedded</p>
<script>{_JS}</script>
</body></html>
"""
    index = out / "index.html"
    tmp = index.with_suffix(".html.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(index)  # a reader never sees half a page
    return index

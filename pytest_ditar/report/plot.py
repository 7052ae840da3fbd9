"""progress.png: the session's speedup over the baseline, experiment by experiment (matplotlib)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from pytest_ditar.core.rerun import row_judged
from pytest_ditar.report.data import Experiment, cumulative_best


def plot_progress(exps: Sequence[Experiment], path: Path, *, lane: str = "", target: str = "") -> Path:
    """Write progress.png (progress_figure) to `path`."""
    fig = progress_figure(exps, lane=lane, target=target)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def progress_figure(exps: Sequence[Experiment], *, lane: str = "", target: str = "") -> Any:
    """Every experiment at x = its ledger run number, y = cumulative speedup (a matplotlib Figure).

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
        if any(e.status == "KEEP" for e in exps):  # nothing kept: no interval to draw
            ax.fill_between(sx, lows, highs, step="post", color="#2a9d8f", alpha=0.18, lw=0,
                            label="best: 95% CI (chained over the KEEPs)")
        ax.step(sx, vals, where="post", color="#2a9d8f", lw=2, label=f"best {lane} speedup vs baseline")
        prev = [1.0, *(b[0] for b in best[:-1])]
        groups: dict[str, tuple[list[float], list[float]]] = {}
        for e, before in zip(exps, prev):
            m = e.metric
            key = point_kind(e)
            # a run that judged nothing sits on the line, its speedup in a label: it is no evidence
            y = before * m if m is not None and row_judged(e.row) else before
            if m is not None and not row_judged(e.row):
                ax.annotate(f"not judged ({m:.2f}x)", (e.run, y), xytext=(0, -14), textcoords="offset points",
                            ha="center", fontsize=7, color="#7b61ff")
            groups.setdefault(key, ([], []))[0].append(e.run)
            groups[key][1].append(y)
        style: dict[str, dict[str, Any]] = {  # Any: scatter checks each keyword against its own parameter
            "KEEP": dict(marker="o", s=70, color="#1b7f3b", edgecolor="black", zorder=5),
            "DISCARD": dict(marker="o", s=26, color="#9aa0a6", zorder=3),
            "DISCARD (quality/guard, not timed)": dict(marker="v", s=34, color="#e9a23b", zorder=4),
            "DISCARD (lane UNSTABLE, not judged)": dict(marker="D", s=30, color="#7b61ff", zorder=4),
            "CRASH": dict(marker="X", s=50, color="#d62828", zorder=4)}
        for key in ("KEEP", "DISCARD", "DISCARD (quality/guard, not timed)", "DISCARD (lane UNSTABLE, not judged)",
                    "CRASH"):
            if key in groups:
                gx, gy = groups[key]
                ax.scatter(gx, gy, label=f"{key} ({len(gx)})", **style[key])
        off = [(e.run, (p * e.metric) if e.metric else p) for e, p in zip(exps, prev) if e.off_target]
        if off and len(off) == len(exps):
            ax.set_title(f"Research progress: all {len(exps)} runs OFF-TARGET "
                         f"(not measured on {target or 'the target'})",
                         fontsize=11, color="#b5179e")
        else:
            ax.set_title(f"Research progress: {len(exps)} experiments", fontsize=11)
            for x, y in off:
                ax.annotate("off-target", (x, y), xytext=(0, 8), textcoords="offset points", ha="center",
                            fontsize=7, color="#b5179e")
        kept = [(e, y) for e, y in zip(exps, (b[0] for b in best)) if e.status == "KEEP"]
        if len(kept) <= 12:  # label keeps while the plot stays readable
            for e, y in kept:
                desc = e.row.description
                ax.annotate(desc[:28] + ("..." if len(desc) > 28 else ""), (e.run, y), xytext=(4, -12),
                            textcoords="offset points", fontsize=7, color="#1b7f3b")
        ax.set_xlim(xs[0] - 1, xs[-1] + 1)
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # run numbers: no 2.5
    else:
        ax.set_title("Research progress: no experiments yet", fontsize=11)
    ax.set_xlabel("experiment (ledger run number)")
    ax.set_ylabel("speedup vs baseline (x)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, framealpha=0.9)  # outside: never hides points
    fig.tight_layout()
    return fig


def point_kind(e: Experiment) -> str:
    """The plot's legend entry for one experiment."""
    if e.status in ("KEEP", "CRASH"):
        return e.status
    if not row_judged(e.row):
        return "DISCARD (lane UNSTABLE, not judged)"  # core.rerun: the change may run once more
    return "DISCARD (quality/guard, not timed)" if e.metric is None else "DISCARD"


def lane_histograms(e: Experiment) -> bytes | None:
    """One PNG per run: for each timed lane, the per-call milliseconds of the candidate, the champion
    and its twin as the run's rounds timed them (summary.json); None where no lane was timed."""
    lanes = {name: rec.measurement for name, rec in e.summary.lanes.items()}
    lanes = {k: m for k, m in lanes.items() if m.get("samples")}
    if not lanes:
        return None
    import io

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.2 * len(lanes), 2.6), dpi=100)
    for i, (name, m) in enumerate(lanes.items()):
        ax = fig.add_subplot(1, len(lanes), i + 1)
        sides = [("candidate", m.get("samples"), "#1f77b4"), ("champion", m.get("champion_samples"), "#ff7f0e"),
                 ("twin", m.get("twin_samples"), "#7f7f7f")]
        for label, xs, color in sides:
            if xs:
                ax.hist([1e3 * x for x in xs], bins=min(30, max(5, len(xs) // 3)), alpha=0.55, color=color,
                        label=f"{label} ({len(xs)})")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("ms per call", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()

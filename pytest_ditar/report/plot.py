"""progress.png: the session's speedup over the baseline, experiment by experiment (matplotlib)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from pytest_ditar.report.data import Experiment, cumulative_best


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

"""What a report shows, read from what the loop already wrote: ledger rows joined with their
`runs/*/summary.json` into Experiment records.

Everything here is lenient: a broken chain, a missing run directory or an unreadable summary is
shown as such, never refused (the report is for looking, `dit-ar verify` is for checking).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from pytest_ditar.core.cumulative import chained, steps
from pytest_ditar.core.vocabulary import STATUSES
from pytest_ditar.store.ledger import Ledger
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.records import LedgerRow, RecordVersionError, RunSummary

Item = dict[str, object]  # one item's quality result in a summary: passed, failures, metrics


def num(v: object) -> float | None:
    """A finite float, or None for anything else (ledger cells are often "" or "nan")."""
    if not isinstance(v, (int, float, str)):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


@dataclass
class Experiment:
    """One ledger row joined with its run directory and summary (when one was found)."""

    row: LedgerRow
    run_dir: Path | None = None
    summary: RunSummary = field(default_factory=lambda: RunSummary(commit=None, decision=""))

    @property
    def status(self) -> str:
        return self.row.status

    @property
    def run(self) -> int:
        return self.row.run

    @property
    def commit(self) -> str:
        return self.row.commit

    @property
    def metric(self) -> float | None:
        return num(self.row.metric)

    @property
    def off_target(self) -> bool:
        return str(self.row.off_target).strip() in ("1", "True", "true")

    def quality(self) -> dict[str, Item]:
        return self.summary.quality

    def lanes(self) -> dict[str, dict[str, object]]:
        """lane name -> outcome dict (verdict, speedup, ci_low, ci_high, objective, reason)."""
        return self.summary.outcomes()

    def worst_items(self, n: int, failed_only: bool = False) -> list[tuple[str, Item]]:
        """Items to show: failed ones first (a DISCARD's evidence), then the lowest PSNR."""
        q = self.quality()
        if failed_only:
            q = {k: v for k, v in q.items() if not v.get("passed", True)}

        def key(kv: tuple[str, Item]) -> tuple[int, float]:
            psnr = num(kv[1].get("psnr"))
            if psnr is None:  # NaN is worse than any number; a missing or infinite PSNR (identical) is best
                psnr = -1.0 if str(kv[1].get("psnr")) in ("nan", "NaN") else math.inf
            return (0 if not kv[1].get("passed", True) else 1, psnr)

        return sorted(q.items(), key=key)[:n]

    def is_quality_failure(self) -> bool:
        q = self.quality()
        if q:
            return any(not v.get("passed", True) for v in q.values())
        qp, qt = num(self.row.quality_pass), num(self.row.quality_total)
        # No per-item results: only a DISCARD's counts can say so (a CRASH's 0/N is not a verdict on quality).
        return self.status == "DISCARD" and qp is not None and qt is not None and 0 < qt and qp < qt


def _run_summaries(state_dir: Path) -> dict[str, list[tuple[Path, RunSummary]]]:
    """commit -> [(run dir, summary)] in directory (= time stamp) order."""
    by_commit: dict[str, list[tuple[Path, RunSummary]]] = {}
    runs = TagPaths(state_dir).runs
    if not runs.is_dir():
        return by_commit
    for d in sorted(p for p in runs.iterdir() if p.is_dir()):
        try:
            data = json.loads((d / "summary.json").read_text())
            summary = RunSummary.from_json(data if isinstance(data, dict) else {})
        except (OSError, json.JSONDecodeError, RecordVersionError):
            continue
        by_commit.setdefault(summary.commit or "", []).append((d, summary))
    return by_commit


def load_experiments(state_dir: Path) -> tuple[list[LedgerRow], list[Experiment]]:
    """All ledger rows, and the KEEP/DISCARD/CRASH ones joined with their run directories.

    Runs are matched to rows by commit, in order: the same commit tried twice (a crash that was
    fixed and re-run) takes the run directories in time order.
    """
    rows = Ledger(state_dir).lenient_rows()  # a broken chain is shown, not refused
    pending = _run_summaries(state_dir)
    exps: list[Experiment] = []
    for row in rows:
        if row.status not in STATUSES:
            continue
        queue = pending.get(row.commit, [])
        # Prefer the run whose recorded decision matches the row; else the oldest unused one.
        pick = next((i for i, (_, s) in enumerate(queue) if s.decision == row.status),
                    0 if queue else None)
        if pick is None:
            exps.append(Experiment(row))
        else:
            d, s = queue.pop(pick)
            exps.append(Experiment(row, d, s))
    return rows, exps


def cumulative_best(exps: Sequence[Experiment]) -> list[tuple[float, float, float]]:
    """The champion's speedup over the baseline after each experiment: (value, low, high), chained
    over the KEEPs so far (core.cumulative: the product of their speedups and its 95% CI; the point
    itself where a kept row has no interval)."""
    kept: list[LedgerRow] = []
    out = []
    value = low = high = 1.0
    for e in exps:
        if e.status == "KEEP" and e.metric is not None:
            kept.append(e.row)
            value, lo, hi = chained(steps(kept)[0])  # what `status` cites (net where every KEEP has it)
            low, high = (lo, hi) if lo is not None and hi is not None else (value, value)
        out.append((value, low, high))
    return out

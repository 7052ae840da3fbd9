"""`dit-ar report`: the page a person opens after a session, rendered in headless Chromium.

The session is real (the loop runs on CPU: a keep, a quality failure, a crash, a timed discard),
so the report reads exactly what the gate writes. The JUnit XML and pytest-benchmark JSON that a
gated run files into its run directory are checked on the same session.
"""
from __future__ import annotations

import json
import math

import numpy as np

from pytest_ditar.core.cumulative import chained
from pytest_ditar.loop.run.table import run_table
from pytest_ditar.report.data import Experiment, cumulative_best
from pytest_ditar.report.html import build_report
from pytest_ditar.report.images import diff_heatmap
from pytest_ditar.store.records import LedgerRow

WIDTH, HEIGHT = 1280, 2000


def _exp(run: int, status: str, metric=None, lo=None, hi=None) -> Experiment:
    return Experiment(LedgerRow(run, status=status, metric=metric if metric is not None else "",
                                ci_low=lo if lo is not None else "", ci_high=hi if hi is not None else ""))


def test_cumulative_best_chains_kept_speedups_with_a_ci_of_the_product():
    exps = [_exp(2, "KEEP", 1.2, 1.1, 1.3), _exp(3, "DISCARD", 0.9, 0.8, 1.0), _exp(4, "CRASH"),
            _exp(5, "KEEP", 1.5, 1.4, 1.6)]
    best = cumulative_best(exps)
    assert [round(b[0], 6) for b in best] == [1.2, 1.2, 1.2, 1.8]
    assert all(math.isclose(a, b) for a, b in zip(best[0][1:], (1.1, 1.3)))  # one KEEP: its own interval
    lo, hi = best[-1][1:]
    # independent errors add in quadrature: narrower than the product of the bounds, around the product
    assert 1.1 * 1.4 < lo < 1.8 < hi < 1.3 * 1.6


def test_the_chained_ci_covers_the_product_as_often_as_it_says():
    # four KEEPs, each measured with log-normal error of its own size and a 95% CI from it
    import random

    rng = random.Random(7)
    true = [1.3, 1.1, 1.05, 1.6]
    sds = [0.05, 0.02, 0.01, 0.08]
    covered, trials = 0, 4000
    for _ in range(trials):
        steps = []
        for t, sd in zip(true, sds):
            m = t * math.exp(rng.gauss(0.0, sd))
            steps.append((m, m * math.exp(-1.96 * sd), m * math.exp(1.96 * sd)))
        _, lo, hi = chained(steps)
        covered += lo <= math.prod(true) <= hi
    assert 0.93 < covered / trials < 0.97  # the product of the bounds would cover ~100%: not a 95% CI
    assert chained([(1.2, None, None), (1.1, 1.0, 1.2)])[1:] == (None, None)  # a step without its CI


def test_the_plot_tells_an_unjudged_discard_from_a_quality_or_guard_one():
    from pytest_ditar.report.plot import point_kind

    unstable = Experiment(LedgerRow(run=2, status="DISCARD", metric="", judged=0,
                           reason="lane latency_b1 unstable: champion drift"))
    old_row = Experiment(LedgerRow(run=3, status="DISCARD", metric="", reason="lane latency_b1 unstable: spread"))
    quality = Experiment(LedgerRow(run=4, status="DISCARD", metric="", judged=1, reason="quality 2/6 failed"))
    slower = Experiment(LedgerRow(run=5, status="DISCARD", metric=0.98, judged=1, reason="lane not faster"))
    assert [point_kind(e) for e in (unstable, old_row, quality, slower)] == [
        "DISCARD (lane UNSTABLE, not judged)", "DISCARD (quality/guard, not timed)",  # its field, never its words
        "DISCARD (quality/guard, not timed)", "DISCARD"]
    assert point_kind(_exp(6, "KEEP", 1.2, 1.1, 1.3)) == "KEEP" and point_kind(_exp(7, "CRASH")) == "CRASH"


def test_report_survives_missing_run_dirs_and_images(tmp_path):
    """A ledger whose run dirs and snapshots are gone still gives a page, saying what is missing."""
    from pytest_ditar.store.ledger import Ledger

    state = tmp_path / "state"
    led = Ledger(state)
    led.append({"commit": "a" * 40, "status": "BASELINE"})
    led.append({"commit": "b" * 40, "status": "KEEP", "metric": 1.3, "ci_low": 1.2, "ci_high": 1.4, "lane": "l"})
    led.append({"commit": "c" * 40, "status": "DISCARD", "quality_pass": 3, "quality_total": 6, "lane": "l"})
    run = state / "runs/20250101T000000Z-ccccccc"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"commit": "c" * 40, "decision": "DISCARD", "quality": {
        "x": {"passed": False, "failures": ["psnr 10 < 40"], "psnr": 10.0}}}))
    page = build_report(state).read_text()
    assert "no run directory found" in page and "baseline image missing" in page
    assert "candidate image not stored" in page and (state / "report/progress.png").stat().st_size > 1000


def test_diff_heatmap_is_black_for_identical_images_and_full_scale_otherwise():
    a = np.zeros((4, 4, 3), np.uint8)
    heat, peak, gain = diff_heatmap(a, a)
    assert peak == 0 and gain == 1 and heat.max() < 10
    b = a.copy()
    b[0, 0] = 10
    heat, peak, gain = diff_heatmap(b, a)
    assert peak == 10 and gain == 25.5 and heat[0, 0].sum() > heat[1, 1].sum()


def test_run_table_lists_lanes_quality_and_verdict():
    from types import SimpleNamespace as NS

    from pytest_ditar.core.decision import LaneOutcome

    lane = NS(outcome=LaneOutcome("latency_b1", True, "FASTER", 1.183, 1.171, 1.195, "ok"),
              measurement=NS(samples=[0.01, 0.012, 0.011]), champion_source="interleaved")
    q = [NS(passed=True, item_id="a", metrics=NS(psnr=float("inf"))),
         NS(passed=False, item_id="b", metrics=NS(psnr=21.5))]
    lines = run_table([lane], q, NS(status="DISCARD", reason="quality failed on b"), "exact")
    text = "\n".join(lines)
    assert "latency_b1" in text and "1.183x" in text and "[1.171, 1.195]" in text and "objective" in text
    assert "quality 1/2 passed" in text and "21.50 dB on b" in text and "verdict DISCARD: quality failed on b" in text


def test_a_kept_runs_section_shows_each_lanes_rounds_as_histograms(tmp_path):
    """The report draws both sides' timed calls per lane for a run that timed them, and nothing for one
    that never reached its lanes."""
    from pytest_ditar.store.ledger import Ledger

    state = tmp_path / "state"
    led = Ledger(state)
    led.append({"commit": "a" * 40, "status": "BASELINE"})
    led.append({"commit": "b" * 40, "status": "KEEP", "metric": 1.3, "ci_low": 1.2, "ci_high": 1.4, "lane": "l"})
    run = state / "runs/20250101T000000Z-bbbbbbb"
    run.mkdir(parents=True)
    lane = {"measurement": {"samples": [0.010 + i * 1e-4 for i in range(24)],
                            "champion_samples": [0.013 + i * 1e-4 for i in range(24)]}}
    (run / "summary.json").write_text(json.dumps({"commit": "b" * 40, "decision": "KEEP", "lanes": {"l": lane}}))
    page = build_report(state).read_text()
    assert page.count('alt="each lane\'s rounds: candidate, champion and twin, ms per call"') == 1, page[:2000]
    (run / "summary.json").write_text(json.dumps({"commit": "b" * 40, "decision": "KEEP", "lanes": {}}))
    assert "each lane's rounds" not in build_report(state).read_text()


def test_the_progress_plot_numbers_runs_as_integers_and_draws_no_interval_with_nothing_kept():
    from pytest_ditar.report.plot import progress_figure

    unjudged = Experiment(LedgerRow(run=3, status="DISCARD", metric=2.44, judged=0, reason="unstable"))
    ax = progress_figure([_exp(2, "DISCARD", 0.9, 0.8, 1.0), unjudged]).axes[0]
    assert all(float(t).is_integer() for t in ax.get_xticks()), ax.get_xticks()  # no run 2.5
    assert not ax.collections[0].get_label().startswith("best: 95% CI")  # nothing kept: no band
    labels = [t.get_text() for t in ax.texts]
    assert "not judged (2.44x)" in labels, labels
    # the unjudged 2.44x sits on the best line (1.0), not far above it
    marks = [c for c in ax.collections if c.get_label().startswith("DISCARD (lane UNSTABLE")]
    assert marks and marks[0].get_offsets()[0][1] == 1.0
    kept = progress_figure([_exp(2, "KEEP", 1.2, 1.1, 1.3)]).axes[0]
    assert kept.collections[0].get_label() == "best: 95% CI (chained over the KEEPs)"

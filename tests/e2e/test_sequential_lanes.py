"""The sequential objective lane and the champion's seat bias, through `dit-ar experiment`."""
from __future__ import annotations

import json

import numpy as np

from candidates import COMMENT_ONLY
from conftest import make_project


def _seat_project(pytester):
    proj = make_project(pytester)
    cfg = proj.config()
    cfg["perf"].update(seat_bias=True, max_rounds=24, lane_budget_s=5.0)
    proj.write("config/autoresearch.json", json.dumps(cfg, indent=1))
    proj.git("commit", "-qam", "config: seat bias on")
    assert proj.ditar("init", "--tag", "t").returncode == 0
    res = proj.ditar("baseline")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return proj


def _reason(proj) -> str:
    runs = sorted((proj.root / ".autoresearch/t/runs").glob("*/summary.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(runs[-1].read_text())


def test_seat_bias_is_measured_once_per_champion_and_a_forged_one_is_remeasured(pytester, model_cache):
    proj = _seat_project(pytester)
    champion = proj.head()
    _, res, line = proj.experiment(COMMENT_ONLY, "exact", "A/A: a comment")
    assert line.startswith("DITAR VERDICT: DISCARD"), res.stdout[-3000:]
    summary = _reason(proj)
    lane = summary["lanes"]["latency_b1"]
    assert "seat bias" in lane["outcome"]["reason"] and "look " in lane["outcome"]["reason"]
    assert lane["measurement"]["looks"], "the objective lane was looked at"
    seat_file = proj.root / f".autoresearch/t/seat-bias/{champion}.json"
    seat = json.loads(seat_file.read_text())["latency_b1"]
    assert seat["rounds"] >= 12 and seat["ci_low"] <= seat["ratio"] <= seat["ci_high"]
    assert "seat bias " in res.stdout and summary["timings"]["perf.seat_bias"] > 0

    # the same champion: its seat bias is read, not measured again
    _, res, line = proj.experiment(COMMENT_ONLY + "# and another\n", "exact", "A/A: another comment")
    assert line.startswith("DITAR VERDICT: DISCARD"), res.stdout[-3000:]
    assert "perf.seat_bias" not in _reason(proj)["timings"] and ", seat bias " not in res.stdout

    # a forged file (a CI from 0 to 1e9 over one round) is no measurement: measured again
    seat_file.write_text(json.dumps({"latency_b1": {"ratio": 1.0, "ci_low": 0.0, "ci_high": 1e9, "rounds": 1}}))
    _, res, line = proj.experiment(COMMENT_ONLY + "# a third\n", "exact", "A/A: a third comment")
    assert line.startswith("DITAR VERDICT: DISCARD"), res.stdout[-3000:]
    assert _reason(proj)["timings"]["perf.seat_bias"] > 0
    assert json.loads(seat_file.read_text())["latency_b1"]["rounds"] >= 12


def test_a_seat_bias_raises_the_bar_a_candidate_must_clear():
    """judge_lane: the same 3% win is FASTER against the 1% floor, NOT_FASTER when the champion's
    seat alone was worth 4%."""
    from pytest_ditar.config.project import PerfConfig
    from pytest_ditar.core import sequential as seq
    from pytest_ditar.runtime.lanes import LaneMeasurement, Sequential, judge_lane

    rng = np.random.default_rng(3)
    champ = list(1.03 * np.exp(0.005 * rng.standard_normal(40)))
    cand = list(np.exp(0.005 * rng.standard_normal(40)))
    plan = seq.plan(20, 40, 0.05)
    perf = PerfConfig()

    def judged(seat):
        sq = Sequential(plan, seq.threshold(perf.min_speedup, seat), 60.0)
        m = LaneMeasurement("latency_b1", cand, [], champion_samples=champ)
        m.looks = [vars(seq.look(champ, cand, sq.threshold, plan, 1))]
        return judge_lane(m, champ, objective=True, source="interleaved", noise=None, perf_cfg=perf,
                          sequential=sq, seat=seat).outcome

    assert judged(None).verdict == "FASTER"
    seat = seq.Bias(1.04, 1.035, 1.045, 40)
    out = judged(seat)
    assert out.verdict == "NOT_FASTER" and "seat bias 4.5%" in out.reason and "threshold 4.5%" in out.reason


def test_perf_settings_out_of_range_name_the_file_and_key(pytester):
    proj = make_project(pytester)
    cfg = proj.config()
    cfg["perf"]["max_rounds"] = 2
    proj.write("config/autoresearch.json", json.dumps(cfg, indent=1))
    res = proj.ditar("status")
    assert res.returncode != 0
    assert "autoresearch.json" in res.stderr + res.stdout and "perf.max_rounds" in res.stderr + res.stdout

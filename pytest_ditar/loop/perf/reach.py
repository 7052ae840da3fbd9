"""The smallest win each timed lane can resolve, from stored A/A rounds and the lane's budget as
this config sets it (core.reach): `dit-ar status` (from the baseline's A/A) and the next-step line
after an undecided verdict (from that run's champion and twin) say it, and benchmarks/power.py
checks it."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_ditar.config.project import PerfConfig
from pytest_ditar.config.suite import Lane, Suite
from pytest_ditar.core.reach import Reach, smallest_win
from pytest_ditar.loop.perf.lanes import plan_for
from pytest_ditar.loop.run import champion
from pytest_ditar.loop.run.results import RunResults
from pytest_ditar.loop.run.session import DitarSession


def lane_reach(measurement: Mapping[str, Any], lane: Lane, perf: PerfConfig) -> Reach | None:
    """The Reach of `lane` in a gated run under `perf`, from a measurement's dict that holds an
    A/A: a gated run's champion against its twin (two processes of one commit, as the gate's
    references are: what one process's disturbance costs shows in their spread) where it has them,
    else the baseline's lanes.json (the lane against itself, two calls a round); None where it
    holds neither."""
    cand = [float(x) for x in measurement.get("samples") or []]
    champ = [float(x) for x in measurement.get("champion_samples") or []]
    twin = [float(x) for x in measurement.get("twin_samples") or []]
    a, b = (champ, twin) if twin and len(twin) == len(champ) else (champ, cand)
    if not a or len(a) != len(b):
        return None
    calls = sum(1 for side in (cand, champ, twin) if side)  # calls a round of that measurement made
    warm = sum(sum(measurement.get(k) or []) for k in ("warmup_s", "champion_warmup_s", "twin_warmup_s"))
    wall = float(measurement.get("wall_s") or 0.0) - warm
    aa_round_s = (wall / len(a) if wall > 0 else (sum(a) + sum(b)) / len(a) * calls / 2) * 2 / calls
    sq = plan_for(lane, perf)
    return smallest_win(a, b, aa_round_s, sq.plan, sq.threshold, sq.budget_s, 3 if perf.twin else 2)


def baseline_reach(lanes: Mapping[str, Any], suite: Suite, perf: PerfConfig) -> dict[str, Reach]:
    """Each timed lane's Reach from the baseline's lane records (store.records.LaneRecord)."""
    out = {}
    for ln in suite.lanes:
        rec = lanes.get(ln.name)
        r = lane_reach(rec.measurement, ln, perf) if rec is not None else None
        if r is not None:
            out[ln.name] = r
    return out


def undecided_note(sess: DitarSession, results: RunResults) -> str | None:
    """After a run whose objective lane stopped undecided (its budget or its last look, the
    measurement's `undecided`): the smallest win that lane resolves, from the baseline's A/A."""
    name = sess.cfg.objective_lane
    res = results.lanes.get(name)
    if res is None or getattr(res.measurement, "undecided", None) is None:
        return None
    ln = sess.suite.lane(name)
    # this run's champion and twin where it had both (an A/A of this very run), else the baseline's
    r = lane_reach(res.measurement.to_dict(), ln, sess.cfg.perf)
    if r is None:
        rec = champion.baseline_lanes(sess).get(name)
        r = lane_reach(rec.measurement, ln, sess.cfg.perf) if rec is not None else None
    if r is None:
        return None
    return (f"undecided: lane {name} {r.text()}; an idea expected to gain less cannot be told from this host's "
            "noise within the budget")

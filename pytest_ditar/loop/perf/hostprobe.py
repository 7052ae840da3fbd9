"""`dit-ar doctor`'s probe of the host now (issue 50): the objective lane's A/A noise and the
champion's speed, measured as a gated run measures them, in a few seconds.

The baseline's code is built twice from its commit's blobs, as every role is (loop.integrity.roles), and the
two builds are timed against each other in a few paired rounds of the objective lane
(runtime.lanes.measure_lane, the judge's clock and request stream); the champion, where one was
kept, is the rounds' third side. Their smallest resolvable win comes from the same arithmetic as
`dit-ar status`'s (loop.perf.reach), and the rule over the figures is core.hostcheck's.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

from pytest_ditar.core.hostcheck import HostNow
from pytest_ditar.loop.perf import lanekinds
from pytest_ditar.loop.perf.reach import lane_reach
from pytest_ditar.loop.run import champion
from pytest_ditar.loop.run.session import DitarSession
from pytest_ditar.runtime.lanes import measure_lane

ROUNDS = 8  # paired rounds: enough for the A/A's spread, a few seconds on the tiny suite


@dataclass(frozen=True)
class Probe:
    host: HostNow
    rounds: int
    seconds: float  # wall time of the probe, builds included
    baseline_ms: float  # the baseline's code: median now
    baseline_then_ms: float | None
    champion: str | None = None  # the champion's short commit, where one was kept
    champion_ms: float | None = None
    champion_then_ms: float | None = None


def load1() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def probe(sess: DitarSession, load: float | None, rounds: int = ROUNDS) -> Probe | None:
    """Time the objective lane A/A (and the champion beside it) now; None when that lane is of
    another kind (not timed) or no baseline is stored. `load`: the 1-minute load read before the
    probe's own workers added to it. Closes nothing: the caller closes `sess`."""
    lane = sess.suite.lane(sess.cfg.objective_lane)
    base_sha = champion.baseline_commit(sess)
    if lanekinds.of(lane) is not None or not base_sha:
        return None
    t0 = time.perf_counter()
    champ_sha = champion.commit(sess)
    kept = champ_sha if champ_sha and champ_sha != base_sha else None
    roles = [("doctor-a", base_sha), ("doctor-b", base_sha)] + ([("doctor-champion", kept)] if kept else [])
    for role, sha in roles:  # every build at once, then wait
        sess.build_at_commit(sha, "doctor.build", start_only=True, role=role)
    a, b, *c = (sess.build_at_commit(sha, "doctor.build", role=role) for role, sha in roles)
    m = measure_lane(a, sess.suite, lane, champion=b, twin=c[0] if c else None, timeout_s=sess.cfg.item_timeout_s,
                     repeats=rounds, pin_cpu=sess.cfg.perf.pin_cpu)
    aa = {k: v for k, v in m.to_dict().items() if not k.startswith("twin")}  # the A/A's two sides only
    if c:  # the champion's calls were a third of each round: an A/A round is two of three
        aa["wall_s"] = m.wall_s * 2 / 3
    reach_now = lane_reach(aa, lane, sess.cfg.perf)
    base_rec = champion.baseline_lanes(sess).get(lane.name)
    reach_then = lane_reach(base_rec.measurement, lane, sess.cfg.perf) if base_rec else None
    then = _median(base_rec.samples) if base_rec else None
    now = _median(m.samples + m.champion_samples)
    champ_now = champ_then = None
    if kept:
        champ_now = _median(m.twin_samples)
        stored = champion.stored_lanes(sess).get(lane.name)
        champ_then = _median(stored.samples) if stored else None
    host = HostNow(cores=os.cpu_count() or 1, load1=load, load_then=_load_then(base_rec),
                   reach_now=reach_now.effect if reach_now else None,
                   reach_then=reach_then.effect if reach_then else None,
                   anchor_ratio=now / then if now and then else None,
                   champion_ratio=champ_now / champ_then if champ_now and champ_then else None)
    return Probe(host, len(m.samples), time.perf_counter() - t0, (now or 0.0) * 1e3, _ms(then),
                 kept[:7] if kept else None, _ms(champ_now), _ms(champ_then))


def _ms(x: float | None) -> float | None:
    return x * 1e3 if x is not None else None


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _load_then(rec: Any) -> float | None:
    """The median 1-minute load over the baseline's A/A rounds (runtime.lanes' rounds_state)."""
    loads = [s["load1"] for s in (rec.measurement.get("rounds_state") or []) if isinstance(s, dict) and "load1" in s] \
        if rec is not None else []
    return statistics.median(loads) if loads else None

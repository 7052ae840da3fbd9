"""The champion, answered in one place: its commit (the last KEEP in the ledger, else the
baseline's), its stored outputs and lane samples, its code built in a worker, and storing a new
one when a candidate is kept."""
from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from pytest_ditar.core.decision import champion_row
from pytest_ditar.core.errors import CandidateError
from pytest_ditar.hardware.roofline import device_peak_tflops, host_roofline_check, roofline_check
from pytest_ditar.loop.run.results import RunResults
from pytest_ditar.loop.run.session import DitarSession
from pytest_ditar.runtime.lanes import LaneResult
from pytest_ditar.store.ledger import Ledger
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.records import LaneRecord, read_lanes
from pytest_ditar.store.snapshot import load_snapshot, write_snapshot

BUILD_PHASE = "perf.build_champion"  # the clock's name for checking out and building the champion


def kept_commit(ledger: Ledger) -> str | None:
    """The last KEEP's commit; None before any keep."""
    row = champion_row(ledger.rows())
    return row.commit if row else None


def baseline_commit(sess: DitarSession) -> str | None:
    try:
        return cast("str | None", sess.baseline().manifest.get("git_sha"))
    except Exception:  # noqa: BLE001 - no readable baseline: no commit to name
        return None


def commit(sess: DitarSession, ledger: Ledger | None = None) -> str | None:
    """The champion commit: the last KEEP in the ledger, else the baseline's commit."""
    return kept_commit(ledger or Ledger(sess.state_dir)) or baseline_commit(sess)


def _dir(sess: DitarSession, commit_sha: str) -> Path:
    return TagPaths(sess.state_dir).champion(commit_sha)


def snapshot(sess: DitarSession, ledger: Ledger | None = None) -> Any:
    """The champion's stored outputs: the last KEEP's snapshot, else the baseline."""
    kept = kept_commit(ledger or Ledger(sess.state_dir))
    return load_snapshot(_dir(sess, kept), "champion") if kept else sess.baseline()


def baseline_lanes(sess: DitarSession) -> dict[str, LaneRecord]:
    """The baseline's stored lanes (its A/A noise, FLOP counts and samples); {} where unreadable."""
    try:
        return read_lanes(sess.baseline().read_json("lanes.json"))
    except Exception:  # noqa: BLE001
        return {}


def stored_lanes(sess: DitarSession, ledger: Ledger | None = None) -> dict[str, LaneRecord]:
    """The current champion's stored lanes: the last KEEP's snapshot's, else the baseline's."""
    try:
        return read_lanes(snapshot(sess, ledger).read_json("lanes.json"))
    except Exception:  # noqa: BLE001 - the baseline's samples are the fallback
        return baseline_lanes(sess)


def build(sess: DitarSession, champion_commit: str | None, head: str | None, start_only: bool = False,
          ranks: int = 1) -> Any:
    """The champion's code from a worktree of its commit, built in its own worker (`start_only`:
    the build is sent and this returns at once). None when the lanes interleave with nothing:
    interleaving off, or no champion distinct from HEAD (the lanes then use stored samples)."""
    if not sess.cfg.perf.interleave or not champion_commit or champion_commit == head:
        return None
    return sess.build_at_commit(champion_commit, BUILD_PHASE, start_only=start_only, ranks=ranks)


def store(sess: DitarSession, results: RunResults, commit_sha: str, claimed_class: str) -> Path:
    """A kept candidate's outputs and lane results become the champion's snapshot."""
    lanes = results.lanes_dict()
    return write_snapshot(_dir(sess, commit_sha), [results.outputs[i.id] for i in sess.suite.corpus],
                          {"kind": "champion", "git_sha": commit_sha, "class": claimed_class},
                          extra_files={"lanes.json": json.dumps(lanes, default=str).encode()}, force=True)


def with_flops(sess: DitarSession, results: RunResults, lane: Any, res: LaneResult) -> LaneResult:
    """`res` with its FLOPs per call, from the baseline count (an exact change does the same work); a
    lane faster than its devices can compute them is a CRASH (a lane of N GPUs or ranks: N devices'
    worth), added to `results`."""
    stored = baseline_lanes(sess).get(lane.name)
    flops = stored.flops if stored is not None else None
    if not flops or not res.measurement.samples:
        return res
    med = statistics.median(res.measurement.samples)
    res = replace(res, flops=flops, achieved_tflops=flops / med / 1e12)
    device = sess.resolved_device()
    per_device = flops / max(1, getattr(lane, "gpus", 1))  # at best, the ranks split the work evenly
    if device.startswith("cuda"):
        problem = roofline_check(med, per_device, device_peak_tflops(sess.fingerprint()))
    elif device == "cpu" and stored is not None and stored.host_flops:  # measured at baseline (older ones: none)
        problem = host_roofline_check(med, per_device, stored.host_flops)
    else:
        problem = None
    if problem:
        results.add_error(CandidateError("exception", f"lane {lane.name}: {problem}"))
    return res

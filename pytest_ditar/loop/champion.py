"""The champion: the last kept commit (or the baseline), its stored samples and its code."""
from __future__ import annotations

from typing import Any

from pytest_ditar.vcs import repo as gitops
from pytest_ditar.loop.session import DitarSession


def champion_commit(sess: DitarSession, gate: Any) -> str | None:
    if gate is not None and (gate.champion_commit or gate.baseline_commit):
        return gate.champion_commit or gate.baseline_commit
    try:
        return sess.baseline().manifest.get("git_sha")
    except Exception:  # noqa: BLE001
        return None


def build_champion(sess: DitarSession, gate: Any) -> Any:
    """Check the champion commit out into a worktree under the state dir and build it."""
    commit = champion_commit(sess, gate)
    head = gitops.state(sess.cfg.root).head
    if not commit or commit == head:
        return None  # nothing distinct to interleave with: use the stored samples
    return sess.build_at_commit(commit, "perf.build_champion")


def baseline_lanes(sess: DitarSession) -> dict[str, Any]:
    try:
        return sess.baseline().read_json("lanes.json") or {}
    except Exception:  # noqa: BLE001
        return {}


def stored_lanes(sess: DitarSession, gate: Any) -> dict[str, Any]:
    """Lane samples of the current champion: the last KEEP's snapshot, else the baseline's."""
    if gate is not None:
        try:
            snap = gate.champion_snapshot()
            data = snap.read_json("lanes.json") or {}
            if snap.manifest.get("kind") == "champion":
                return {k: {"samples": v["measurement"]["samples"]} for k, v in data.items()}
            return data
        except Exception:  # noqa: BLE001
            pass
    return baseline_lanes(sess)


def attach_flops(sess: DitarSession, lane: Any, res: Any) -> None:
    """FLOPs per call come from the baseline count (an exact change does the same work)."""
    from pytest_ditar.hardware.profiles import get_profile, roofline_check

    flops = (baseline_lanes(sess).get(lane.name) or {}).get("flops")
    if not flops or not res.measurement.samples:
        return
    import statistics

    med = statistics.median(res.measurement.samples)
    res.flops = flops
    res.achieved_tflops = flops / med / 1e12
    device = sess.resolved_device()
    if device.startswith("cuda"):
        fp = sess.fingerprint()
        try:
            peak = get_profile("h200" if "H200" in fp.device_name else sess.cfg.target)
        except ValueError:
            peak = get_profile(sess.cfg.target)
        problem = roofline_check(med, flops, peak)
        if problem:
            from pytest_ditar.core.errors import CandidateError

            sess.errors.append(CandidateError("exception", f"lane {lane.name}: {problem}"))

"""What a decided gated run leaves behind: summary.json, the ledger row, verdict.txt, the
champion snapshot of a KEEP, and the revert (with the candidate's patch) of anything else."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_ditar.vcs import repo as gitops
from pytest_ditar.core.decision import Decision, verdict_line
from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.quality import aggregate
from pytest_ditar.store.snapshot import write_snapshot

if TYPE_CHECKING:
    from pytest_ditar.loop.gate import Gate


def act(gate: "Gate", d: Decision) -> None:
    """Write summary.json, the ledger row and verdict.txt; store a KEEP as champion, revert the rest."""
    s = gate.sess
    run_dir = s.run_dir()
    obj = s.lanes.get(s.cfg.objective_lane)
    oc = getattr(obj, "outcome", None)
    passed, total, _ = aggregate(list(s.quality.values()))
    peak = max([lr.outcome.peak_vram_gib for lr in s.lanes.values()
                if getattr(lr, "outcome", None) and lr.outcome.peak_vram_gib is not None], default=None)
    off = off_target(s)
    st = gitops.state(gate.root)
    summary = {"decision": d.status, "reason": d.reason, "reasons": list(d.reasons), "commit": gate.head,
               "class": gate.meta.cls if gate.meta else "", "cumulative_class": s.cls,
               "guards": [g.__dict__ for g in gate.guards],
               "quality": {k: {"passed": r.passed, "failures": list(r.failures), **r.metrics.as_dict()}
                           for k, r in s.quality.items()},
               "lanes": {k: v.to_dict() for k, v in s.lanes.items() if hasattr(v, "to_dict")},
               "timings": s.clock.as_dict()}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    if d.status == "KEEP":
        store_champion(gate)
    gate.ledger.append({
        "commit": gate.head, "parent": st.parent, "class": gate.meta.cls if gate.meta else "",
        "description": gate.meta.description if gate.meta else "", "lane": s.cfg.objective_lane,
        "metric": oc.speedup if oc else None, "ci_low": oc.ci_low if oc else None, "ci_high": oc.ci_high if oc else None,
        "quality_pass": passed, "quality_total": total, "peak_vram_gib": peak, "status": d.status,
        "reason": d.reason, "cumulative_class": s.cls, "device": s.resolved_device(), "off_target": int(off),
    })
    gate.verdict = verdict_line(d, lane=s.cfg.objective_lane, speedup=oc.speedup if oc else None,
                                ci_low=oc.ci_low if oc else None, ci_high=oc.ci_high if oc else None,
                                quality_pass=passed, quality_total=total, cls=s.cls, commit=(gate.head or "")[:7],
                                off_target=off)
    (run_dir / "verdict.txt").write_text(gate.verdict + "\n")
    if d.status != "KEEP":
        revert(gate, run_dir)


def revert(gate: "Gate", run_dir: Path) -> None:
    """Save the candidate's patch beside its logs, then reset to the parent unless that would lose work."""
    base = gitops.state(gate.root).parent
    if base:
        (run_dir / "candidate.patch").write_text(gitops.diff_patch(gate.root, base, gate.head))
    if gate.config.getoption("--ditar-no-revert"):
        gate.summary_lines.append("ditar: --ditar-no-revert: the commit stays in place")
        return
    if any(g.name == "clean_tree" and not g.ok for g in gate.guards):
        gate.summary_lines.append("ditar: dirty tree: not reverting (that would lose uncommitted work)")
        return
    if any(g.name == "branch" and not g.ok for g in gate.guards):
        gate.summary_lines.append("ditar: wrong branch: not reverting a branch this session does not own")
        return
    try:
        gitops.reset_hard_to_parent(gate.root, gate.head)
        gate.summary_lines.append(f"ditar: reverted {gate.head[:7]} (patch and logs in {run_dir})")
    except DitarError as exc:
        gate.summary_lines.append(f"ditar: not reverted: {exc}")


def store_champion(gate: "Gate") -> None:
    s = gate.sess
    lanes = {k: v.to_dict() for k, v in s.lanes.items() if hasattr(v, "to_dict")}
    write_snapshot(s.state_dir / "champions" / gate.head, [s.outputs[i.id] for i in s.suite.corpus],
                   {"kind": "champion", "git_sha": gate.head, "class": gate.meta.cls if gate.meta else ""},
                   extra_files={"lanes.json": json.dumps(lanes, default=str).encode()}, force=True)


def off_target(sess: Any) -> bool:
    try:
        from pytest_ditar.hardware.profiles import get_profile, on_target

        return not on_target(sess.fingerprint(), get_profile(sess.cfg.target))
    except Exception:  # noqa: BLE001
        return True

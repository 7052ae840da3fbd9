"""What a decided gated run leaves behind: summary.json, the ledger row, verdict.txt, the
champion snapshot of a KEEP, and the revert (with the candidate's patch) of anything else."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pytest_ditar.core.decision import Decision, verdict_line
from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.quality import aggregate
from pytest_ditar.loop import champion
from pytest_ditar.store.atomic import write_json_atomic, write_text_atomic
from pytest_ditar.vcs import repo as gitops

if TYPE_CHECKING:
    from pytest_ditar.loop.gate import Gate


class Recorded(NamedTuple):
    verdict: str  # the greppable DITAR VERDICT line
    notes: tuple[str, ...]  # summary lines: what happened to the commit


def act(gate: "Gate", d: Decision) -> Recorded:
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
    cls = gate.meta.cls if gate.meta else ""
    summary = {"decision": d.status, "reason": d.reason, "reasons": list(d.reasons), "commit": gate.head,
               "class": cls, "cumulative_class": s.cls,
               "guards": [g.__dict__ for g in gate.guards],
               "quality": {k: {"passed": r.passed, "failures": list(r.failures), **r.metrics.as_dict()}
                           for k, r in s.quality.items()},
               "lanes": {k: v.to_dict() for k, v in s.lanes.items() if hasattr(v, "to_dict")},
               "timings": s.clock.as_dict()}
    write_json_atomic(run_dir / "summary.json", summary, indent=1, default=str)
    if d.status == "KEEP":
        champion.store(s, gate.head, cls)
    gate.ledger.append({
        "commit": gate.head, "parent": st.parent, "class": cls,
        "description": gate.meta.description if gate.meta else "", "lane": s.cfg.objective_lane,
        "metric": oc.speedup if oc else None, "ci_low": oc.ci_low if oc else None, "ci_high": oc.ci_high if oc else None,
        "quality_pass": passed, "quality_total": total, "peak_vram_gib": peak, "status": d.status,
        "reason": d.reason, "cumulative_class": s.cls, "device": s.resolved_device(), "off_target": int(off),
    })
    verdict = verdict_line(d, lane=s.cfg.objective_lane, speedup=oc.speedup if oc else None,
                           ci_low=oc.ci_low if oc else None, ci_high=oc.ci_high if oc else None,
                           quality_pass=passed, quality_total=total, cls=s.cls, commit=(gate.head or "")[:7],
                           off_target=off)
    write_text_atomic(run_dir / "verdict.txt", verdict + "\n")
    return Recorded(verdict, (revert(gate, run_dir),) if d.status != "KEEP" else ())


def revert(gate: "Gate", run_dir: Path) -> str:
    """Save the candidate's patch beside its logs, then reset to the parent unless that would lose
    work. Returns the summary line that says what happened to the commit."""
    base = gitops.state(gate.root).parent
    if base:
        write_text_atomic(run_dir / "candidate.patch", gitops.diff_patch(gate.root, base, gate.head))
    if gate.opts.no_revert:
        return "ditar: --ditar-no-revert: the commit stays in place"
    if any(g.name == "clean_tree" and not g.ok for g in gate.guards):
        return "ditar: dirty tree: not reverting (that would lose uncommitted work)"
    if any(g.name == "branch" and not g.ok for g in gate.guards):
        return "ditar: wrong branch: not reverting a branch this session does not own"
    try:
        gitops.reset_hard_to_parent(gate.root, gate.head)
        return f"ditar: reverted {gate.head[:7]} (patch and logs in {run_dir})"
    except DitarError as exc:
        return f"ditar: not reverted: {exc}"


def off_target(sess: Any) -> bool:
    try:
        from pytest_ditar.hardware.fingerprint import on_target
        from pytest_ditar.hardware.profiles import get_profile

        return not on_target(sess.fingerprint(), get_profile(sess.cfg.target))
    except Exception:  # noqa: BLE001
        return True

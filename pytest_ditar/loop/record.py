"""What a decided gated run leaves behind: summary.json, the ledger row, verdict.txt, the
champion snapshot of a KEEP, the revert (with the candidate's patch) of anything else, and the
state's backup in refs/ditar/<tag>. A run that damaged the state directory is restored and
recorded as a CRASH; a file error while recording is a CRASH with its reason, never a traceback."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pytest_ditar.core.decision import Decision, verdict_line
from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.quality import aggregate
from pytest_ditar.loop import backup, champion, phases
from pytest_ditar.loop.options import Exit
from pytest_ditar.store.atomic import write_json_atomic, write_text_atomic
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.vcs import repo as gitops

if TYPE_CHECKING:
    from pytest_ditar.loop.gate import Gate


class Recorded(NamedTuple):
    verdict: str  # the greppable DITAR VERDICT line
    notes: tuple[str, ...]  # summary lines: what happened to the commit
    decision: Decision  # what was recorded: the decision, or a CRASH when it could not be stored


def finish(gate: "Gate", decision: Decision, status: int) -> int:
    """Record `decision` (act), back the state up, and return the run's exit status."""
    try:
        rec = act(gate, decision)
    except OSError as exc:  # not even the ledger row could be written
        gate.refusal = f"could not record the run: {oserror_line(exc)}: nothing recorded, nothing reverted"
        return Exit.TESTS_FAILED
    gate.decision, gate.verdict = rec.decision, rec.verdict
    gate.summary_lines.extend(rec.notes)
    paths = TagPaths(gate.sess.state_dir)
    note = backup.save_note(gate.root, paths, f"ditar {gate.sess.tag}: {rec.decision.status} {str(gate.head)[:7]}",
                            parent=gate.state_watch.commit if gate.state_watch else None)
    if note:
        gate.summary_lines.append(note)
    if gate.opts.phase == phases.DECIDE:
        phases.consume(gate.sess)
    return status if rec.decision.status == "KEEP" else Exit.TESTS_FAILED


def damaged(gate: "Gate", harm: str, exitstatus: int) -> int:
    """The run changed the state directory: restore it from the backup taken before the candidate
    ran (not the ref, which the candidate can move too), then record the run as a CRASH."""
    paths = TagPaths(gate.sess.state_dir)
    try:
        w = gate.state_watch
        backup.restore(gate.root, paths, w.commit if w else None, w.dirs if w else ())
    except (DitarError, OSError) as exc:
        gate.refusal = (f"state directory damaged during the run ({harm}) and not restored ({exc}): nothing recorded, "
                        f"nothing reverted; restore {paths.dir} or start a new tag")
        return Exit.TESTS_FAILED
    reason = f"state directory damaged during the run ({harm}): restored from {backup.ref(paths)}"
    if exitstatus == Exit.INTERRUPTED:
        gate.refusal = f"interrupted: {reason}; no verdict recorded, nothing reverted"
        return exitstatus
    return finish(gate, _crash(reason), Exit.TESTS_FAILED)


def finish_revert(gate: "Gate", st: gitops.RepoState) -> str | None:
    """Finish a revert that a kill -9 interrupted (the ledger's last row is DISCARD/CRASH for HEAD),
    with reset --keep, on a tree the gate has found clean. Returns a refusal when git will not."""
    rows = gate.ledger.rows()
    if not (rows and rows[-1].get("commit") == st.head and rows[-1].get("status") in ("DISCARD", "CRASH")) \
            or gate.opts.no_revert:
        return None
    try:
        gitops.revert_to_parent(gate.root, str(st.head))
    except DitarError as exc:
        return f"HEAD {str(st.head)[:7]} is recorded as {rows[-1]['status']} but its revert cannot be finished: {exc}"
    gate.summary_lines.append(f"ditar: recovered: finished the revert of {str(st.head)[:7]} recorded as {rows[-1]['status']}")
    return None


def _crash(reason: str) -> Decision:
    return Decision("CRASH", reason, (reason,))


def oserror_line(exc: OSError) -> str:
    """One line for a file error: "Is a directory: /path" (the target, not a temp file's name)."""
    where = exc.filename2 or exc.filename
    return f"{exc.strerror}: {where}" if exc.strerror and where else (exc.strerror or str(exc) or type(exc).__name__)


def _summary(gate: "Gate", d: Decision) -> dict[str, Any]:
    s = gate.sess
    return {"decision": d.status, "reason": d.reason, "reasons": list(d.reasons), "commit": gate.head,
            "class": gate.meta.cls if gate.meta else "", "cumulative_class": s.cls,
            "guards": [g.__dict__ for g in gate.guards],
            "quality": {k: {"passed": r.passed, "failures": list(r.failures), **r.metrics.as_dict()}
                        for k, r in s.quality.items()},
            "lanes": {k: v.to_dict() for k, v in s.lanes.items() if hasattr(v, "to_dict")},
            "timings": s.clock.as_dict(),
            "request_secret": getattr(s, "request_secret", None)}  # what keyed the run's timed requests


def act(gate: "Gate", d: Decision) -> Recorded:
    """Write summary.json, the ledger row and verdict.txt; store a KEEP as champion, revert the rest.

    The ledger row is the record: a file error before it makes the run a CRASH with that reason;
    one at the ledger itself propagates (OSError), with nothing recorded."""
    s = gate.sess
    run_dir = s.run_dir()
    cls = gate.meta.cls if gate.meta else ""
    try:
        write_json_atomic(run_dir / "summary.json", _summary(gate, d), indent=1, default=str)
        if d.status == "KEEP":
            champion.store(s, gate.head, cls)
    except OSError as exc:
        d = _crash(f"could not record the run: {oserror_line(exc)}")
        with contextlib.suppress(OSError):
            write_json_atomic(run_dir / "summary.json", _summary(gate, d), indent=1, default=str)
    obj = s.lanes.get(s.cfg.objective_lane)
    oc = getattr(obj, "outcome", None)
    passed, total, _ = aggregate(list(s.quality.values()))
    peak = max([lr.outcome.peak_vram_gib for lr in s.lanes.values()
                if getattr(lr, "outcome", None) and lr.outcome.peak_vram_gib is not None], default=None)
    off = off_target(s)
    gate.ledger.append({
        "commit": gate.head, "parent": gitops.state(gate.root).parent, "class": cls,
        "description": gate.meta.description if gate.meta else "", "lane": s.cfg.objective_lane,
        "metric": oc.speedup if oc else None, "ci_low": oc.ci_low if oc else None, "ci_high": oc.ci_high if oc else None,
        "quality_pass": passed, "quality_total": total, "peak_vram_gib": peak, "status": d.status,
        "reason": d.reason, "cumulative_class": s.cls, "device": s.resolved_device(), "off_target": int(off),
    })
    verdict = verdict_line(d, lane=s.cfg.objective_lane, speedup=oc.speedup if oc else None,
                           ci_low=oc.ci_low if oc else None, ci_high=oc.ci_high if oc else None,
                           quality_pass=passed, quality_total=total, cls=s.cls, commit=(gate.head or "")[:7],
                           off_target=off)
    notes: list[str] = []
    try:
        write_text_atomic(run_dir / "verdict.txt", verdict + "\n")
    except OSError as exc:  # recorded in the ledger already: a lost copy of the line is a note
        notes.append(f"ditar: verdict.txt not written: {oserror_line(exc)}")
    if d.status != "KEEP":
        notes.append(revert(gate, run_dir))
    return Recorded(verdict, tuple(notes), d)


def revert(gate: "Gate", run_dir: Path) -> str:
    """Save the candidate's patch beside its logs, then `git reset --keep` to the parent: local
    changes survive, and where git refuses, the commit stays and the line says how to finish.
    Returns the summary line that says what happened to the commit."""
    base = gitops.state(gate.root).parent
    if base:
        with contextlib.suppress(OSError):  # the patch is a convenience; git still has the commit
            write_text_atomic(run_dir / "candidate.patch", gitops.diff_patch(gate.root, base, gate.head))
    if gate.opts.no_revert:
        return "ditar: --ditar-no-revert: the commit stays in place"
    try:
        gitops.revert_to_parent(gate.root, gate.head)
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

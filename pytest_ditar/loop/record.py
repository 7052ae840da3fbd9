"""What a decided gated run leaves behind: summary.json, the ledger row, the state's backup in
refs/ditar/<tag> (right after the row, marked as that run's record, so a kill -9 after it still
gets its revert finished), verdict.txt, the champion snapshot of a KEEP, and the revert (with the
candidate's patch) of anything else. A run that damaged the state directory is restored and
recorded as a CRASH; a run during which the branch moved (an amend, a commit on top) or HEAD left
it is a CRASH and the branch goes back on the champion; a file error while recording is a CRASH
with its reason, never a traceback."""
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
    """Record `decision` (act), back the state up, and return the run's exit status. First, git:
    a branch that no longer points at the judged commit makes the run a CRASH."""
    gate.moved = git_moved(gate)
    if gate.moved:
        objections = decision.reasons if decision.status != "KEEP" else ()  # a KEEP's are not objections
        decision = Decision("CRASH", gate.moved, (gate.moved, *objections))
    try:
        rec = act(gate, decision)
    except OSError as exc:  # not even the ledger row could be written
        gate.refusal = f"could not record the run: {oserror_line(exc)}: nothing recorded, nothing reverted"
        unrecorded(gate, "ended without a verdict")
        return Exit.TESTS_FAILED
    gate.decision, gate.verdict = rec.decision, rec.verdict
    gate.summary_lines.extend(rec.notes)
    paths = TagPaths(gate.sess.state_dir)
    # verdict.txt and the patch, written after the record's own backup
    note = backup.save_note(gate.root, paths, backup.settled_message(paths, gate.head, _recorded(gate, rec.decision)),
                            parent=gate.record_backup or (gate.state_watch.commit if gate.state_watch else None))
    if note and not gate.record_backup:
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
        unrecorded(gate, "ended without a verdict")
        return exitstatus
    return finish(gate, _crash(reason), Exit.TESTS_FAILED)


def git_moved(gate: "Gate") -> str | None:
    """How git changed during the run, or None: the judged branch must still point at the judged
    commit, with HEAD on it. An amend or a commit on top would otherwise leave untested code, or a
    discarded commit, on the branch under this run's verdict."""
    if not (gate.head and gate.branch):
        return None
    now = gitops.branch_commit(gate.root, gate.branch)
    if now != gate.head:
        return f"git state changed during the run: {gate.branch} moved from {gate.head[:7]} to {(now or '(deleted)')[:7]}"
    st = gitops.state(gate.root)
    if st.branch != gate.branch:
        where = st.branch or f"a detached HEAD at {str(st.head)[:7]}"
        return f"git state changed during the run: HEAD moved from {gate.branch} to {where}"
    return None


def unrecorded(gate: "Gate", what: str) -> None:
    """A gated run that ends without a ledger row, after its pre-run backup: the state must be as the
    candidate found it (put back if not), and the backup then marks the run as over, so the next run
    does not take it for one that was killed."""
    w = gate.state_watch
    if w is None:
        return
    paths = TagPaths(gate.sess.state_dir)
    if backup.damage(gate.root, paths, w):
        with contextlib.suppress(DitarError, OSError):
            backup.restore(gate.root, paths, w.commit, w.dirs)
    note = backup.save_note(gate.root, paths, backup.settled_message(paths, gate.head, f"{what}: {str(gate.head)[:7]}"),
                            parent=w.commit, always=True)
    if note:
        gate.summary_lines.append(note)


def _recorded(gate: "Gate", d: Decision) -> str:
    """The end of a recorded run's backup subject: "recorded abc1234 DISCARD"."""
    return f"recorded {str(gate.head)[:7]} {d.status}"


def _back_up_record(gate: "Gate", d: Decision) -> str | None:
    """Right after the ledger row: the backup that marks this run as recorded. Returns a note when it
    could not be written (the next run then takes the run for one that never recorded)."""
    if not gitops.state(gate.root).is_repo:
        return None
    try:
        gate.record_backup = backup.mark_settled(gate.root, TagPaths(gate.sess.state_dir), gate.head,
                                                 _recorded(gate, d),
                                                 parent=gate.state_watch.commit if gate.state_watch else None)
    except (DitarError, OSError) as exc:
        return f"ditar: state not backed up to {backup.ref(TagPaths(gate.sess.state_dir))}: {exc}"
    return None


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
            "request_secret": s.request_secret}  # what keyed the run's timed requests


def act(gate: "Gate", d: Decision) -> Recorded:
    """Write summary.json, the ledger row, its backup and verdict.txt; store a KEEP as champion,
    revert the rest.

    The ledger row is the record: a file error before it makes the run a CRASH with that reason;
    one at the ledger itself propagates (OSError), with nothing recorded. The backup follows the row
    at once, before anything else (the revert included): a kill -9 between them leaves a run the next
    one rolls back and judges again; one after them, a recorded run whose revert it finishes."""
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
        "commit": gate.head, "parent": gate.parent or gitops.state(gate.root).parent, "class": cls,
        "description": gate.meta.description if gate.meta else "", "lane": s.cfg.objective_lane,
        "metric": oc.speedup if oc else None, "ci_low": oc.ci_low if oc else None, "ci_high": oc.ci_high if oc else None,
        "quality_pass": passed, "quality_total": total, "peak_vram_gib": peak, "status": d.status,
        "reason": d.reason, "cumulative_class": s.cls, "device": s.resolved_device(), "off_target": int(off),
    })
    verdict = verdict_line(d, lane=s.cfg.objective_lane, speedup=oc.speedup if oc else None,
                           ci_low=oc.ci_low if oc else None, ci_high=oc.ci_high if oc else None,
                           quality_pass=passed, quality_total=total, cls=s.cls, commit=(gate.head or "")[:7],
                           off_target=off)
    note = _back_up_record(gate, d)
    notes: list[str] = [note] if note else []
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
    When the branch moved during the run, it goes back on the judged commit's parent the same way,
    whatever the candidate committed. Returns the summary line that says what happened."""
    base = gate.parent or gitops.state(gate.root).parent
    if base:
        with contextlib.suppress(OSError):  # the patch is a convenience; git still has the commit
            write_text_atomic(run_dir / "candidate.patch", gitops.diff_patch(gate.root, base, gate.head))
    if gate.opts.no_revert:
        return "ditar: --ditar-no-revert: the commit stays in place"
    if gate.moved and base and gate.branch:
        try:
            gitops.put_branch_back(gate.root, gate.branch, base)
            return f"ditar: {gate.branch} put back on {base[:7]}, the judged commit's parent (patch and logs in {run_dir})"
        except DitarError as exc:
            return f"ditar: {gate.branch} not put back: {exc}"
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

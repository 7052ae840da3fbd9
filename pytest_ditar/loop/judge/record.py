"""What a decided gated run leaves behind: summary.json, the ledger row, the state's backup in
refs/ditar/<tag> (right after the row, marked as that run's record, so a kill -9 after it still
gets its revert finished), verdict.txt, the champion snapshot of a KEEP, and the revert (with the
candidate's patch) of anything else. A run that damaged the state directory is restored and
recorded as a CRASH; a run during which the branch moved (an amend, a commit on top) or HEAD left
it is a CRASH and the branch goes back on the champion; so is one during which the repository's git
config or hooks changed (loop.integrity.gitpins); a file error while recording is a CRASH
with its reason, never a traceback. Whatever else fails in the judge after the candidate ran
(another plugin's hook, a bug of ours) is `internal`: a CRASH whose reason starts "internal:" and
names the log with the traceback, recorded and reverted like any CRASH, so no run is left
undecided with its commit in place.

Every function here reads the gate (a `RunFacts`) and returns what it did, as a value (`Outcome`,
notes): the gate keeps it, so no function outside the gate writes the gate."""
from __future__ import annotations

import contextlib
import statistics
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, NamedTuple, Protocol, cast

from pytest_ditar.core import rerun, verdict_json
from pytest_ditar.core.decision import Decision, GuardResult
from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.quality import aggregate
from pytest_ditar.core.verdict_json import Verdict
from pytest_ditar.core.vocabulary import INTERNAL, SCHEMA_VERSION, TAMPERED
from pytest_ditar.hardware.fingerprint import on_target
from pytest_ditar.hardware.profiles import get_profile
from pytest_ditar.loop.integrity import backup, gitpins
from pytest_ditar.loop.run import champion, phases, warmstart
from pytest_ditar.loop.run.options import Exit, RunOptions
from pytest_ditar.loop.run.results import RunResults
from pytest_ditar.loop.run.session import DitarSession
from pytest_ditar.store import space
from pytest_ditar.store.atomic import write_json_atomic, write_text_atomic
from pytest_ditar.store.ledger import Ledger
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.records import LedgerRow
from pytest_ditar.vcs import branches, queries

VERDICT_JSON = "verdict.json"  # in the run directory: the outcome as one document (core.verdict_json.record)
INTERNAL_LOG = "internal.log"  # in the run directory: the traceback behind an "internal:" CRASH


class ClaimedMeta(Protocol):
    """What the record reads of the commit's claim (loop.judge.preflight.ExperimentMeta)."""

    @property
    def claimed_class(self) -> str: ...
    @property
    def description(self) -> str: ...


class RunFacts(Protocol):
    """What the record reads of a gated run (loop.judge.gate.Gate provides it): read only, here."""

    @property
    def sess(self) -> DitarSession: ...
    @property
    def results(self) -> RunResults: ...
    @property
    def opts(self) -> RunOptions: ...
    @property
    def root(self) -> Path: ...
    @property
    def ledger(self) -> Ledger: ...
    @property
    def gated(self) -> bool: ...
    @property
    def verdict(self) -> str | None: ...
    @property
    def refusal(self) -> str | None: ...
    @property
    def head(self) -> str | None: ...
    @property
    def parent(self) -> str | None: ...
    @property
    def branch(self) -> str | None: ...
    @property
    def meta(self) -> ClaimedMeta | None: ...
    @property
    def guards(self) -> list[GuardResult]: ...
    @property
    def champion_commit(self) -> str | None: ...
    @property
    def state_watch(self) -> backup.Watch | None: ...
    @property
    def git_watch(self) -> gitpins.Pins | None: ...


@dataclass(frozen=True)
class Outcome:
    """What a step of the record did, for the gate to keep: the run's exit status; where it was
    decided, its verdict line and the decision recorded; where it was not, why (the refusal);
    and the summary lines it adds."""
    exit: int
    value: Verdict | None = None
    refusal: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def verdict(self) -> str | None:
        return self.value.line() if self.value is not None else None

    @property
    def decision(self) -> Decision | None:
        return self.value.decision if self.value is not None else None


class Recorded(NamedTuple):
    value: Verdict  # what was recorded: the decision (or a CRASH when it could not be stored) and its line's fields
    notes: tuple[str, ...]  # summary lines: what happened to the commit
    backup: str | None = None  # the backup commit that marks the run as recorded (None: not written)

    @property
    def decision(self) -> Decision:
        return self.value.decision


def finish(gate: RunFacts, decision: Decision) -> Outcome:
    """Record `decision` (act), back the state up; the outcome's exit status is the recorded
    decision's (options.Exit), whatever pytest counted as failed. First, git: a branch that no
    longer points at the judged commit makes the run a CRASH."""
    moved = git_moved(gate)
    # the repository's git config or hooks written during the run: code that git would run (loop.integrity.gitpins)
    why = moved or gitpins.changed_during(gate.root, gate.git_watch)
    if why:
        decision = Decision.crash(why, TAMPERED, decision.objections())  # a KEEP's reasons are no objections
    try:
        rec = act(gate, decision, moved)
    except OSError as exc:  # not even the ledger row could be written
        said = (space.full_refusal(exc, "recording the run") if space.is_full(exc)
                else f"could not record the run: {oserror_line(exc)}: nothing recorded, nothing reverted")
        return Outcome(Exit.REFUSED, refusal=said,
                       notes=unrecorded(gate, "ended without a verdict"))
    notes = list(rec.notes)
    paths = TagPaths(gate.sess.state_dir)
    # verdict.txt and the patch, written after the record's own backup
    note = _after_row("backup", lambda: backup.save_note(
        gate.root, paths, backup.settled_message(paths, gate.head, _recorded(gate, rec.decision)),
        parent=rec.backup or (gate.state_watch.commit if gate.state_watch else None)))
    if note and not rec.backup:
        notes.append(note)
    if gate.opts.phase == phases.DECIDE:
        notes += filter(None, [_after_row("phase record", lambda: phases.consume(gate.sess))])
    return Outcome(Exit.of_verdict(rec.decision.status), rec.value, notes=tuple(notes))


def internal(gate: RunFacts, what: str, trace: str | None) -> Outcome | None:
    """Something in the judge failed after the candidate ran: `what` (one line) with `trace`. The
    run ends as a CRASH "internal: <what> (traceback in <run dir>/internal.log)", recorded and
    reverted like any CRASH; returns its outcome. None where it is not this run's to decide:
    no gated run, phase 1 of a two-phase gate (it decides nothing), a run already decided or
    refused.

    The full record is tried first; where that fails too (the bug may sit in it), a bare one: a
    ledger row of plain fields, its backup, the verdict line and the revert. Only a ledger that
    cannot be written at all leaves the run unrecorded (DITAR REFUSED, saying so)."""
    if not gate.gated or gate.verdict or gate.refusal or gate.opts.phase == phases.QUALITY:
        return None
    log = _internal_log(gate, what, trace)
    d = Decision.crash(f"internal: {what} ({log})", INTERNAL)
    try:
        return finish(gate, d)
    except Exception:  # noqa: BLE001 - the full record failed as well: the bare one below
        _internal_log(gate, "the full record of the internal CRASH failed too", traceback.format_exc())
    try:
        rec = _bare_record(gate, d)
    except Exception as exc:  # noqa: BLE001 - the ledger itself cannot be written
        refusal = (f"could not record the run ({d.reason}): "
                   f"{oserror_line(exc) if isinstance(exc, OSError) else exc}: nothing recorded, nothing reverted")
        notes: tuple[str, ...] = ()
        with contextlib.suppress(Exception):
            notes = unrecorded(gate, "ended without a verdict")
        return Outcome(Exit.REFUSED, refusal=refusal, notes=notes)
    return Outcome(Exit.CRASH, rec.value, notes=rec.notes)


def _internal_log(gate: RunFacts, what: str, trace: str | None) -> str:
    """Append `what` and its traceback to the run's internal.log; the words that say where it is."""
    try:
        run_dir = gate.sess.run_dir()
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / INTERNAL_LOG
        with open(path, "a") as fh:
            fh.write(f"{what}\n{trace or '(no traceback)'}\n")
        return f"traceback in {path}"
    except Exception as exc:  # noqa: BLE001 - a full disk must not hide the verdict
        return f"traceback not written: {oserror_line(exc) if isinstance(exc, OSError) else exc}"


def _bare_record(gate: RunFacts, d: Decision) -> Recorded:
    """A CRASH recorded from plain fields only, for when the full record raised."""
    s = gate.sess
    meta = gate.meta
    off = off_target(s)
    try:
        device = s.resolved_device()
    except Exception:  # noqa: BLE001
        device = str(s.device)
    d = replace(d, judged=rerun.judged(d.status, d.causes),
                unjudged=rerun.unjudged_cause(d.status, d.causes, d.lane_cause))
    verdict = Verdict(d, s.cfg.objective_lane, judged_class=s.judged_class, commit=(gate.head or "")[:7],
                      off_target=off, sandbox_off=not s.cfg.sandboxed)
    notes = _append_row(gate, {
        "commit": gate.head, "parent": gate.parent, "class": meta.claimed_class if meta else "",
        "description": meta.description if meta else "", "lane": s.cfg.objective_lane, "status": d.status,
        "reason": d.reason, "cumulative_class": s.judged_class, "device": device, "off_target": int(off),
        "sandbox": s.cfg.sandbox, "judged": int(d.judged), "unjudged": d.unjudged})
    moved = None
    with contextlib.suppress(Exception):  # where the branch went, for the revert; the full record may have failed here
        moved = git_moved(gate)
    settled, mark = _settle_recorded(gate, verdict, s.run_dir(), moved)
    return Recorded(verdict, tuple(notes + settled), mark)


def _append_row(gate: RunFacts, row: dict[str, Any]) -> list[str]:
    """The ledger row, the record itself. ledger.jsonl is written before results.tsv: where only
    the TSV failed, the row stands (the next append rewrites the TSV) and this returns a note;
    where the row did not land, the error propagates."""
    before = len(gate.ledger.rows())
    try:
        gate.ledger.append(row)
    except Exception as exc:  # re-raised below unless the row landed
        try:
            rows = gate.ledger.rows()
        except Exception:  # noqa: BLE001
            raise exc from None
        if not (len(rows) == before + 1 and rows[-1].commit == row.get("commit")):
            raise
        return [f"ditar: ledger row recorded, but {exc}"]
    return []


def _after_row(step: str, fn: Callable[[], str | None]) -> str | None:
    """A step after the ledger row: the run is recorded, so a failure here is a summary line."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001
        return f"ditar: {step} failed after the ledger row: {type(exc).__name__}: {exc}"


def damaged(gate: RunFacts, harm: str, exitstatus: int) -> Outcome:
    """The run changed the state directory: restore it from the backup taken before the candidate
    ran (not the ref, which the candidate can move too), then record the run as a CRASH."""
    paths = TagPaths(gate.sess.state_dir)
    try:
        w = gate.state_watch
        backup.restore(gate.root, paths, w.commit if w else None, w.dirs if w else ())
    except (DitarError, OSError) as exc:
        return Outcome(Exit.REFUSED, refusal=(
            f"state directory damaged during the run ({harm}) and not restored ({exc}): nothing recorded, "
            f"nothing reverted; restore {paths.dir} or start a new tag"))
    reason = f"state directory damaged during the run ({harm}): restored from {backup.ref(paths)}"
    if exitstatus == Exit.INTERRUPTED:
        return Outcome(exitstatus, refusal=f"interrupted: {reason}; no verdict recorded, nothing reverted",
                       notes=unrecorded(gate, "ended without a verdict"))
    return finish(gate, Decision.crash(reason, TAMPERED))


def git_moved(gate: RunFacts) -> str | None:
    """How git changed during the run, or None: the judged branch must still point at the judged
    commit, with HEAD on it. An amend or a commit on top would otherwise leave untested code, or a
    discarded commit, on the branch under this run's verdict."""
    if not (gate.head and gate.branch):
        return None
    now = branches.branch_commit(gate.root, gate.branch)
    if now != gate.head:
        return (f"git state changed during the run: {gate.branch} moved from {gate.head[:7]} "
                f"to {(now or '(deleted)')[:7]}")
    st = queries.state(gate.root)
    if st.branch != gate.branch:
        where = st.branch or f"a detached HEAD at {str(st.head)[:7]}"
        return f"git state changed during the run: HEAD moved from {gate.branch} to {where}"
    return None


def unrecorded(gate: RunFacts, what: str) -> tuple[str, ...]:
    """A gated run that ends without a ledger row, after its pre-run backup: the state must be as the
    candidate found it (put back if not), and the backup then marks the run as over, so the next run
    does not take it for one that was killed. Returns the summary lines it adds."""
    w = gate.state_watch
    if w is None:
        return ()
    paths = TagPaths(gate.sess.state_dir)
    if backup.damage(gate.root, paths, w):
        with contextlib.suppress(DitarError, OSError):
            backup.restore(gate.root, paths, w.commit, w.dirs)
    note = backup.save_note(gate.root, paths, backup.settled_message(paths, gate.head, f"{what}: {str(gate.head)[:7]}"),
                            parent=w.commit, always=True)
    return (note,) if note else ()


def _recorded(gate: RunFacts, d: Decision) -> str:
    """The end of a recorded run's backup subject: "recorded abc1234 DISCARD"."""
    return f"recorded {str(gate.head)[:7]} {d.status}"


def _back_up_record(gate: RunFacts, d: Decision) -> tuple[str | None, str | None]:
    """Right after the ledger row: the backup that marks this run as recorded, and a note when it
    could not be written (the next run then takes the run for one that never recorded)."""
    if not queries.state(gate.root).is_repo:
        return None, None
    try:
        return backup.mark_settled(gate.root, TagPaths(gate.sess.state_dir), gate.head, _recorded(gate, d),
                                   parent=gate.state_watch.commit if gate.state_watch else None), None
    except (DitarError, OSError) as exc:
        return None, f"ditar: state not backed up to {backup.ref(TagPaths(gate.sess.state_dir))}: {exc}"


def finish_revert(root: Path, rows: list[LedgerRow], st: queries.RepoState,
                  no_revert: bool) -> tuple[str | None, str | None]:
    """Finish a revert that a kill -9 interrupted (the ledger's last row is DISCARD/CRASH for HEAD),
    with reset --keep, on a tree the gate has found clean. Returns (a refusal when git will not,
    the summary line of a revert finished)."""
    if not (rows and rows[-1].commit == st.head and rows[-1].status in ("DISCARD", "CRASH")) \
            or no_revert:
        return None, None
    try:
        branches.revert_to_parent(root, str(st.head))
    except DitarError as exc:
        return (f"HEAD {str(st.head)[:7]} is recorded as {rows[-1].status} but its revert cannot be finished: "
                f"{exc}"), None
    return None, f"ditar: recovered: finished the revert of {str(st.head)[:7]} recorded as {rows[-1].status}"


def oserror_line(exc: OSError) -> str:
    """One line for a file error: "Is a directory: /path" (the target, not a temp file's name)."""
    where = exc.filename2 or exc.filename
    return f"{exc.strerror}: {where}" if exc.strerror and where else (exc.strerror or str(exc) or type(exc).__name__)


def _summary(gate: RunFacts, d: Decision) -> dict[str, Any]:
    s, r = gate.sess, gate.results
    return {"schema_version": SCHEMA_VERSION, "decision": d.status, "reason": d.reason, "reasons": list(d.reasons),
            "commit": gate.head, "judged": d.judged, "unjudged": d.unjudged, "rerun_of": d.rerun_of,
            "class": gate.meta.claimed_class if gate.meta else "", "cumulative_class": s.judged_class,
            "guards": [g.__dict__ for g in gate.guards],
            "quality": {k: {"passed": q.passed, "failures": list(q.failures), **q.metrics.as_dict()}
                        for k, q in r.quality.items()},
            "lanes": r.lanes_dict(),
            "timings": s.clock.as_dict(),
            "request_secret": s.request_secret,  # what keyed the run's timed requests
            "champion": gate.champion_commit,  # what the lanes were timed against (dit-ar compare pairs on it)
            "fingerprint": _fingerprint(s)}


def _fingerprint(sess: DitarSession) -> dict[str, object] | None:
    """The run's hardware fingerprint (the off-target check collected it already); None where no
    worker could say (a candidate that crashed its worker at start-up)."""
    try:
        return sess.fingerprint().to_dict()
    except Exception:  # noqa: BLE001 - a convenience for `dit-ar compare`: the verdict stands without it
        return None


def act(gate: RunFacts, d: Decision, moved: str | None = None) -> Recorded:
    """Write summary.json, the ledger row, its backup and verdict.txt; store a KEEP as champion,
    revert the rest.

    The ledger row is the record: a file error before it makes the run a CRASH with that reason;
    one at the ledger itself, or too little room on the disk for the record (store.space), propagates
    (OSError), with nothing recorded. The backup follows the row
    at once, before anything else (the revert included): a kill -9 between them leaves a run the next
    one rolls back and judges again; one after them, a recorded run whose revert it finishes.
    `moved`: how git changed during the run (git_moved), which decides how the revert puts the
    branch back."""
    s = gate.sess
    space.ensure_room(gate.root, s.state_dir)  # a disk filled during the run: refused before a byte is written
    run_dir = s.run_dir()
    claimed_class = gate.meta.claimed_class if gate.meta else ""
    d, key = _judgment(gate, d)
    try:
        write_json_atomic(run_dir / "summary.json", _summary(gate, d), indent=1, default=str)
        if d.status == "KEEP":
            champion.store(s, gate.results, cast(str, gate.head), claimed_class)  # a judged run: its commit
            s.keep_compilations()  # its compilations join the champion's cache once its workers end
        warmstart.hand_over(TagPaths(s.state_dir))  # backed up with the row: the next run's zygote
    except OSError as exc:
        d = Decision.crash(f"could not record the run: {oserror_line(exc)}", INTERNAL)
        with contextlib.suppress(OSError):
            write_json_atomic(run_dir / "summary.json", _summary(gate, d), indent=1, default=str)
    obj = gate.results.lanes.get(s.cfg.objective_lane)
    oc = obj.outcome if obj is not None else None
    passed, total, _ = aggregate(list(gate.results.quality.values()))
    peak = max([oc.peak_vram_gib for oc in gate.results.outcomes() if oc.peak_vram_gib is not None], default=None)
    off = off_target(s)
    verdict = Verdict(d, s.cfg.objective_lane, speedup=oc.speedup if oc else None,
                      ci_low=oc.ci_low if oc else None, ci_high=oc.ci_high if oc else None,
                      quality_pass=passed, quality_total=total, judged_class=s.judged_class,
                      commit=(gate.head or "")[:7], off_target=off, sandbox_off=not s.cfg.sandboxed)
    notes = _append_row(gate, {
        "commit": gate.head, "parent": gate.parent or queries.state(gate.root).parent, "class": claimed_class,
        "description": gate.meta.description if gate.meta else "", "lane": s.cfg.objective_lane,
        "metric": oc.speedup if oc else None, "ci_low": oc.ci_low if oc else None,
        "ci_high": oc.ci_high if oc else None,
        "quality_pass": passed, "quality_total": total, "peak_vram_gib": peak, "status": d.status,
        "reason": d.reason, "cumulative_class": s.judged_class, "device": s.resolved_device(), "off_target": int(off),
        "sandbox": s.cfg.sandbox, "patch": key, "judged": int(d.judged), "rerun_of": d.rerun_of,
        "unjudged": d.unjudged, "net": oc.net if oc else None,
    })
    settled, mark = _settle_recorded(gate, verdict, run_dir, moved)
    return Recorded(verdict, tuple(notes + settled), mark)


def _judgment(gate: RunFacts, d: Decision) -> tuple[Decision, str]:
    """`d` with whether it judged the change and the run it re-runs (core.rerun), and the change's key."""
    parent = gate.parent or queries.state(gate.root).parent
    key = rerun.patch_key(queries.diff_patch(gate.root, parent, gate.head)) if parent and gate.head else ""
    rows = gate.ledger.rows()
    return replace(d, judged=rerun.judged(d.status, d.causes),
                   unjudged=rerun.unjudged_cause(d.status, d.causes, d.lane_cause),
                   rerun_of=rerun.rerun_of(rows, key, parent or "")), key


def _markdown(gate: RunFacts, verdict: Verdict, run_dir: Path) -> str:
    """summary.md: the verdict and the lanes with throughput units."""
    suite = gate.sess.suite
    shapes = {ln.name: (ln.batch, ln.steps or suite.pipeline.steps) for ln in suite.lanes}
    medians = {k: statistics.median(lr.measurement.samples) for k, lr in gate.results.lanes.items()
               if lr.measurement.samples}
    return verdict_json.markdown(verdict_json.record(verdict, 0, lanes=gate.results.lanes_dict(), run_dir=str(run_dir)),
                                 shapes, medians)


def _settle_recorded(gate: RunFacts, verdict: Verdict, run_dir: Path,
                     moved: str | None) -> tuple[list[str], str | None]:
    """After the ledger row: its backup, verdict.txt and verdict.json, and the revert of anything but
    a KEEP. Each step's failure is a note; none may leave a recorded run unreverted. Returns the
    notes and the backup commit that marks the run as recorded (None where it was not written)."""
    d = verdict.decision
    try:
        mark, note = _back_up_record(gate, d)
    except Exception as exc:  # noqa: BLE001 - after the row: a note, as _after_row words it
        mark, note = None, f"ditar: backup failed after the ledger row: {type(exc).__name__}: {exc}"
    notes = [note]
    try:
        write_text_atomic(run_dir / "verdict.txt", verdict.line() + "\n")
        doc = verdict_json.record(verdict, Exit.of_verdict(d.status), lanes=gate.results.lanes_dict(),
                                  run_dir=str(run_dir))
        write_json_atomic(run_dir / VERDICT_JSON, doc, indent=1, default=str)
    except OSError as exc:  # recorded in the ledger already: a lost copy of the outcome is a note
        notes.append(f"ditar: verdict.txt or {VERDICT_JSON} not written: {oserror_line(exc)}")
    try:
        write_text_atomic(run_dir / "summary.md", _markdown(gate, verdict, run_dir))
    except Exception as exc:  # noqa: BLE001 - a convenience for CI; never in the way of the revert below
        notes.append(f"ditar: summary.md not written: {type(exc).__name__}: {exc}")
    if d.status != "KEEP":
        notes.append(_after_row("revert", lambda: revert(gate, run_dir, moved)))
    return [n for n in notes if n], mark


def revert(gate: RunFacts, run_dir: Path, moved: str | None = None) -> str:
    """Save the candidate's patch beside its logs, then `git reset --keep` to the parent: local
    changes survive, and where git refuses, the commit stays and the line says how to finish.
    When the branch moved during the run, it goes back on the judged commit's parent the same way,
    whatever the candidate committed. Returns the summary line that says what happened."""
    head = cast(str, gate.head)  # a judged run: its commit
    base = gate.parent or queries.state(gate.root).parent
    if base:
        with contextlib.suppress(Exception):  # the patch is a convenience; git still has the commit
            write_text_atomic(run_dir / "candidate.patch", queries.diff_patch(gate.root, base, head))
    if gate.opts.no_revert:
        return "ditar: --ditar-no-revert: the commit stays in place"
    if moved and base and gate.branch:
        try:
            branches.put_branch_back(gate.root, gate.branch, base)
            return (f"ditar: {gate.branch} put back on {base[:7]}, the judged commit's parent "
                    f"(patch and logs in {run_dir})")
        except DitarError as exc:
            return f"ditar: {gate.branch} not put back: {exc}"
    try:
        branches.revert_to_parent(gate.root, head)
        return f"ditar: reverted {head[:7]} (patch and logs in {run_dir})"
    except DitarError as exc:
        return f"ditar: not reverted: {exc}"
    except Exception as exc:  # noqa: BLE001 - still recorded: say how to finish by hand
        return f"ditar: not reverted ({type(exc).__name__}: {exc}): git reset --keep {str(base)[:7]} finishes it"


def off_target(sess: DitarSession) -> bool:
    try:
        return not on_target(sess.fingerprint(), get_profile(sess.cfg.target))
    except Exception:  # noqa: BLE001
        return True

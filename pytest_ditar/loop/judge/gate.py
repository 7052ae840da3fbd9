"""The gate: decides whether a run is a full gated run, checks guards before any candidate
code runs, and at session end turns results into KEEP / DISCARD / CRASH with git actions.

It sees plain data only (RunOptions, collected ids, test outcomes) and returns what pytest must
do (an exit status, lines to print); pytest itself stays in pytest_ditar.plugin. Every refusal a
gated run can end in is one check of loop.judge.preflight's REFUSAL_CHAIN, made in order before any
candidate code runs; the worker start-up is loop.perf.startup's; what a decided run writes lives in
record.py, which returns what it did (record.Outcome) for the gate to keep. No function outside
this class writes its attributes (tests/unit/loop/test_gate_shape.py). What the run produced is
the gate's `results` (loop.run.results.RunResults); the decision reads them frozen (`_decide`).
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Iterable, cast

from pytest_ditar.config.semantic import class_refusal
from pytest_ditar.core import devstate, guard, regression
from pytest_ditar.core.decision import (
    Decision,
    GuardResult,
    QualityOutcome,
    RunError,
    decide,
    kept_rows,
)
from pytest_ditar.core.errors import CandidateError, DitarError
from pytest_ditar.core.quality import aggregate, check_contract, compute_metrics, margins
from pytest_ditar.core.verdict_json import Verdict
from pytest_ditar.core.vocabulary import REPRODUCING_CLASSES
from pytest_ditar.hardware.fingerprint import target_header
from pytest_ditar.hardware.profiles import get_profile
from pytest_ditar.loop.integrity import backup, gitpins, guards
from pytest_ditar.loop.judge import record
from pytest_ditar.loop.judge.baseline import create_baseline, manifest_summary
from pytest_ditar.loop.judge.preflight import ExperimentMeta, Preflight, Refusal, ReportOnly
from pytest_ditar.loop.perf import startup
from pytest_ditar.loop.run import champion, holdout, phases, tryout
from pytest_ditar.loop.run.classes import judged_class_of, read_claim
from pytest_ditar.loop.run.options import Exit, RunOptions
from pytest_ditar.loop.run.results import Frozen, RunResults
from pytest_ditar.loop.run.session import DitarSession
from pytest_ditar.loop.run.table import run_table
from pytest_ditar.loop.run.testlog import TestLog
from pytest_ditar.loop.share.remote import missing_state
from pytest_ditar.store import space
from pytest_ditar.store.ledger import Ledger
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.snapshot import MANIFEST
from pytest_ditar.vcs import queries

# a refused run whose champion (or twin) failed in its role: what to do
REFERENCE_NEXT = ("ditar: next: the champion's own code failed in its role, not the candidate's: nothing was "
                  "charged to it. Run `dit-ar doctor`, then the same command once more; if it fails again, the "
                  "champion's commit no longer builds on this host (`dit-ar status` names it): start a new tag from it")


class Gate:
    def __init__(self, sess: DitarSession, opts: RunOptions, results: RunResults):
        self.sess = sess
        self.opts = opts
        self.results = results  # what the run produces; the session reports its failures into it too
        self.root = sess.cfg.root
        self.ledger = Ledger(sess.state_dir)
        self.items_collected: set[str] = set()
        self.lanes_collected: set[str] = set()
        self.gated = False  # a full gate on a candidate commit: decides and acts
        self.guards: list[GuardResult] = []
        self.meta: ExperimentMeta | None = None
        self.decision: Decision | None = None
        self.verdict: str | None = None
        self.result: Verdict | None = None  # the recorded outcome as a value: the verdict line is rendered from it
        self.refusal: str | None = None
        self.refused_class = False  # the refusal is the class gate's: nothing to fix, only a class to choose
        self.head: str | None = None  # the commit judged
        self.try_outcome: tryout.TryOutcome | None = None  # `dit-ar try`'s, once it ends
        self.parent: str | None = None  # its parent, the champion: where a revert puts the branch
        self.branch: str | None = None  # the research branch it was judged on
        self.baseline_commit: str | None = None
        self.champion_commit: str | None = None  # the last KEEP, else the baseline commit
        self.summary_lines: list[str] = []
        self.state_watch: backup.Watch | None = None  # the state directory as the candidate found it
        # the repository's git config and hooks then (loop.integrity.gitpins)
        self.git_watch: gitpins.Pins | None = None
        self.state_harm: str | None = None  # what the run did to it, once seen (and put back) mid-run
        self.test_log = TestLog()  # tests.log's reports, each failure text once
        self.guard_line: str | None = None  # a guard's last line (DITAR GUARD: PASS/FAIL)
        self.guard_failures: list[str] = []  # why it failed, in order (core.guard.failures)
        self.start_failures: list[str] = []  # early starts that failed (loop.perf.startup): built again when needed
        if opts.guard is not None:  # a guard writes nothing under the state dir (its roles' code is the judge's)
            import tempfile

            # the workers' logs and failure images: kept for the user only where the guard FAILs
            sess.run_dir(use=Path(tempfile.mkdtemp(prefix="ditar-guard-run-")))

    # ---- header ---------------------------------------------------------------------------
    def header(self) -> list[str]:
        s = self.sess
        lines = [f"ditar: suite={s.suite.name} items={len(s.suite.corpus)} "
                 f"lanes={','.join(ln.name for ln in s.suite.lanes)} "
                 f"objective={s.cfg.objective_lane} tag={s.tag} state={s.state_dir}"]
        if self.opts.xdist_controller:
            # The controller runs no candidate: fingerprinting it would only start CUDA here before
            # the workers spawn. Each worker's device line follows once it has collected.
            lines.append(f"ditar: device=one per xdist worker (gwN -> cuda:N where CUDA is) target={s.cfg.target}")
            return lines
        return [*lines, "ditar: " + self.device_line()]

    def device_line(self) -> str:
        """Device, target and whether they match (also what an xdist worker reports for itself)."""
        s = self.sess
        try:
            return target_header(s.fingerprint(), get_profile(s.cfg.target))
        except Exception as exc:  # noqa: BLE001 - a header must never break a run
            return f"device={s.resolved_device()} target={s.cfg.target} (fingerprint unavailable: {exc})"

    # ---- collection -----------------------------------------------------------------------
    def collected(self, item_ids: Iterable[str], lane_names: Iterable[str]) -> None:
        """What will run (after -k/-m deselection): quality tests' corpus ids, perf tests' lanes."""
        self.items_collected.update(item_ids)
        self.lanes_collected.update(lane_names)

    def full_collection(self) -> bool:
        want = {it.id for it in self.sess.suite.corpus}
        if self.opts.phase == phases.QUALITY:  # phase 1 of a two-phase gate: every corpus item, no lane
            return want <= self.items_collected
        if self.opts.phase == phases.DECIDE:  # phase 2: the objective lane; the items come from phase 1's record
            return self.sess.cfg.objective_lane in self.lanes_collected
        return want <= self.items_collected and self.sess.cfg.objective_lane in self.lanes_collected

    # ---- baseline -------------------------------------------------------------------------
    def run_baseline(self, echo: Callable[[str], None]) -> int:
        """Store the baseline instead of running tests; `echo` shows its manifest's summary."""
        settled = backup.settle(self.root, TagPaths(self.sess.state_dir))  # a killed run's changes go first
        if settled.line:
            echo(settled.line)
        if settled.busy or settled.error:
            self.refusal = f"baseline not stored: {settled.busy or settled.error}"
            return Exit.TESTS_FAILED
        try:
            path = create_baseline(self.sess, force=self.opts.force)
        except (DitarError, CandidateError) as exc:
            self.refusal = f"baseline not stored: {exc}"
            return Exit.TESTS_FAILED
        echo(manifest_summary(path))
        return Exit.OK

    # ---- before the candidate runs --------------------------------------------------------
    def before_tests(self) -> bool:
        """Return False when the candidate must not run (a refused or guarded run)."""
        with self.sess.clock.span("gate.guards"):  # state verification, git and the guards, timed as one
            return self._before_tests()

    def _before_tests(self) -> bool:
        """The refusal chain (loop.judge.preflight), then what a gated run starts with (`_go`)."""
        records = self.opts.gate_demanded or not (self.opts.try_only or self.opts.guard is not None)
        full = space.shortage(self.root, self.sess.state_dir) if records else None
        if full:  # before git writes its index or the run its folder: a run that may record needs the room
            self.refusal = full
            return False
        pre = Preflight(self.sess, self.opts, self.ledger, full=self.full_collection(),
                        items=len(self.items_collected))
        stop = pre.run()
        self.summary_lines += pre.notes
        self.guards += pre.guards
        self.head, self.parent, self.branch, self.meta = pre.head, pre.parent, pre.branch, pre.meta
        self.baseline_commit, self.champion_commit = pre.baseline_commit, pre.champion_commit
        if isinstance(stop, Refusal):
            self.refusal = stop.reason
            return False
        if isinstance(stop, ReportOnly):
            return self._report_mode(pre.st)
        return self._go(pre.base)

    def _go(self, base: Any) -> bool:
        """Every check passed: the run is gated. The guards that judge (a DISCARD, not a refusal)
        run now; then the watches, the memory cap and the workers' builds."""
        s, meta = self.sess, cast(ExperimentMeta, self.meta)
        s.judge_as(judged_class_of(self._kept_classes(), meta.claim))
        self.guards += guards.check_guards(self.root, mutable_paths=s.cfg.mutable_paths, fixed_paths=s.cfg.fixed_paths,
                                           recorded_hashes=base.manifest.get("fixed_paths", {}),
                                           baseline_commit=self.baseline_commit)
        self.guards.append(self._class_gate(s.judged_class))
        self.gated = True
        s.run_dir()  # exists before any candidate code runs
        # the state as the candidate finds it
        self.state_watch = backup.watch(self.root, TagPaths(s.state_dir), str(self.head))
        self.git_watch = gitpins.pins(self.root)  # and the repository's git config and hooks
        if any(not g.ok for g in self.guards):
            with contextlib.suppress(OSError):  # tests.log, as on any DISCARD: why no test ran
                (s.run_dir() / "tests.log").write_text("no test ran; the candidate never ran:\n" + "".join(
                    f"guard {g.name}: {g.reason}\n" for g in self.guards if not g.ok))
            return False
        self.bind_memory_budget()
        if self.opts.phase == phases.DECIDE:
            refusal = phases.load_quality(self)
            if refusal:
                self.refuse(refusal)  # nothing to decide on: refuse, record nothing
                return False
        self.start_failures += startup.start_builds(s, self.opts, self.lanes_collected, self.head,
                                                    self.champion_commit, self.baseline_commit)
        return True

    def refuse(self, reason: str) -> None:
        """Refuse the run: nothing is decided or recorded, and pytest exits with a usage error."""
        self.refusal = reason
        self.gated = False

    def _report_mode(self, st: queries.RepoState) -> bool:
        """A partial or non-research run: results are reported, nothing is recorded or reverted."""
        if self.opts.guard is not None and not TagPaths(self.sess.state_dir).baseline.joinpath(MANIFEST).is_file():
            # a fresh clone: name the command that brings it
            self.refusal = missing_state(self.sess.tag, self.sess.state_dir)
            return False
        if self.items_collected or self.lanes_collected:
            try:
                self.sess.baseline()
            except DitarError as exc:
                self.refusal = str(exc)
                return False
        if guards.config_refusal(self.sess.cfg, st.toplevel):  # any config may report
            self.summary_lines.append(f"ditar: report only: config {self.sess.cfg.path} is not the repository's; "
                                      "nothing recorded")
        try:
            claim = read_claim(self.opts.claimed_class, None)  # a report names its class by the option alone
        except ValueError as exc:
            self.refusal = str(exc)
            return False
        self.sess.judge_as(judged_class_of(self._kept_classes(), claim))
        if self.items_collected:  # a smoke check: the class gate of a gated run, same words
            self.refusal = class_refusal(self.sess.cfg, self.sess.judged_class)
            self.refused_class = self.refusal is not None
        return self.refusal is None

    def _kept_classes(self) -> list[str]:
        rows = self.ledger.rows()
        return [r.cls for r in kept_rows(rows)]

    def _class_gate(self, judged_class: str) -> GuardResult:
        why = class_refusal(self.sess.cfg, judged_class)  # the smoke check refuses with the same words
        return GuardResult("class_gate", why is None, why or "")

    def claimed_class(self) -> str | None:
        """The class the output audit holds timed outputs to: the commit's claim in a gated run; None
        elsewhere (the lanes take the judged class)."""
        return self.meta.claimed_class if self.gated and self.meta else None

    def bind_memory_budget(self) -> None:
        """Workers built from now on cap their allocator at the target's memory: a candidate that
        only fits on a bigger card raises OOM (a CRASH) instead of passing."""
        self.sess.cap_memory(self.vram_budget_gib())

    def vram_budget_gib(self) -> float | None:
        if self.sess.cfg.vram_budget_gib:
            return self.sess.cfg.vram_budget_gib
        try:
            return get_profile(self.sess.cfg.target).memory_gib
        except Exception:  # noqa: BLE001
            return None

    def prestart(self) -> None:
        """The candidate's worker, started at configure time (loop.perf.startup)."""
        failed = startup.prestart(self.sess, self.opts)
        self.start_failures += [failed] if failed else []

    def follow(self, judged_class: str | None, run_dir: str | None, gated: bool) -> None:
        """An xdist worker takes the controller's go-ahead: its (cumulative) class judges every item,
        its run dir takes the logs, and a gated run caps the memory of the workers built here."""
        if judged_class:
            self.sess.judge_as(judged_class)
        if run_dir:
            self.sess.run_dir(use=Path(run_dir))
        if gated:
            self.bind_memory_budget()

    # ---- after the tests ------------------------------------------------------------------
    def finish(self, exitstatus: int) -> int:
        """Decide and act on a gated run; return the run's exit status (pytest's `exitstatus` or
        what replaces it)."""
        if self.opts.baseline:
            return Exit.OK if self.refusal is None else Exit.TESTS_FAILED
        reference_error = self.results.reference_error
        if reference_error and not self.refusal:  # the judge's failure: nothing judged, nothing charged
            self.refusal = f"{reference_error}; nothing judged, recorded or reverted"
        if not self.gated or reference_error:
            self._note(record.unrecorded(self, "ended without a verdict"))  # refused after its pre-run backup
            if self.refusal:
                self._note([REFERENCE_NEXT] if reference_error else [])
                return Exit.REFUSED
            if self.opts.guard is not None and not self.refusal and exitstatus in (Exit.OK, Exit.TESTS_FAILED):
                return self._guard()
            if self.opts.try_only and not self.refusal and exitstatus in (Exit.OK, Exit.TESTS_FAILED):
                # `dit-ar try`: its outcome line, status and note
                self.try_outcome = tryout.outcome_of(self.sess, self.results)
                tryout.note(self.sess.state_dir, self.try_outcome, self.head, self.opts.description)
                return self.try_outcome.exit_status
            return exitstatus
        with self.sess.clock.span("gate.checks"):  # tests.log, then the state as the candidate left it
            self.test_log.close(self.sess.run_dir())
            harm = self.state_harm or backup.damage(self.root, TagPaths(self.sess.state_dir), self.state_watch)
        if harm:  # before anything else: the candidate may have taken the ledger with it
            return self.keep(record.damaged(self, harm, exitstatus))
        if exitstatus in (Exit.INTERRUPTED, Exit.INTERNAL_ERROR):
            # A harness failure is not the candidate's fault: no verdict, no git action.
            self.refusal = f"{Exit(exitstatus).name.lower().replace('_', ' ')}: no verdict recorded, nothing reverted"
            self._note(record.unrecorded(self, "ended without a verdict"))
            return exitstatus  # pytest's own code: the operator's Ctrl-C, or pytest's error
        if self.opts.phase == phases.QUALITY:
            # phase 1: record for the decide phase; no verdict, no git action (pytest's code: 0 or 1 goes on)
            self.summary_lines.append(phases.record_quality(self))
            self._note(record.unrecorded(self, "quality phase recorded"))
            return exitstatus
        with self.sess.clock.span("gate.decide"):  # the statistics (the holdout books its own span)
            decision = self._decide()
        with self.sess.clock.span("gate.checks"):  # the holdout ran candidate code too
            harm = backup.damage(self.root, TagPaths(self.sess.state_dir), self.state_watch)
        with self.sess.clock.span("gate.record"):  # summary.json, the ledger row, the backup, the revert
            outcome = record.damaged(self, harm, exitstatus) if harm else record.finish(self, decision)
        return self.keep(outcome)

    def internal(self, what: str, trace: str | None) -> int | None:
        """Something in the judge failed after the candidate ran: a CRASH (record.internal); the exit
        status, or None where it is not this run's to decide."""
        outcome = record.internal(self, what, trace)
        return None if outcome is None else self.keep(outcome)

    def keep(self, outcome: record.Outcome) -> int:
        """What the record did, kept: the verdict line and decision, or the refusal; its summary lines."""
        if outcome.value is not None:
            self.result, self.decision, self.verdict = outcome.value, outcome.decision, outcome.verdict
        if outcome.refusal is not None:
            self.refusal = outcome.refusal
        self._note(outcome.notes)
        return outcome.exit

    def _note(self, notes: Iterable[str]) -> None:
        self.summary_lines.extend(notes)

    def _guard(self) -> int:
        """A guard's outcome: 0 where nothing regressed, 1 otherwise (core.guard)."""
        s, r = self.sess, self.results
        lanes = r.outcomes()
        fails = guard.failures([(k, q.passed) for k, q in r.quality.items()], lanes, sorted(self.lanes_collected),
                               [str(e) for e in _dedupe(r.errors)], float(self.opts.guard or 0.0))
        self.guard_line = guard.line(fails, lanes, float(self.opts.guard or 0.0))
        self.guard_failures = fails
        self.summary_lines += [f"ditar: guard: {f}" for f in fails]
        if fails:  # kept to explain the FAIL; a PASS's folder is removed when the run ends (drop_guard_dir)
            self.summary_lines.append(f"ditar: guard: workers' logs and any failure images in {s.run_dir()} "
                                      "(outside the state dir; remove it when done)")
        return Exit.TESTS_FAILED if fails else Exit.OK

    def drop_guard_dir(self) -> None:
        """A guard's temporary run folder, once its workers' logs are in, unless it explains a FAIL."""
        if self.opts.guard is not None and not self.guard_failures:
            import shutil

            shutil.rmtree(self.sess.run_dir(), ignore_errors=True)

    def _decide(self) -> Decision:
        s = self.sess
        if s.candidate is not None:
            try:
                self.guards.append(guards.feature_guard(s.candidate.dtypes(s.cfg.item_timeout_s), s.cfg.target))
            except CandidateError as exc:  # a hung or dead worker answers nothing: its error is the verdict
                self.results.add_error(exc)
        held, note = holdout.run_for_gate(self)  # fresh seeds; before `errors`: the candidate may crash on them
        if note:
            self.summary_lines.append(note)
        made = self.results.freeze()  # the decision's input: nothing added from here on changes it
        errors = [RunError(e.kind, e.message, e.item, e.seconds, e.where) for e in _dedupe(made.errors)]
        results = list(made.quality.values())
        passed, total, failures = aggregate(results)
        claim_ok, claim_reason = self._class_claim(made) if results and not errors else (True, "")
        if claim_ok and results and not errors:  # quantization: no required score may regress
            claim_ok, claim_reason = regression.claim(s.cfg.thresholds_for(s.judged_class), results)
        quality = QualityOutcome(passed, total, failures, class_claim_ok=claim_ok, class_claim_reason=claim_reason,
                                 holdout_failures=held) \
            if results or not any(not g.ok for g in self.guards) else None
        lanes = made.outcomes()
        return decide(guards=self.guards, quality=quality, lanes=lanes, errors=errors,
                      vram_budget_gib=self.vram_budget_gib(), expected_items=len(s.suite.corpus))

    def _class_claim(self, made: Frozen) -> tuple[bool, str]:
        """An exact/numerical claim must reproduce the CHAMPION's outputs within that class's tolerance."""
        claimed_class = self.meta.claimed_class if self.meta else "exact"
        if claimed_class not in REPRODUCING_CLASSES:
            return True, ""
        try:
            champ = champion.snapshot(self.sess, self.ledger)
        except DitarError as exc:
            return False, f"champion outputs unavailable: {exc}"
        t = self.sess.cfg.thresholds_for(claimed_class)
        for item_id, out in made.outputs.items():
            ref = champ.output(item_id)
            m = compute_metrics(out.latents, out.image, ref.latents, ref.image)
            res = check_contract(item_id, claimed_class, m, t)
            if not res.passed:
                return False, (f"labelled '{claimed_class}' but differs from the champion on {item_id}: "
                               f"{res.failures[0]}")
        return True, ""

    def log_report(self, nodeid: str, when: str, outcome: str, longrepr: str = "") -> str | None:
        """One test report, as plain values: a gated run logs every failure and every call (tests.log,
        loop.run.testlog). Returns the id of an earlier test that failed with the same text, else None:
        the plugin then shortens this report to a pointer, so an error is printed once, not per item."""
        if self.gated and self.state_watch:
            harm = backup.put_back(self.root, TagPaths(self.sess.state_dir), self.state_watch)
            self.state_harm = self.state_harm or harm  # the first damage seen names the CRASH
        if when != "call" and outcome == "passed":
            return None
        return self.test_log.add(nodeid, when, outcome, longrepr, self.sess.run_dir() if self.gated else None)

    # ---- output ---------------------------------------------------------------------------
    def summary(self) -> list[str]:
        """The lines of the terminal summary."""
        s, res = self.sess, self.results
        out = []
        if res.quality and not self.gated:
            passed, total, _ = aggregate(list(res.quality.values()))
            out.append(f"ditar: quality {passed}/{total} passed (class {s.judged_class}) - report only, "
                       "nothing recorded")
            room = margins(list(res.quality.values()), s.cfg.thresholds_for(s.judged_class))
            if room:  # how close the edit came to each floor of the class
                out.append(f"ditar: margins to the '{s.judged_class}' floors: " + "; ".join(room))
        out += [f"ditar: lane {oc.name}: {oc.verdict} {oc.reason}" for oc in res.outcomes()]
        states = {k: devstate.describe(r.measurement.rounds_state, r.measurement.energy_per_image_j)
                  for k, r in res.lanes.items()}
        out += [f"ditar: lane {k} rounds: {line}" for k, line in states.items() if line]  # the device's state
        if self.gated and self.decision is not None:
            out += run_table(list(res.lanes.values()), list(res.quality.values()), self.decision, s.judged_class)
        if s.clock.seconds:  # any run that built or generated, a sharded quality phase included
            out.append(s.clock.line())
        return out + self.summary_lines

    def final_line(self) -> str | None:
        if self.verdict:
            return self.verdict
        if self.guard_line:
            return self.guard_line
        if self.refusal:
            return f"DITAR REFUSED: {self.refusal}"
        if self.try_outcome is not None:
            return self.try_outcome.line()
        return None


def _dedupe(errors: Iterable[CandidateError]) -> list[CandidateError]:
    seen, out = set(), []
    for e in errors:
        if str(e) not in seen:
            seen.add(str(e))
            out.append(e)
    return out

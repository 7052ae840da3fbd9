"""The gate: decides whether a run is a full gated run, checks guards before any candidate
code runs, and at session end turns results into KEEP / DISCARD / CRASH with git actions.

It sees plain data only (RunOptions, collected ids, test outcomes) and returns what pytest must
do (an exit status, lines to print); pytest itself stays in pytest_ditar.plugin. About 430
lines: every refusal a gated run can end in is decided here, in the order it is checked, so the
order can be read in one place; what a decided run writes lives in record.py."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from pytest_ditar.core.decision import (
    Decision,
    GuardResult,
    LaneOutcome,
    QualityOutcome,
    RunError,
    cumulative_class,
    decide,
    kept_rows,
    validate_class,
)
from pytest_ditar.core.errors import CandidateError, DitarError
from pytest_ditar.core.quality import aggregate, check_contract, compute_metrics
from pytest_ditar.core.vocabulary import REPRODUCING_CLASSES, TRAILER
from pytest_ditar.loop import backup, champion, gitpins, guards, phases, record, stamps
from pytest_ditar.loop.options import Exit, RunOptions
from pytest_ditar.loop.session import DitarSession
from pytest_ditar.loop.verify import state_refusal
from pytest_ditar.store.ledger import Ledger
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.vcs import repo as gitops


@dataclass(frozen=True)
class ExperimentMeta:
    cls: str
    description: str


def read_meta(root: Path, cls_opt: str | None, desc_opt: str | None) -> ExperimentMeta | None:
    """Class and description: options first, else the commit's `Ditar-Class:` trailer and subject."""
    msg = gitops.commit_message(root)
    subject = msg.strip().splitlines()[0] if msg.strip() else ""
    cls = cls_opt
    if not cls:
        for line in msg.splitlines():
            if line.strip().lower().startswith(TRAILER.lower()):
                cls = line.split(":", 1)[1].strip()
    if not cls:
        return None
    return ExperimentMeta(validate_class(cls), desc_opt or subject)


class Gate:
    def __init__(self, sess: DitarSession, opts: RunOptions):
        self.sess = sess
        self.opts = opts
        self.root = sess.cfg.root
        self.ledger = Ledger(sess.state_dir)
        self.items_collected: set[str] = set()
        self.lanes_collected: set[str] = set()
        self.gated = False  # a full gate on a candidate commit: decides and acts
        self.guards: list[GuardResult] = []
        self.meta: ExperimentMeta | None = None
        self.decision: Decision | None = None
        self.verdict: str | None = None
        self.refusal: str | None = None
        self.head: str | None = None  # the commit judged
        self.parent: str | None = None  # its parent, the champion: where a revert puts the branch
        self.branch: str | None = None  # the research branch it was judged on
        self.moved: str | None = None  # how git changed during the run, once seen at record time
        self.record_backup: str | None = None  # the backup written right after the ledger row
        self.baseline_commit: str | None = None
        self.champion_commit: str | None = None  # the last KEEP, else the baseline commit
        self.summary_lines: list[str] = []
        self.state_watch: backup.Watch | None = None  # the state directory as the candidate found it
        self.git_watch: dict | None = None  # the repository's git config and hooks then (loop.gitpins)
        self.state_harm: str | None = None  # what the run did to it, once seen (and put back) mid-run

    # ---- header ---------------------------------------------------------------------------
    def header(self) -> list[str]:
        s = self.sess
        lines = [f"ditar: suite={s.suite.name} items={len(s.suite.corpus)} lanes={','.join(l.name for l in s.suite.lanes)} "
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
            from pytest_ditar.hardware.fingerprint import target_header
            from pytest_ditar.hardware.profiles import get_profile

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
        from pytest_ditar.loop.baseline import create_baseline, manifest_summary

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
        s = self.sess
        st = gitops.state(self.root)
        self.head = st.head
        research = bool(st.branch and st.branch.startswith(s.cfg.branch_prefix))
        demanded = self.opts.gate_demanded
        foreign = guards.config_refusal(s.cfg, st.toplevel)  # a gated run takes only the repository's config
        if foreign and demanded:
            self.refusal = foreign
            return False
        if foreign or not (research or demanded) or not self.full_collection():
            if demanded:
                self.refusal = ("--ditar-gate needs a research branch and the full corpus and objective lane "
                                f"(branch={st.branch}, items={len(self.items_collected)}/{len(s.suite.corpus)})")
                return False
            return self._report_mode(st)  # reported, never recorded
        paths = TagPaths(s.state_dir)
        # a run that ended before it recorded (killed): its state changes are rolled back before
        # anything reads the ledger for the champion
        settled = backup.settle(self.root, paths)
        self.summary_lines += [settled.line] if settled.line else []
        # what the verdict rests on must verify before any candidate code runs; then git
        self.refusal = settled.busy or settled.error or state_refusal(self.root, paths, settle=False) \
            or guards.git_refusal(st, s.cfg.branch_prefix + s.tag) or record.finish_revert(self, st)
        if self.refusal:
            return False
        st = gitops.state(self.root)
        self.head, self.parent, self.branch = st.head, st.parent, st.branch
        base = s.baseline()
        self.baseline_commit = base.manifest.get("git_sha")
        self.champion_commit = best = champion.kept_commit(self.ledger) or self.baseline_commit
        if not (self.head and self.head != best):  # HEAD is the champion: nothing to judge
            if demanded:
                self.refusal = f"HEAD {str(self.head)[:7]} is the champion; commit a candidate first"
                return False
            return self._report_mode(st)
        pin = guards.config_pin(s.cfg, base.manifest.get("config_sha256"), st, self.baseline_commit)
        self.summary_lines += [pin.note] if pin.note else []
        self.guards += [pin.guard] if pin.guard else []  # the candidate's own edit: judged
        # git's own files as the baseline pinned them, and the candidate's files as its commit holds
        # them, by content (an index flag hides an edit from git status)
        self.refusal = gitpins.refusal(self.root, base.manifest) or guards.hidden_refusal(self.root, st, s.cfg.mutable_paths) \
            or stamps.refusal(base.manifest, s.model_dir(), self.root)  # the model and the environment, as stamped
        if self.refusal:
            return False
        from pytest_ditar.loop.bound import bound_refusal

        # a bounded session refuses a plain `pytest --ditar-gate` too, not only `dit-ar experiment`
        self.refusal = bound_refusal(s.state_dir) \
            or (guards.one_commit_refusal(self.root, st, best, self.ledger.rows(), paths) if best else None) \
            or pin.refusal or s.sandbox_refusal()  # fail closed: no gated run without the workers' sandbox
        if self.refusal:
            return False
        try:
            self.meta = read_meta(self.root, self.opts.cls, self.opts.description)
        except ValueError as exc:
            self.refusal = f"commit {self.head[:7]}: {exc}"
            return False
        if self.meta is None:
            self.refusal = (f"commit {self.head[:7]} has no class: add a '{TRAILER} exact' trailer to the commit message "
                            "(git commit --amend) or pass --ditar-class")
            return False
        s.cls = cumulative_class([*self._kept_classes(), self.meta.cls])
        self.guards += guards.check_guards(self.root, mutable_paths=s.cfg.mutable_paths, fixed_paths=s.cfg.fixed_paths,
                                           recorded_hashes=base.manifest.get("fixed_paths", {}),
                                           baseline_commit=self.baseline_commit)
        self.guards.append(self._class_gate(s.cls))
        self.gated = True
        s.run_dir()  # exists before any candidate code runs
        self.state_watch = backup.watch(self.root, paths, self.head)  # the state as the candidate finds it
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
        self._start_workers()
        return True

    def refuse(self, reason: str) -> None:
        """Refuse the run: nothing is decided or recorded, and pytest exits with a usage error."""
        self.refusal = reason
        self.gated = False

    def _report_mode(self, st: gitops.RepoState) -> bool:
        """A partial or non-research run: results are reported, nothing is recorded or reverted."""
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
            claimed = [validate_class(self.opts.cls)] if self.opts.cls else []
        except ValueError as exc:
            self.refusal = str(exc)
            return False
        self.sess.cls = cumulative_class([*self._kept_classes(), *claimed])
        if self.items_collected:  # a smoke check: the class gate of a gated run, same words
            from pytest_ditar.config.semantic import class_refusal

            self.refusal = class_refusal(self.sess.cfg, self.sess.cls)
        return self.refusal is None

    def _kept_classes(self) -> list[str]:
        rows = self.ledger.rows() if self.ledger.jsonl_path.exists() else []
        return [str(r["class"]) for r in kept_rows(rows)]

    def _class_gate(self, cls: str) -> GuardResult:
        from pytest_ditar.config.semantic import class_refusal

        why = class_refusal(self.sess.cfg, cls)  # the smoke check refuses with the same words
        return GuardResult("class_gate", why is None, why or "")

    def bind_memory_budget(self) -> None:
        """Workers built from now on cap their allocator at the target's memory: a candidate that
        only fits on a bigger card raises OOM (a CRASH) instead of passing."""
        self.sess.memory_budget_gib = self.vram_budget_gib()

    def vram_budget_gib(self) -> float | None:
        if self.sess.cfg.vram_budget_gib:
            return self.sess.cfg.vram_budget_gib
        try:
            from pytest_ditar.hardware.profiles import get_profile

            return get_profile(self.sess.cfg.target).memory_gib
        except Exception:  # noqa: BLE001
            return None

    def prestart(self) -> None:
        """Start the candidate's worker process at configure time (no candidate code runs before
        its build is sent): its interpreter and torch import overlap collection and the guards."""
        if self.opts.xdist_controller:
            return  # the controller runs no candidate; its xdist workers start their own
        try:
            self.sess.worker(self.sess.cfg.candidate_path, "candidate")
        except Exception:  # noqa: BLE001 - the fixtures build it again and report what went wrong
            pass

    def _start_workers(self) -> None:
        """Send the candidate's, the champion's and the holdout baseline's builds now, so they
        overlap: the second and third start-ups then cost no wall time."""
        if self.opts.xdist_controller:
            return
        try:
            self.sess.start_candidate()
        except Exception:  # noqa: BLE001 - get_candidate builds it again and reports what went wrong
            pass
        lanes = [l for l in self.sess.suite.lanes if l.name in self.lanes_collected]
        if self.opts.xdist_controller or self.opts.phase == phases.QUALITY \
                or not any(getattr(l, "gpus", 1) == 1 for l in lanes):  # multi-GPU lanes interleave nothing
            return
        try:
            champion.build(self.sess, self.champion_commit, self.head, start_only=True)
            objective = self.sess.cfg.objective_lane
            if self.sess.cfg.perf.twin and self.champion_commit and self.champion_commit != self.head \
                    and any(l.name == objective for l in lanes) and self.sess.cfg.perf.interleave:
                # the objective lane times the champion's twin too (loop.lanes): it builds beside the others
                self.sess.build_twin(self.champion_commit, start_only=True)
            if self.baseline_commit and self.baseline_commit not in (self.champion_commit, self.head) \
                    and self.sess.cfg.holdout.count:
                # the holdout's reference is the baseline code: a third worker, started now too
                self.sess.build_at_commit(self.baseline_commit, "holdout", start_only=True)
        except Exception:  # noqa: BLE001 - the lanes and the holdout build again and report what went wrong
            pass

    def follow(self, cls: str | None, run_dir: str | None, gated: bool) -> None:
        """An xdist worker takes the controller's go-ahead: its (cumulative) class judges every item,
        its run dir takes the logs, and a gated run caps the memory of the workers built here."""
        if cls:
            self.sess.cls = cls
        if run_dir:
            self.sess.use_run_dir(Path(run_dir))
        if gated:
            self.bind_memory_budget()

    # ---- after the tests ------------------------------------------------------------------
    def finish(self, exitstatus: int) -> int:
        """Decide and act on a gated run; return the run's exit status (pytest's `exitstatus` or
        what replaces it)."""
        if self.opts.baseline:
            return Exit.OK if self.refusal is None else Exit.TESTS_FAILED
        if not self.gated:
            record.unrecorded(self, "ended without a verdict")  # refused after its pre-run backup
            return Exit.USAGE_ERROR if self.refusal else exitstatus
        status = Exit.TESTS_FAILED if self.refusal else exitstatus
        harm = self.state_harm or backup.damage(self.root, TagPaths(self.sess.state_dir), self.state_watch)
        if harm:  # before anything else: the candidate may have taken the ledger with it
            return record.damaged(self, harm, exitstatus)
        if exitstatus in (Exit.INTERRUPTED, Exit.INTERNAL_ERROR):
            # A harness failure is not the candidate's fault: no verdict, no git action.
            self.refusal = f"{Exit(exitstatus).name.lower().replace('_', ' ')}: no verdict recorded, nothing reverted"
            record.unrecorded(self, "ended without a verdict")
            return status
        if self.opts.phase == phases.QUALITY:
            # phase 1: record for the decide phase; no verdict, no git action
            self.summary_lines.append(phases.record_quality(self))
            record.unrecorded(self, "quality phase recorded")
            return status
        decision = self._decide()
        harm = backup.damage(self.root, TagPaths(self.sess.state_dir), self.state_watch)  # the holdout ran it too
        return record.damaged(self, harm, exitstatus) if harm else record.finish(self, decision, status)

    def _decide(self) -> Decision:
        s = self.sess
        if s.candidate is not None:
            try:
                self.guards.append(guards.feature_guard(s.candidate.dtypes(s.cfg.item_timeout_s), s.cfg.target))
            except CandidateError as exc:  # a hung or dead worker answers nothing: its error is the verdict
                s.errors.append(exc)
        from pytest_ditar.core import regression
        from pytest_ditar.loop import holdout

        held, note = holdout.run_for_gate(self)  # fresh seeds; before `errors`: the candidate may crash on them
        if note:
            self.summary_lines.append(note)
        errors = [RunError(e.kind, e.message, e.item, e.seconds) for e in _dedupe(s.errors)]
        results = list(s.quality.values())
        passed, total, failures = aggregate(results)
        claim_ok, claim_reason = self._class_claim() if results and not errors else (True, "")
        if claim_ok and results and not errors:  # quantization: no required score may regress
            claim_ok, claim_reason = regression.claim(s.cfg.thresholds_for(s.cls), results)
        quality = QualityOutcome(passed, total, failures, class_claim_ok=claim_ok, class_claim_reason=claim_reason,
                                 holdout_failures=held) \
            if results or not any(not g.ok for g in self.guards) else None
        lanes = [lr.outcome for lr in s.lanes.values() if getattr(lr, "outcome", None)]
        if not any(l.objective for l in lanes):
            lanes.append(LaneOutcome(s.cfg.objective_lane, True, "MISSING", None, None, None, "objective lane did not run"))
        return decide(guards=self.guards, quality=quality, lanes=lanes, errors=errors,
                      vram_budget_gib=self.vram_budget_gib(), expected_items=len(s.suite.corpus))

    def _class_claim(self) -> tuple[bool, str]:
        """An exact/numerical claim must reproduce the CHAMPION's outputs within that class's tolerance."""
        cls = self.meta.cls if self.meta else "exact"
        if cls not in REPRODUCING_CLASSES:
            return True, ""
        try:
            champ = champion.snapshot(self.sess, self.ledger)
        except DitarError as exc:
            return False, f"champion outputs unavailable: {exc}"
        t = self.sess.cfg.thresholds_for(cls)
        for item_id, out in self.sess.outputs.items():
            ref = champ.output(item_id)
            res = check_contract(item_id, cls, compute_metrics(out.latents, out.image, ref.latents, ref.image), t)
            if not res.passed:
                return False, f"labelled '{cls}' but differs from the champion on {item_id}: {res.failures[0]}"
        return True, ""

    def log_report(self, nodeid: str, when: str, outcome: str, longrepr: str = "") -> None:
        """One test report, as plain values: a gated run logs every failure and every call."""
        if self.gated and self.state_watch:
            harm = backup.put_back(self.root, TagPaths(self.sess.state_dir), self.state_watch)
            self.state_harm = self.state_harm or harm  # the first damage seen names the CRASH
        if not self.gated or (when != "call" and outcome == "passed"):
            return
        try:
            run_dir = self.sess.run_dir()
            run_dir.mkdir(parents=True, exist_ok=True)
            with open(run_dir / "tests.log", "a") as fh:
                fh.write(f"{nodeid} {when} {outcome}\n")
                if outcome == "failed":
                    fh.write(longrepr + "\n\n")
        except OSError:
            pass  # a log lost to a candidate that removed the run's directory: finish() finds the damage

    # ---- output ---------------------------------------------------------------------------
    def summary(self) -> list[str]:
        """The lines of the terminal summary."""
        s = self.sess
        out = []
        if s.quality and not self.gated:
            passed, total, _ = aggregate(list(s.quality.values()))
            out.append(f"ditar: quality {passed}/{total} passed (class {s.cls}) - report only, nothing recorded")
        for lr in s.lanes.values():
            oc = getattr(lr, "outcome", None)
            if oc:
                out.append(f"ditar: lane {oc.name}: {oc.verdict} {oc.reason}")
        if self.gated and self.decision is not None:
            from pytest_ditar.loop.table import run_table

            out += run_table(list(s.lanes.values()), list(s.quality.values()), self.decision, s.cls)
        if s.clock.seconds:  # any run that built or generated, a sharded quality phase included
            out.append(s.clock.line())
        return out + self.summary_lines

    def final_line(self) -> str | None:
        if self.verdict:
            return self.verdict
        if self.refusal:
            return f"DITAR REFUSED: {self.refusal}"
        return None


def _dedupe(errors: list[CandidateError]) -> list[CandidateError]:
    seen, out = set(), []
    for e in errors:
        if str(e) not in seen:
            seen.add(str(e))
            out.append(e)
    return out

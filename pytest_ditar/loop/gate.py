"""The gate: decides whether a run is a full gated run, checks guards before any candidate
code runs, and at session end turns results into KEEP / DISCARD / CRASH with git actions."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_ditar.vcs import repo as gitops
from pytest_ditar.loop import record
from pytest_ditar.core.decision import (Decision, GuardResult, LaneOutcome, QualityOutcome, RunError, cumulative_class, decide,
                       validate_class)
from pytest_ditar.core.errors import CandidateError, DitarError
from pytest_ditar.loop.guards import check_guards, hash_fixed_paths
from pytest_ditar.store.ledger import Ledger
from pytest_ditar.core.quality import aggregate, check_contract, compute_metrics
from pytest_ditar.loop.session import DitarSession
from pytest_ditar.store.snapshot import load_snapshot

TRAILER = "Ditar-Class:"


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
    def __init__(self, sess: DitarSession, config: pytest.Config):
        self.sess = sess
        self.config = config
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
        self.head: str | None = None
        self.baseline_commit: str | None = None
        self.champion_commit: str | None = None
        self.summary_lines: list[str] = []

    # ---- header ---------------------------------------------------------------------------
    def header(self) -> list[str]:
        s = self.sess
        lines = [f"ditar: suite={s.suite.name} items={len(s.suite.corpus)} lanes={','.join(l.name for l in s.suite.lanes)} "
                 f"objective={s.cfg.objective_lane} tag={s.tag} state={s.state_dir}"]
        from pytest_ditar.plugin import xdist

        if xdist.is_controller(self.config):
            # The controller runs no candidate: fingerprinting it would only start CUDA here before
            # the workers spawn. Each worker's device line follows once it has collected.
            lines.append(f"ditar: device=one per xdist worker (gwN -> cuda:N where CUDA is) target={s.cfg.target}")
            return lines
        return [*lines, "ditar: " + self.device_line()]

    def device_line(self) -> str:
        """Device, target and whether they match (also what an xdist worker reports for itself)."""
        s = self.sess
        try:
            from pytest_ditar.hardware.profiles import get_profile, target_header

            return target_header(s.fingerprint(), get_profile(s.cfg.target))
        except Exception as exc:  # noqa: BLE001 - a header must never break a run
            return f"device={s.resolved_device()} target={s.cfg.target} (fingerprint unavailable: {exc})"

    # ---- collection -----------------------------------------------------------------------
    def collected(self, items: list[pytest.Item]) -> None:
        for item in items:
            callspec = getattr(item, "callspec", None)
            if callspec is None:
                continue
            if "ditar_item" in callspec.params and item.get_closest_marker("quality"):
                self.items_collected.add(callspec.params["ditar_item"].id)
            if "ditar_lane" in callspec.params and item.get_closest_marker("perf"):
                self.lanes_collected.add(callspec.params["ditar_lane"].name)

    def full_collection(self) -> bool:
        want = {it.id for it in self.sess.suite.corpus}
        from pytest_ditar.loop import phases

        phase = phases.phase(self.config)
        if phase == phases.QUALITY:  # phase 1 of a two-phase gate: every corpus item, no lane
            return want <= self.items_collected
        if phase == phases.DECIDE:  # phase 2: the objective lane; the items come from phase 1's record
            return self.sess.cfg.objective_lane in self.lanes_collected
        return want <= self.items_collected and self.sess.cfg.objective_lane in self.lanes_collected

    # ---- baseline -------------------------------------------------------------------------
    def run_baseline(self, session: pytest.Session) -> bool:
        from pytest_ditar.loop.baseline import create_baseline, manifest_summary

        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        try:
            path = create_baseline(self.sess, force=self.config.getoption("--ditar-force"))
        except (DitarError, CandidateError) as exc:
            self.refusal = f"baseline not stored: {exc}"
            session.testsfailed += 1
            return True
        if tr:
            tr.write_line(manifest_summary(path))
        return True

    # ---- before the candidate runs --------------------------------------------------------
    def before_tests(self, session: pytest.Session) -> bool:
        """Return False when the candidate must not run (a refused or guarded run)."""
        s = self.sess
        st = gitops.state(self.root)
        self.head = st.head
        research = bool(st.branch and st.branch.startswith(s.cfg.branch_prefix))
        demanded = bool(self.config.getoption("--ditar-gate", default=False))
        if not (research or demanded) or not self.full_collection():
            if demanded:
                self.refusal = ("--ditar-gate needs a research branch and the full corpus and objective lane "
                                f"(branch={st.branch}, items={len(self.items_collected)}/{len(s.suite.corpus)})")
                return False
            return self._report_mode()
        chain = self.ledger.verify()
        if not chain.ok:
            # A broken chain cannot be extended (and must not be papered over): refuse outright.
            self.refusal = (f"ledger chain broken ({'; '.join(chain.problems[:2])}); restore "
                            f"{self.ledger.jsonl_path} or start a new tag")
            return False
        if not (s.baseline_dir / "manifest.json").is_file():
            self.refusal = f"{s.baseline_dir}: baseline missing (run `dit-ar baseline` first)"
            return False
        try:
            self._recover(st)
            st = gitops.state(self.root)
            self.head = st.head
            base = s.baseline()
            problems: list[str] = []
        except DitarError as exc:
            base, problems = None, [str(exc)]
        self.baseline_commit = base.manifest.get("git_sha") if base else None
        self.champion_commit = self._champion_commit()
        recorded = base.manifest.get("fixed_paths", {}) if base else hash_fixed_paths(self.root, s.cfg.fixed_paths)
        self.guards = check_guards(self.root, branch_prefix=s.cfg.branch_prefix, tag=s.tag,
                                   mutable_paths=s.cfg.mutable_paths, fixed_paths=s.cfg.fixed_paths,
                                   recorded_hashes=recorded, baseline_commit=self.baseline_commit,
                                   baseline_problems=problems)
        is_candidate = bool(self.head and self.head != (self.champion_commit or self.baseline_commit))
        if not is_candidate:
            failed = [g for g in self.guards if not g.ok]
            if failed or demanded:
                self.refusal = ("; ".join(f"guard {g.name}: {g.reason}" for g in failed)
                                or f"HEAD {str(self.head)[:7]} is the champion; commit a candidate first")
                return False
            return self._report_mode()
        best = self.champion_commit or self.baseline_commit
        if best and st.parent != best:
            self.guards.append(GuardResult("one_commit", False,
                                           f"HEAD's parent is not the champion {best[:7]}: one hypothesis per commit"))
        try:
            self.meta = read_meta(self.root, self.config.getoption("--ditar-class"),
                                  self.config.getoption("--ditar-description"))
        except ValueError as exc:
            self.refusal = f"commit {self.head[:7]}: {exc}"
            return False
        if self.meta is None:
            self.refusal = (f"commit {self.head[:7]} has no class: add a '{TRAILER} exact' trailer to the commit message "
                            "(git commit --amend) or pass --ditar-class")
            return False
        kept = [str(r["class"]) for r in self.ledger.rows() if r.get("status") == "KEEP"]
        s.cls = cumulative_class([*kept, self.meta.cls])
        self.guards.append(self._class_gate(s.cls))
        self.gated = True
        if any(not g.ok for g in self.guards):
            return False  # guard violation: the candidate never runs
        self._bind_memory_budget()
        from pytest_ditar.loop import phases

        if phases.phase(self.config) == phases.DECIDE:
            self.refusal = phases.load_quality(self)
            if self.refusal:
                self.gated = False  # nothing to decide on: refuse, record nothing
                return False
        return True

    def _report_mode(self) -> bool:
        """A partial or non-research run: results are reported, nothing is recorded or reverted."""
        if self.items_collected or self.lanes_collected:
            try:
                self.sess.baseline()
            except DitarError as exc:
                self.refusal = str(exc)
                return False
        self._set_report_class()
        return True

    def _set_report_class(self) -> None:
        cls = self.config.getoption("--ditar-class")
        kept = [str(r["class"]) for r in self.ledger.rows() if r.get("status") == "KEEP"] if self.ledger.jsonl_path.exists() else []
        self.sess.cls = cumulative_class([*kept, *( [validate_class(cls)] if cls else [])])

    def _class_gate(self, cls: str) -> GuardResult:
        from pytest_ditar.runtime import semantic

        t = self.sess.cfg.thresholds_for(cls)
        if not semantic.needed(t):
            return GuardResult("class_gate", True)
        if not semantic.configured(self.sess.cfg):
            return GuardResult("class_gate", False,
                               f"class '{cls}' needs the semantic evaluators: set semantic.clip_model, semantic.clip_weights "
                               f"and semantic.lpips_weights in {self.sess.cfg.path} to local files")
        try:
            semantic.check_config(self.sess.cfg)  # a configured path that is not there fails before the candidate runs
        except DitarError as exc:
            return GuardResult("class_gate", False, str(exc))
        return GuardResult("class_gate", True)

    def _bind_memory_budget(self) -> None:
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

    def _champion_commit(self) -> str | None:
        rows = self.ledger.rows() if self.ledger.jsonl_path.exists() else []
        kept = [r for r in rows if r.get("status") == "KEEP"]
        return str(kept[-1]["commit"]) if kept else None

    def champion_snapshot(self):
        """The champion's stored outputs: the last KEEP's snapshot, else the baseline."""
        commit = self._champion_commit()
        if commit:
            return load_snapshot(self.sess.state_dir / "champions" / commit, "champion")
        return self.sess.baseline()

    def _recover(self, st: gitops.RepoState) -> None:
        """Finish a revert that a kill -9 interrupted: the ledger says DISCARD/CRASH for HEAD."""
        rows = self.ledger.rows() if self.ledger.jsonl_path.exists() else []
        if rows and rows[-1].get("commit") == st.head and rows[-1].get("status") in ("DISCARD", "CRASH") \
                and not st.dirty_paths and not self.config.getoption("--ditar-no-revert"):
            gitops.reset_hard_to_parent(self.root, st.head)
            self.summary_lines.append(f"ditar: recovered: finished the revert of {st.head[:7]} recorded as {rows[-1]['status']}")

    # ---- after the tests ------------------------------------------------------------------
    def finish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.config.getoption("--ditar-baseline"):
            ok = self.refusal is None
            session.exitstatus = pytest.ExitCode.OK if ok else pytest.ExitCode.TESTS_FAILED
            return
        if self.refusal:
            session.exitstatus = pytest.ExitCode.USAGE_ERROR if not self.gated else pytest.ExitCode.TESTS_FAILED
            if not self.gated:
                return
        if not self.gated:
            return
        if exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR):
            # A harness failure is not the candidate's fault: no verdict, no git action.
            self.refusal = f"{exitstatus.name.lower().replace('_', ' ')}: no verdict recorded, nothing reverted"
            return
        from pytest_ditar.loop import phases

        if phases.phase(self.config) == phases.QUALITY:
            phases.record_quality(self)  # phase 1: record for the decide phase; no verdict, no git action
            return
        self.decision = self._decide()
        record.act(self, self.decision)
        if phases.phase(self.config) == phases.DECIDE:
            phases.consume(self)
        if self.decision.status != "KEEP":
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _decide(self) -> Decision:
        s = self.sess
        if s.candidate is not None:
            from pytest_ditar.loop.guards import feature_guard

            self.guards.append(feature_guard(s.candidate.dtypes(s.cfg.item_timeout_s), s.cfg.target))
        from pytest_ditar.loop import holdout
        from pytest_ditar.core import regression

        held = holdout.run_for_gate(self)  # fresh seeds; before `errors`: the candidate may crash on them
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
        guards = self.guards
        return decide(guards=guards, quality=quality, lanes=lanes, errors=errors,
                      vram_budget_gib=self.vram_budget_gib(), expected_items=len(s.suite.corpus))

    def _class_claim(self) -> tuple[bool, str]:
        """An exact/numerical claim must reproduce the CHAMPION's outputs within that class's tolerance."""
        cls = self.meta.cls if self.meta else "exact"
        if cls not in ("exact", "numerical"):
            return True, ""
        try:
            champ = self.champion_snapshot()
        except DitarError as exc:
            return False, f"champion outputs unavailable: {exc}"
        t = self.sess.cfg.thresholds_for(cls)
        for item_id, out in self.sess.outputs.items():
            ref = champ.output(item_id)
            res = check_contract(item_id, cls, compute_metrics(out.latents, out.image, ref.latents, ref.image), t)
            if not res.passed:
                return False, f"labelled '{cls}' but differs from the champion on {item_id}: {res.failures[0]}"
        return True, ""

    def log_report(self, report: pytest.TestReport) -> None:
        if not self.gated or (report.when != "call" and report.passed):
            return
        with open(self.sess.run_dir() / "tests.log", "a") as fh:
            fh.write(f"{report.nodeid} {report.when} {report.outcome}\n")
            if report.failed:
                fh.write(report.longreprtext + "\n\n")

    # ---- output ---------------------------------------------------------------------------
    def summary(self, tr: Any) -> None:
        s = self.sess
        if s.quality and not self.gated:
            passed, total, _ = aggregate(list(s.quality.values()))
            tr.write_line(f"ditar: quality {passed}/{total} passed (class {s.cls}) - report only, nothing recorded")
        for lr in s.lanes.values():
            oc = getattr(lr, "outcome", None)
            if oc:
                tr.write_line(f"ditar: lane {oc.name}: {oc.verdict} {oc.reason}")
        if self.gated and self.decision is not None:
            from pytest_ditar.plugin.console import run_table

            for line in run_table(list(s.lanes.values()), list(s.quality.values()), self.decision, s.cls):
                tr.write_line(line)
        if s.clock.seconds:  # any run that built or generated, a sharded quality phase included
            tr.write_line(s.clock.line())
        for line in self.summary_lines:
            tr.write_line(line)

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

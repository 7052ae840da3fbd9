"""The checks made before any candidate code runs, in order (REFUSAL_CHAIN): each returns None
(go on), a Refusal (the run is refused, nothing recorded) or ReportOnly (a partial or
non-research run: reported, never recorded). The first that stops the run decides, and none
after it runs. What the checks found (the commits, the baseline, the class, the config pin, the
summary lines) is the Preflight's, for the gate to take once the chain has passed."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Union, cast

from pytest_ditar.core.decision import GuardResult
from pytest_ditar.core.vocabulary import TRAILER
from pytest_ditar.loop.integrity import backup, gitpins, guards, roles, stamps
from pytest_ditar.loop.integrity.tags import off_research_branch
from pytest_ditar.loop.judge import record
from pytest_ditar.loop.perf.bound import bound_refusal
from pytest_ditar.loop.run import champion
from pytest_ditar.loop.run.classes import Claim, read_claim
from pytest_ditar.loop.run.options import RunOptions
from pytest_ditar.loop.run.session import DitarSession
from pytest_ditar.loop.run.verify import state_refusal
from pytest_ditar.runtime import sandbox_check
from pytest_ditar.store.ledger import Ledger
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.vcs import queries

# The order the checks are made in; each is Preflight._check_<name>.
REFUSAL_CHAIN = ("mode", "scope", "settled", "state", "git", "revert", "champion", "git_pins", "hidden",
                 "regular", "stamps", "bound", "one_commit", "repeat", "config_pin", "sandbox", "meta")


@dataclass(frozen=True)
class Refusal:
    """A check of the chain refused the run: nothing is recorded, pytest exits REFUSED."""
    check: str
    reason: str


@dataclass(frozen=True)
class ReportOnly:
    """A check found a partial or non-research run: its results are reported, never recorded."""
    check: str


Stop = Union[Refusal, ReportOnly]


def walk(checks: Iterable[tuple[str, Callable[[], Stop | None]]]) -> Stop | None:
    """Make the checks in order; the first that stops the run is the answer, and none after it runs."""
    for _, check in checks:
        stop = check()
        if stop is not None:
            return stop
    return None


@dataclass(frozen=True)
class ExperimentMeta:
    claim: Claim
    description: str

    @property
    def claimed_class(self) -> str:
        return cast(str, self.claim.claimed_class)  # read_meta makes no meta without one


def read_meta(root: Path, claimed_class: str | None, desc_opt: str | None) -> ExperimentMeta | None:
    """Class and description: options first, else the commit's `Ditar-Class:` trailer and subject
    (loop.run.classes.read_claim validates the class; ValueError where it names none)."""
    msg = queries.commit_message(root)
    subject = msg.strip().splitlines()[0] if msg.strip() else ""
    trailer = None
    for line in msg.splitlines():
        if line.strip().lower().startswith(TRAILER.lower()):
            trailer = line.split(":", 1)[1].strip()
    claim = read_claim(claimed_class, trailer)
    if claim.claimed_class is None:
        return None
    return ExperimentMeta(claim, desc_opt or subject)


class Preflight:
    """One walk of the chain for one run. `full`: the collection holds the whole corpus and the
    objective lane; `items`: how many corpus items it holds (for the refusal's words)."""

    def __init__(self, sess: DitarSession, opts: RunOptions, ledger: Ledger, *, full: bool, items: int):
        self.sess, self.opts, self.ledger, self.full, self.items = sess, opts, ledger, full, items
        self.root = sess.cfg.root
        self.notes: list[str] = []  # summary lines the checks add, refused or not
        self.guards: list[GuardResult] = []  # the config pin's guard: judged with the others
        self.st = queries.state(self.root)
        self.head: str | None = self.st.head
        self.parent: str | None = None
        self.branch: str | None = None
        self.base: Any = None  # the baseline snapshot, once the champion check has read it
        self.baseline_commit: str | None = None
        self.champion_commit: str | None = None
        self.meta: ExperimentMeta | None = None
        self._paths = TagPaths(sess.state_dir)
        self._pin: guards.ConfigPin | None = None

    def run(self) -> Stop | None:
        return walk((name, getattr(self, f"_check_{name}")) for name in REFUSAL_CHAIN)

    def _check_mode(self) -> Stop | None:
        if not (self.opts.try_only or self.opts.guard is not None):
            return None
        if self.opts.gate_demanded:  # `dit-ar try`, a guard: never a gated run
            what = "--ditar-try" if self.opts.try_only else "--ditar-guard"
            return Refusal("mode", f"{what} reports only; it cannot be combined with --ditar-gate")
        return ReportOnly("mode")

    def _check_scope(self) -> Stop | None:
        """The repository's own config, a research branch (or --ditar-gate) and the full collection."""
        s, st, demanded = self.sess, self.st, self.opts.gate_demanded
        research = bool(st.branch and st.branch.startswith(s.cfg.branch_prefix))
        foreign = guards.config_refusal(s.cfg, st.toplevel)  # a gated run takes only the repository's config
        if foreign and demanded:
            return Refusal("scope", foreign)
        if foreign or not (research or demanded) or not self.full:
            if demanded:
                return Refusal("scope", "--ditar-gate needs a research branch and the full corpus and objective "
                                        f"lane (branch={st.branch}, items={self.items}/"
                                        f"{len(s.suite.corpus)})")
            return ReportOnly("scope")
        return None

    def _check_settled(self) -> Stop | None:
        # a run that ended before it recorded (killed): its state changes are rolled back before
        # anything reads the ledger for the champion
        settled = backup.settle(self.root, self._paths)
        self.notes += [settled.line] if settled.line else []
        why = settled.busy or settled.error
        return Refusal("settled", why) if why else None

    def _check_state(self) -> Stop | None:  # what the verdict rests on verifies before any candidate code runs
        off = off_research_branch(self.sess.cfg, self.sess.tag)  # no state because it is the wrong branch
        if off:
            return Refusal("state", off)
        why = state_refusal(self.root, self._paths, settle=False)
        return Refusal("state", why) if why else None

    def _check_git(self) -> Stop | None:
        at_champion = bool(self.st.dirty_paths) and self.st.head in (
            champion.kept_commit(self.ledger), champion.baseline_commit(self.sess))
        why = guards.git_refusal(self.st, self.sess.cfg.branch_prefix + self.sess.tag, at_champion)
        return Refusal("git", why) if why else None

    def _check_revert(self) -> Stop | None:
        why, note = record.finish_revert(self.root, self.ledger.rows(), self.st, no_revert=self.opts.no_revert)
        self.notes += [note] if note else []
        if why:
            return Refusal("revert", why)
        self.st = st = queries.state(self.root)  # a finished revert moved HEAD
        self.head, self.parent, self.branch = st.head, st.parent, st.branch
        return None

    def _check_champion(self) -> Stop | None:
        """HEAD must not be the champion; the config pin is read here, its refusal comes later."""
        s = self.sess
        self.base = base = s.baseline()
        self.baseline_commit = base.manifest.get("git_sha")
        self.champion_commit = champion.kept_commit(self.ledger) or self.baseline_commit
        if not (self.head and self.head != self.champion_commit):  # nothing to judge
            if self.opts.gate_demanded:
                return Refusal("champion", f"HEAD {str(self.head)[:7]} is the champion; commit a candidate first")
            return ReportOnly("champion")
        pin = self._pin = guards.config_pin(s.cfg, base.manifest.get("config_sha256"), self.st,
                                            self.baseline_commit)
        self.notes += [pin.note] if pin.note else []
        self.guards += [pin.guard] if pin.guard else []  # the candidate's own edit: judged
        return None

    def _check_git_pins(self) -> Stop | None:  # git's own files as the baseline pinned them
        why = gitpins.refusal(self.root, self.base.manifest)
        return Refusal("git_pins", why) if why else None

    def _check_hidden(self) -> Stop | None:  # the candidate's files as its commit holds them, by content
        why = guards.hidden_refusal(self.root, self.st, self.sess.cfg.mutable_paths)
        return Refusal("hidden", why) if why else None

    def _check_regular(self) -> Stop | None:  # a link or submodule under a mutable path: refused, named
        problems = roles.irregular(self.root, str(self.head), self.sess.cfg.mutable_paths)
        return Refusal("regular", roles.refusal(problems, f"commit {str(self.head)[:7]}")) if problems else None

    def _check_stamps(self) -> Stop | None:  # the model and the environment, as stamped
        why = stamps.refusal(self.base.manifest, self.sess.model_dir(), self.root)
        return Refusal("stamps", why) if why else None

    def _check_bound(self) -> Stop | None:
        # a bounded session refuses a plain `pytest --ditar-gate` too, not only `dit-ar experiment`
        why = bound_refusal(self.sess.state_dir)
        return Refusal("bound", why) if why else None

    def _check_one_commit(self) -> Stop | None:
        best = self.champion_commit
        why = guards.one_commit_refusal(self.root, self.st, best, self.ledger.rows(), self._paths) if best else None
        return Refusal("one_commit", why) if why else None

    def _check_repeat(self) -> Stop | None:
        best = self.champion_commit
        since = self.base.manifest.get("created") if self.base is not None else None  # a new baseline lifts a lock
        why = guards.repeat_refusal(self.root, str(self.head), best, self.ledger.rows(), since) if best else None
        return Refusal("repeat", why) if why else None

    def _check_config_pin(self) -> Stop | None:
        why = self._pin.refusal if self._pin else None
        return Refusal("config_pin", why) if why else None

    def _check_sandbox(self) -> Stop | None:  # fail closed: no gated run without the workers' sandbox
        why = sandbox_check.check() if self.sess.cfg.sandboxed else None  # none where the project owner turned it off
        return Refusal("sandbox", why) if why else None

    def _check_meta(self) -> Stop | None:
        head = str(self.head)
        try:
            self.meta = read_meta(self.root, self.opts.claimed_class, self.opts.description)
        except ValueError as exc:
            return Refusal("meta", f"commit {head[:7]}: {exc}")
        if self.meta is None:
            return Refusal("meta", f"commit {head[:7]} has no class: add a '{TRAILER} exact' trailer to the "
                                   "commit message (git commit --amend) or pass --ditar-class")
        return None

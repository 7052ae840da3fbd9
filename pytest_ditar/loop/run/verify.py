"""`dit-ar verify`: re-check everything the loop trusts, one line per check.

- the ledger and the baseline are there (a missing one is a failure, not an empty verify);
- the baseline snapshot's files against its manifest (sha256 per file), and the manifest itself
  against the hash that `baseline` anchored in the ledger (so an edited manifest is caught too);
- every champion snapshot's files against its manifest;
- the ledger's hash chain (an edited, deleted or reordered row breaks it);
- the ledger, results and snapshots against the backup of the last recorded run (a change made
  outside any run, such as a KEEP row appended by hand, is caught even when its chain verifies);
- a run that ended before it recorded (its judge killed): its state changes are rolled back from
  the pre-run backup before anything is checked (loop.integrity.backup.settle);
- the fixed paths against the hashes recorded at baseline time;
- every kept commit's tree against the baseline commit's outside the mutable paths (loop.integrity.judgetree);
- the repository's git config and hooks against the baseline's pins (loop.integrity.gitpins);
- a sample of baseline items re-generated from the baseline commit's code (a git worktree),
  which must match the stored outputs within the exact class's tolerance.
"""
from __future__ import annotations

import hashlib
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generator, Iterator

from pytest_ditar.core.errors import CandidateError, DitarError
from pytest_ditar.core.quality import check_contract, compute_metrics
from pytest_ditar.loop.integrity import backup as state_backup, gitpins, judgetree, stamps
from pytest_ditar.loop.integrity.guards import fixed_path_changes, hash_fixed_paths
from pytest_ditar.loop.run.holdout import baseline_pipeline
from pytest_ditar.loop.run.session import DitarSession
from pytest_ditar.runtime.harness import batches, run_batch
from pytest_ditar.store.ledger import Ledger, LedgerError
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.snapshot import MANIFEST, load_snapshot, verify_snapshot
from pytest_ditar.vcs import queries, trees

ANCHOR = re.compile(r"baseline manifest sha256=([0-9a-f]{64})")
MAX_LINES = 10  # problems listed per check before "(+N more)"
DRIFT = "state changed outside a run"
UNRECORDED = "unrecorded run"
_BARE = (DRIFT, UNRECORDED)  # refusals that read as they are, without "<name> broken:"


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str = ""

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}" + (f": {self.detail}" if self.detail else "")


def _many(name: str, problems: list[str], ok_detail: str) -> Iterator[Check]:
    if not problems:
        yield Check(name, True, ok_detail)
        return
    for p in problems[:MAX_LINES]:
        yield Check(name, False, p)
    if len(problems) > MAX_LINES:
        yield Check(name, False, f"(+{len(problems) - MAX_LINES} more)")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)  # stdout may be JSON (`dit-ar status --json`)


def state_checks(root: Path, paths: TagPaths, settle: bool = True,
                 echo: Callable[[str], None] | None = None) -> Iterator[Check]:
    """What the verdicts rest on, in the tag's state directory: the baseline snapshot, its anchor in
    the ledger, the ledger's chain, the champions, and the state against the last recorded run's
    backup. A missing ledger or baseline is a failure (never "0 rows, verifies"); the gate runs
    these before any candidate code, `dit-ar verify`, `dit-ar status` and `dit-ar recover` run them
    too. First (`settle`), a run that ended before it recorded is rolled back, and `echo` (stderr
    by default) says so; the gate settles by itself before."""
    busy = (yield from _settle(root, paths, echo)) if settle else False
    backup = queries.ref_commit(root, trees.state_ref(paths.tag))
    fix = f" (restore it with `dit-ar recover`, from {trees.state_ref(paths.tag)})" if backup else ""
    if not paths.dir.is_dir():
        yield Check("state directory", False, f"{paths.dir} missing{fix or ' (run `dit-ar init`)'}")
        return
    ledger = Ledger(paths.dir)
    has_ledger = ledger.jsonl_path.is_file()
    if not has_ledger:
        yield Check("ledger", False, f"{ledger.jsonl_path.name} missing{fix or ' (restore it, or start a new tag)'}")
    yield from _baseline_checks(paths, ledger if has_ledger else None, fix)
    if has_ledger:
        report = ledger.verify()
        yield from _many("ledger chain", list(report.problems), f"{report.n_rows} rows")
    yield from _champion_checks(paths)
    if not busy:
        yield from _drift(root, paths)


def _settle(root: Path, paths: TagPaths, echo: Callable[[str], None] | None) -> Generator[Check, None, bool]:
    """Roll back a run that ended before it recorded; returns whether a run is in flight now."""
    st = state_backup.settle(root, paths)
    if st.line:
        (echo or _stderr)(st.line)
    if st.error:
        yield Check(UNRECORDED, False, st.error)
    if st.busy:
        yield Check("run in flight", True, st.busy)
    return bool(st.busy)


def _baseline_checks(paths: TagPaths, ledger: Ledger | None, fix: str) -> Iterator[Check]:
    """The baseline snapshot: there, its files the manifest's, and its manifest anchored in the ledger
    (`ledger`: None when there is none)."""
    if not (paths.baseline / MANIFEST).is_file():
        yield Check("baseline", False, f"{paths.baseline.name} missing{fix or ' (run `dit-ar baseline`)'}")
        return
    try:
        snap = load_snapshot(paths.baseline, "baseline", verify=False)
    except DitarError as exc:
        yield Check("baseline snapshot", False, str(exc))
        return
    yield from _many("baseline files", verify_snapshot(snap),
                     f"{len(snap.manifest.get('files', {}))} files match the manifest")
    if ledger is not None:
        yield _anchor(ledger, hashlib.sha256((snap.path / MANIFEST).read_bytes()).hexdigest())


def _champion_checks(paths: TagPaths) -> Iterator[Check]:
    for champ in sorted(paths.champions.glob("[!.]*")) if paths.champions.is_dir() else []:
        try:
            c = load_snapshot(champ, "champion", verify=False)
            yield from _many(f"champion {champ.name[:7]} files", verify_snapshot(c),
                             f"{len(c.manifest.get('files', {}))} files")
        except DitarError as exc:
            yield Check(f"champion {champ.name[:7]}", False, str(exc))

def _drift(root: Path, paths: TagPaths) -> Iterator[Check]:
    """The ledger, results and snapshots against the newest backup, when that is a settled run's."""
    try:
        found = state_backup.drift(root, paths)
    except DitarError:
        return  # git cannot tell: the checks above stand alone
    if found:
        changes, m = found
        what = m.subject.split(": ", 1)[-1]
        more = f" (+{len(changes) - 3} more)" if len(changes) > 3 else ""
        yield Check(DRIFT, False, f"{', '.join(changes[:3])}{more} since {trees.state_ref(paths.tag)} "
                                  f"({m.commit[:7]}: {what}); `dit-ar recover --force` restores it")


def state_refusal(root: Path, paths: TagPaths, settle: bool = True) -> str | None:
    """The first failing state check as a gated run's refusal, with the fix; None when all pass."""
    broken = next((c for c in state_checks(root, paths, settle=settle) if not c.ok), None)
    if broken is None:
        return None
    ref = trees.state_ref(paths.tag)
    fix = "" if "dit-ar recover" in broken.detail else (
        f"; restore it with `dit-ar recover --force` (from {ref}), or start a new tag"
        if queries.ref_commit(root, ref) else f"; restore {paths.dir} or start a new tag")
    return f"{broken.name if broken.name in _BARE else broken.name + ' broken'}: {broken.detail}{fix}"


def recover(root: Path, paths: TagPaths, force: bool = False, echo: Callable[[str], None] = print) -> int:
    """`dit-ar recover`: restore a missing or damaged state directory from refs/ditar/<tag>."""
    ref = state_backup.ref(paths)
    if all(c.ok for c in state_checks(root, paths, echo=echo)) and not force:
        raise DitarError(f"{paths.dir} verifies: nothing to recover (--force restores {ref} over it anyway)")
    commit = queries.ref_commit(root, ref)
    if commit is None:
        raise DitarError(f"no backup of tag {paths.tag}: {ref} does not exist in {root}")
    restored = state_backup.restore(root, paths, commit)
    if restored:
        echo(f"recover: restored {state_backup.describe(restored)} from {ref} ({commit[:7]}) into {paths.dir}")
    else:
        echo(f"recover: nothing differed from {ref} ({commit[:7]}); {paths.dir} left as it was")
    failed = [c for c in state_checks(root, paths, echo=echo) if not c.ok]
    for c in failed:
        echo(c.line())
    echo("recover: the state directory verifies" if not failed
         else "recover: the state directory still fails to verify")
    return 0 if not failed else 1


def checks(sess: DitarSession, sample: int = 3, rng: random.Random | None = None,
           echo: Callable[[str], None] | None = None) -> Iterator[Check]:
    yield from state_checks(sess.cfg.root, TagPaths(sess.state_dir), echo=echo)
    try:
        snap = load_snapshot(TagPaths(sess.state_dir).baseline, "baseline", verify=False)
    except DitarError:
        return  # already a failed check above
    recorded = snap.manifest.get("fixed_paths", {})
    changes = fixed_path_changes(recorded, hash_fixed_paths(sess.cfg.root, sess.cfg.fixed_paths))
    yield from _many("fixed paths", changes, f"{len(recorded)} files unchanged since the baseline")
    yield from _champion_trees(sess, snap.manifest)
    yield _git_pins(sess.cfg.root, snap.manifest)
    yield _stamps(sess, snap.manifest)
    if sample > 0:
        yield from _regenerate(sess, snap, sample, rng or random.SystemRandom())


def _champion_trees(sess: DitarSession, manifest: dict[str, Any]) -> Iterator[Check]:
    """Every kept commit's tree against the baseline commit's, outside the mutable paths, from git's
    objects (loop.integrity.judgetree): a KEEP whose commit brought an ini file, a conftest.py or a suite's file
    of its own was decided by code the candidate chose (issue 49), whatever its row says."""
    base = manifest.get("git_sha")
    try:
        kept = [r.commit for r in Ledger(sess.state_dir).rows() if r.status == "KEEP"]
    except LedgerError:
        return  # the chain's check says why
    if not base or not kept:
        return
    problems = []
    for sha in dict.fromkeys(kept):
        try:
            found = judgetree.tree_changes(sess.cfg.root, base, sha, sess.cfg.mutable_paths)
        except DitarError as exc:
            problems.append(f"{sha[:7]} cannot be read: {exc}")
            continue
        problems += [f"{sha[:7]}: {f} outside the mutable paths against the baseline {base[:7]}" for f in found]
    yield from _many("champion trees", problems, f"{len(set(kept))} kept commits differ from the baseline "
                                                 "only under the mutable paths")


def _git_pins(root: Path, manifest: dict[str, Any]) -> Check:
    """The repository's git config and hooks against the baseline's pins (loop.integrity.gitpins)."""
    recorded = manifest.get("git_pins")
    if recorded is None:
        return Check("git config and hooks", True,
                     "not pinned (an older baseline; `dit-ar baseline --force` pins them)")
    why = gitpins.refusal(root, manifest)
    if why:
        return Check("git config and hooks", False, why)
    n = sum(len(k) for k in recorded.get("config", {}).values())
    return Check("git config and hooks", True, f"{n} config keys and {len(recorded.get('hooks', {}))} hook files "
                                               "unchanged since the baseline")


def _stamps(sess: DitarSession, manifest: dict[str, Any]) -> Check:
    """The model's files and the Python environment against the baseline's stamps (loop.integrity.stamps)."""
    if manifest.get("model_files") is None:
        return Check("model and environment", True,
                     "not stamped (an older baseline; `dit-ar baseline --force` stamps them)")
    why = stamps.refusal(manifest, sess.model_dir(), sess.cfg.root)
    if why:
        return Check("model and environment", False, why)
    return Check("model and environment", True, f"{len(manifest['model_files'])} model files and "
                                                f"{len(manifest.get('environment', {}))} environment files unchanged")


def _anchor(ledger: Ledger, digest: str) -> Check:
    try:
        rows = ledger.rows()
    except LedgerError as exc:
        return Check("baseline anchor", False, f"the ledger cannot be read: {exc}")
    found = [ANCHOR.search(r.description) for r in rows if r.status == "BASELINE"]
    anchors = [m.group(1) for m in found if m]
    if not anchors:
        return Check("baseline anchor", False, "no BASELINE row with the manifest's sha256 in the ledger")
    if anchors[-1] != digest:
        return Check("baseline anchor", False,
                     f"manifest sha256 {digest[:12]} != ledger's {anchors[-1][:12]} (manifest edited?)")
    return Check("baseline anchor", True, f"manifest sha256 {digest[:12]} matches the ledger")


def _regenerate(sess: DitarSession, snap: Any, sample: int, rng: random.Random) -> Iterator[Check]:
    """Re-run the baseline code on the fixed batches that hold the sampled items."""
    commit = snap.manifest.get("git_sha")
    if not commit:
        yield Check("regenerate", False, "the baseline manifest records no commit")
        return
    corpus = [it for it in sess.suite.corpus if it.id in snap.manifest.get("items", {})]
    picked = {it.id for it in rng.sample(corpus, min(sample, len(corpus)))}
    device, stored_on = sess.resolved_device(), snap.manifest.get("device")
    where = f" (stored on {stored_on}, now {device})" if stored_on and stored_on != device else ""
    try:
        pipe = baseline_pipeline(sess, commit)
    except Exception as exc:  # noqa: BLE001
        yield Check("regenerate", False, f"baseline code {commit[:7]} could not be built: {type(exc).__name__}: {exc}")
        return
    t = sess.cfg.thresholds_for("exact")
    for group in batches(sess.suite.corpus, sess.suite, sess.suite.pipeline.batch):
        if not picked & {it.id for it in group}:
            continue
        try:
            outs = run_batch(pipe, group, sess.suite, sess.cfg.item_timeout_s)
        except CandidateError as exc:
            yield Check("regenerate", False, f"baseline code failed on {group[0].id}..: {exc.message}")
            continue
        for out in outs:
            if out.item_id not in picked:
                continue
            ref = snap.output(out.item_id)
            m = compute_metrics(out.latents, out.image, ref.latents, ref.image)
            res = check_contract(out.item_id, "exact", m, t)
            nums = f"latent_rel_l2={m.latent_rel_l2:.3g} psnr={m.psnr:.4g}dB"
            yield Check(f"regenerate {out.item_id}", res.passed,
                        (f"matches the snapshot ({nums}){where}" if res.passed
                         else f"{res.failures[0]} ({nums}){where}"))


def verify(sess: DitarSession, sample: int = 3, echo: Callable[[str], None] = print) -> int:
    """Print one line per check; 0 when all pass, 1 otherwise."""
    ok = True
    for c in checks(sess, sample, echo=echo):
        ok &= c.ok
        echo(c.line())
    echo("verify: all checks passed" if ok else "verify: FAILED")
    return 0 if ok else 1

"""`dit-ar verify`: re-check everything the loop trusts, one line per check.

- the ledger and the baseline are there (a missing one is a failure, not an empty verify);
- the baseline snapshot's files against its manifest (sha256 per file), and the manifest itself
  against the hash that `baseline` anchored in the ledger (so an edited manifest is caught too);
- every champion snapshot's files against its manifest;
- the ledger's hash chain (an edited, deleted or reordered row breaks it);
- the fixed paths against the hashes recorded at baseline time;
- a sample of baseline items re-generated from the baseline commit's code (a git worktree),
  which must match the stored outputs within the exact class's tolerance.
"""
from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from pytest_ditar.core.errors import CandidateError, DitarError
from pytest_ditar.store.ledger import Ledger
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.vcs import repo as gitops

ANCHOR = re.compile(r"baseline manifest sha256=([0-9a-f]{64})")
MAX_LINES = 10  # problems listed per check before "(+N more)"


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


def state_checks(root: Path, paths: TagPaths) -> Iterator[Check]:
    """What the verdicts rest on, in the tag's state directory: the baseline snapshot, its anchor in
    the ledger, the ledger's chain and the champions. A missing ledger or baseline is a failure
    (never "0 rows, verifies"); the gate runs these before any candidate code, `dit-ar verify`,
    `dit-ar status` and `dit-ar recover` run them too."""
    from pytest_ditar.store.snapshot import MANIFEST, load_snapshot, verify_snapshot

    backup = gitops.ref_commit(root, gitops.state_ref(paths.tag))
    fix = f" (restore it with `dit-ar recover`, from {gitops.state_ref(paths.tag)})" if backup else ""
    if not paths.dir.is_dir():
        yield Check("state directory", False, f"{paths.dir} missing{fix or ' (run `dit-ar init`)'}")
        return
    ledger = Ledger(paths.dir)
    has_ledger = ledger.jsonl_path.is_file()
    if not has_ledger:
        yield Check("ledger", False, f"{ledger.jsonl_path.name} missing{fix or ' (restore it, or start a new tag)'}")
    snap = None
    if not (paths.baseline / MANIFEST).is_file():
        yield Check("baseline", False, f"{paths.baseline.name} missing{fix or ' (run `dit-ar baseline`)'}")
    else:
        try:
            snap = load_snapshot(paths.baseline, "baseline", verify=False)
        except DitarError as exc:
            yield Check("baseline snapshot", False, str(exc))
    if snap is not None:
        yield from _many("baseline files", verify_snapshot(snap), f"{len(snap.manifest.get('files', {}))} files match the manifest")
        if has_ledger:
            yield _anchor(ledger, hashlib.sha256((snap.path / MANIFEST).read_bytes()).hexdigest())
    if has_ledger:
        report = ledger.verify()
        yield from _many("ledger chain", list(report.problems), f"{report.n_rows} rows")
    for champ in sorted(paths.champions.glob("[!.]*")) if paths.champions.is_dir() else []:
        try:
            c = load_snapshot(champ, "champion", verify=False)
            yield from _many(f"champion {champ.name[:7]} files", verify_snapshot(c), f"{len(c.manifest.get('files', {}))} files")
        except DitarError as exc:
            yield Check(f"champion {champ.name[:7]}", False, str(exc))


def state_refusal(root: Path, paths: TagPaths) -> str | None:
    """The first failing state check as a gated run's refusal, with the fix; None when all pass."""
    broken = next((c for c in state_checks(root, paths) if not c.ok), None)
    if broken is None:
        return None
    ref = gitops.state_ref(paths.tag)
    fix = "" if "dit-ar recover" in broken.detail else (
        f"; restore it with `dit-ar recover --force` (from {ref}), or start a new tag"
        if gitops.ref_commit(root, ref) else f"; restore {paths.dir} or start a new tag")
    return f"{broken.name} broken: {broken.detail}{fix}"


def checks(sess: Any, sample: int = 3, rng: random.Random | None = None) -> Iterator[Check]:
    from pytest_ditar.loop.guards import fixed_path_changes, hash_fixed_paths
    from pytest_ditar.store.snapshot import load_snapshot

    yield from state_checks(sess.cfg.root, TagPaths(sess.state_dir))
    try:
        snap = load_snapshot(sess.baseline_dir, "baseline", verify=False)
    except DitarError:
        return  # already a failed check above
    recorded = snap.manifest.get("fixed_paths", {})
    changes = fixed_path_changes(recorded, hash_fixed_paths(sess.cfg.root, sess.cfg.fixed_paths))
    yield from _many("fixed paths", changes, f"{len(recorded)} files unchanged since the baseline")
    if sample > 0:
        yield from _regenerate(sess, snap, sample, rng or random.SystemRandom())


def _anchor(ledger: Ledger, digest: str) -> Check:
    from pytest_ditar.store.ledger import LedgerError

    try:
        rows = ledger.rows() if ledger.jsonl_path.exists() else []
    except LedgerError as exc:
        return Check("baseline anchor", False, f"the ledger cannot be read: {exc}")
    anchors = [ANCHOR.search(str(r.get("description", ""))) for r in rows if r.get("status") == "BASELINE"]
    anchors = [m.group(1) for m in anchors if m]
    if not anchors:
        return Check("baseline anchor", False, "no BASELINE row with the manifest's sha256 in the ledger")
    if anchors[-1] != digest:
        return Check("baseline anchor", False, f"manifest sha256 {digest[:12]} != ledger's {anchors[-1][:12]} (manifest edited?)")
    return Check("baseline anchor", True, f"manifest sha256 {digest[:12]} matches the ledger")


def _regenerate(sess: Any, snap: Any, sample: int, rng: random.Random) -> Iterator[Check]:
    """Re-run the baseline code on the fixed batches that hold the sampled items."""
    from pytest_ditar.core.quality import check_contract, compute_metrics
    from pytest_ditar.loop.holdout import baseline_pipeline
    from pytest_ditar.runtime.harness import batches, run_batch

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
                        (f"matches the snapshot ({nums}){where}" if res.passed else f"{res.failures[0]} ({nums}){where}"))


def verify(sess: Any, sample: int = 3, echo=print) -> int:
    """Print one line per check; 0 when all pass, 1 otherwise."""
    ok = True
    for c in checks(sess, sample):
        ok &= c.ok
        echo(c.line())
    echo("verify: all checks passed" if ok else "verify: FAILED")
    return 0 if ok else 1

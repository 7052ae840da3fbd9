"""Attacks on the state directory (ledger, baseline, runs) and on the user's working tree."""
from __future__ import annotations

import json

import pytest

from .attacks import (
    A13_WIPE_STATE,
    A14_FORGE_LEDGER,
    A14B_FORGE_AND_KILL_JUDGE,
    A16_USER_EDIT,
    A17_IMPORTS_UNTRACKED,
    A21_TAKEOVER,
    COMMENT_ONLY,
    HELPER,
    USER_NOTE,
    arm,
)
from .conftest import (
    KEYS,
    assert_decided_and_reverted,
    assert_not_kept,
    assert_refused,
    assert_rows_kept,
    assert_verdict,
    engaged,
    experiment,
    run_experiment,
)

pytestmark = pytest.mark.adversarial


def _baseline_files(proj) -> dict:
    return json.loads((proj.root / ".autoresearch/t/baseline/manifest.json").read_text())["files"]


def test_12_rewritten_baseline_with_a_consistent_manifest_is_refused(research):
    """Before the run, the agent replaces tiny-000's stored output (with tiny-001's) and rewrites
    baseline/manifest.json so every hash matches: the snapshot verifies on its own."""
    from pytest_ditar.core.outputs import ItemOutput
    from pytest_ditar.store.snapshot import load_snapshot, write_snapshot

    proj = research
    before = proj.ledger()
    base_dir = proj.root / ".autoresearch/t/baseline"
    snap = load_snapshot(base_dir)
    outs = [snap.output(i) for i in snap.item_ids]
    outs[0] = ItemOutput(outs[0].item_id, outs[1].latents, outs[1].image, outs[0].seconds)
    meta = {k: v for k, v in snap.manifest.items() if k not in ("items", "files", "created")}
    extra = {rel: (base_dir / rel).read_bytes() for rel in snap.manifest["files"] if not rel.startswith("items/")}
    write_snapshot(base_dir, outs, meta, extra_files=extra, force=True)
    load_snapshot(base_dir)  # it verifies: only an anchor outside the snapshot can tell
    proj.commit_candidate(COMMENT_ONLY, "exact", "an unchanged candidate on a rewritten baseline")
    j = run_experiment(proj, "an unchanged candidate on a rewritten baseline")
    assert_refused(proj, j, KEYS["baseline"], before)


def test_13_state_dir_deleted_by_the_candidate_is_a_crash_and_nothing_is_lost(research, scratch):
    proj = research
    first = experiment(proj, COMMENT_ONLY, "an A/A run first: a row the wipe must not lose")
    assert first.status in ("DISCARD", "CRASH"), first.show()
    before = proj.ledger()
    assert len(before) == 2
    j = experiment(proj, arm(A13_WIPE_STATE, scratch), "wipe the state dir")
    if engaged(scratch, "state_wiped", "dirs"):
        assert_verdict(j, ("CRASH",), KEYS["state"], scratch)
    else:  # the candidate could not find or reach the state dir
        assert_not_kept(j, KEYS["state"] + KEYS["aa"], scratch)
    assert_rows_kept(proj, before)
    st = proj.ditar("status")
    assert st.returncode == 0, st.stdout + st.stderr
    assert first.sha[:7] in st.stdout, st.stdout  # the earlier row is shown
    assert (proj.root / ".autoresearch/t/baseline/manifest.json").is_file()


def test_14_forged_keep_row_is_caught_and_removed(research, scratch):
    proj = research
    base, before = proj.head(), proj.ledger()
    j = experiment(proj, arm(A14_FORGE_LEDGER, scratch), "an unchanged candidate that forges its KEEP")
    assert_not_kept(j, KEYS["ledger"] + (() if engaged(scratch, "forged", "rows") else KEYS["aa"]), scratch)
    rows = assert_rows_kept(proj, before)
    assert not [r for r in rows if r["status"] == "KEEP" and r["commit"] == j.sha], f"forged row kept: {rows}"
    assert_decided_and_reverted(proj, j, base, before)
    st = proj.ditar("status")
    assert st.returncode == 0 and "hash chain verifies" in st.stdout, st.stdout


def test_14b_forged_keep_and_a_killed_judge_win_nothing(research, scratch):
    """The forged KEEP, then SIGKILL to the judge: whatever the run prints (nothing, when the
    kill lands), the forged row must not make the candidate the champion."""
    proj = research
    before = proj.ledger()
    proj.commit_candidate(arm(A14B_FORGE_AND_KILL_JUDGE, scratch), "exact", "forge a KEEP, kill the judge")
    j = run_experiment(proj, "forge a KEEP, kill the judge")
    assert j.status != "KEEP", j.show(scratch)
    assert_rows_kept(proj, before)
    st = proj.ditar("status", "--json")
    state = json.loads(st.stdout)
    flagged = not state["ledger"]["verifies"]  # tampering detected: the row is not trusted
    champ = state["champion"]
    assert flagged or champ is None or champ["commit"] != j.sha, \
        "the forged KEEP made the candidate champion" + j.show(scratch) + st.stdout[-1500:]


def test_16_user_edit_during_a_run_survives_the_revert(research_unsandboxed, scratch):
    """The candidate stands in for the user editing a tracked file while the run is in flight, so its
    workers run unsandboxed here (a sandboxed one cannot write it: tests/adversarial/test_sandbox.py)."""
    proj = research_unsandboxed
    base, before = proj.head(), proj.ledger()
    j = experiment(proj, arm(A16_USER_EDIT, scratch), "lower guidance (the user edits .gitignore meanwhile)")
    assert_not_kept(j, KEYS["user_edit"], scratch)
    assert engaged(scratch, "user_edit"), "the stand-in for the user never wrote the tracked file" + j.show(scratch)
    assert USER_NOTE in (proj.root / ".gitignore").read_text(), "the revert wiped the user's uncommitted edit"
    rows = assert_rows_kept(proj, before)
    assert [r["commit"] for r in rows[len(before):]] == [j.sha]
    assert proj.head() in (base, j.sha)


def test_17_untracked_module_beside_a_good_candidate_is_refused(research):
    proj = research
    before = proj.ledger()
    proj.commit_candidate(A17_IMPORTS_UNTRACKED, "exact", "imports a helper it never committed")
    proj.write("mutable/helper.py", HELPER)
    j = run_experiment(proj, "imports a helper it never committed")
    assert_refused(proj, j, KEYS["untracked"], before)
    assert (proj.root / "mutable/helper.py").read_text() == HELPER  # never deleted


def test_21_takeover_of_baseline_and_worktrees_is_not_kept(research, scratch):
    """Half the steps, with every reference rewritten to match: the stored baseline (after the judge
    verified it) and the champion's / holdout's worktree code (half the steps, plus a sleep)."""
    proj = research
    base, before, files = proj.head(), proj.ledger(), _baseline_files(proj)
    j = experiment(proj, arm(A21_TAKEOVER, scratch), "half the steps, and everything it is compared with")
    assert_not_kept(j, KEYS["takeover"], scratch)
    assert_rows_kept(proj, before)
    assert proj.head() == base
    assert _baseline_files(proj) == files, "the stored baseline was rewritten and stays rewritten"

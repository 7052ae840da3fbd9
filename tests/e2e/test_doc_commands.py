"""Every command the README and program.md show, run in order as written, in a scratch project
(long: each doc's whole sequence, real gated runs included). The extraction and the conventions
live in tests/integration/repo/test_docs_commands.py."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import time

import pytest

from pytest_ditar.loop.run.tryout import EXIT as TRY_EXIT

from candidates import REDUNDANT, STOCK
from conftest import REPO, make_project, research_project
from integration.repo.test_docs_commands import (
    DOCS,
    EDIT,
    EXPECTED_STATUS,
    VERDICT_STATUS,
    _checks,
    _env,
    extract,
    setup_runnable,
    substitute,
)


@pytest.mark.parametrize("doc", DOCS)
def test_doc_commands_run(doc, pytester, model_cache):
    cmds = extract(doc, (REPO / doc).read_text())
    assert cmds, f"no commands found in {doc}"
    proj = make_project(pytester, mutable_source=REDUNDANT)
    root = proj.root
    # The rest of a checkout that the docs touch: the manual, the handbook, the real ignore rules.
    shutil.copy(REPO / "program.md", root / "program.md")
    shutil.copytree(REPO / "knowledge/handbook", root / "knowledge/handbook", ignore=shutil.ignore_patterns(".index"))
    shutil.copy(REPO / ".gitignore", root / ".gitignore")
    proj.git("add", "-A")
    proj.git("commit", "-qm", "docs and handbook")
    env = _env(model_cache)
    seen: dict[tuple[str, str], int] = {}
    used: set[tuple] = set()
    edited = False
    timings = []
    for c in cmds:
        if c.marker == "ci":
            continue  # checked in test_docs_conventions; running it would run this test again
        text = setup_runnable(c) if c.marker == "setup" else c.text
        if text is None:
            continue
        text = substitute(text)
        if not edited and EDIT.match(text):
            proj.write("mutable/pipeline.py", STOCK)  # "# edit mutable/ (one hypothesis)"
            edited = True
        expected = 0 if not re.search(r"dit-ar .*(experiment|try) ", text) else None
        for (d, sub, occ), status in EXPECTED_STATUS.items():
            if d == doc and sub in text:
                k = (d, sub)
                n = seen.get(k, 0)
                seen[k] = n + 1
                if n == occ:
                    expected = status
                    used.add((d, sub, occ))
        t0 = time.perf_counter()
        res = subprocess.run(["bash", "-c", text], cwd=root, env=env, capture_output=True, text=True, timeout=300)
        timings.append((round(time.perf_counter() - t0, 1), text[:60]))
        out = res.stdout + res.stderr
        if expected is None:  # experiment, try: the status the verdict (or try's outcome) line promises
            last = (res.stdout.strip().splitlines() or [""])[-1]
            if last.startswith("DITAR TRY: "):
                expected = TRY_EXIT.get(last.split()[2], -1)
            else:
                expected = VERDICT_STATUS.get(last.split()[2] if last.startswith("DITAR VERDICT: ") else "", -1)
        assert res.returncode == expected, (f"{doc}:{c.line}: `{text}` exited {res.returncode}, expected {expected}\n"
                                            f"{out[-4000:]}")
        _checks(doc, text, res.stdout, root)
    stale = {k for k in EXPECTED_STATUS if k[0] == doc} - used
    assert not stale, f"EXPECTED_STATUS entries that matched no command in {doc}: {stale}"
    assert edited, f"{doc}: no command before which the documented edit of mutable/ happens"
    print(doc, timings)


def test_verdict_json_example_runs_as_written(pytester, model_cache, tmp_path_factory):
    """docs/verdict-json.md's block on a committed candidate: the run judges it (never `guard
    clean_tree: untracked file run.log`), its document lands outside the tree, and jq reads it."""
    doc = "docs/verdict-json.md"
    cmds = [c.text for c in extract(doc, (REPO / doc).read_text()) if c.marker == "verdict-json"]
    proj = research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT)
    proj.commit_candidate(STOCK, "exact", "Fuse qkv")
    outside = tmp_path_factory.mktemp("outside-the-repo")
    env = {**_env(model_cache), "TMPDIR": str(outside)}
    res = subprocess.run(["bash", "-c", cmds[0]], cwd=proj.root, env=env, capture_output=True, text=True, timeout=300)
    log = (outside / "run.log").read_text()
    verdict = json.loads((outside / "verdict.json").read_text())
    assert verdict["verdict"] in ("KEEP", "DISCARD") and "untracked" not in log, log[-3000:]
    assert res.returncode == verdict["exit_status"] == VERDICT_STATUS[verdict["verdict"]], log[-3000:]
    assert log.strip().splitlines()[-1] == verdict["line"]  # the verdict line, on stderr
    res = subprocess.run(["bash", "-c", cmds[1]], cwd=proj.root, env=env, capture_output=True, text=True, timeout=60)
    said = res.stdout.splitlines()
    assert res.returncode == 0 and said[0] == verdict["verdict"], res
    assert said[1] == "null" if verdict["speedup"] is None else abs(float(said[1]) - verdict["speedup"]) < 1e-9, said
    assert proj.git("status", "--porcelain") == ""  # nothing the example wrote lies in the tree

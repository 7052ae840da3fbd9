"""Issue 43: the guard from a fresh clone on an ephemeral CI runner, read the way GitHub Actions
reads it. A research clone KEEPs a change and pushes its branch and refs/ditar/*; a shallow clone
(actions/checkout's default depth) is refused with the command that brings the state, runs that
command (`dit-ar fetch-state`), and then runs `pytest --ditar-guard` twice with the GitHub
variables pointing at temporary files: the unchanged tree PASSes, a planted 50% slowdown FAILs.
The step summary, the annotations and the outputs hold what each run decided, and each run's
--ditar-json document validates against the shipped schema."""
import json
import os
import subprocess
import sys
from pathlib import Path

from pytest_ditar.core.ci import md_text

from candidates import REDUNDANT, STOCK, slowed
from conftest import research_project, shared_perf
from jsonschemas import available, validate

# test_guard.py's settings: every lane grows until a slowdown beyond the tolerance is shown or
# ruled out; the planted slowdown (50%) is over three times the tolerance (15%), for a loaded CI box.
PERF = shared_perf(max_rounds=96, lane_budget_s=20.0)  # its baseline taken whatever the box's load
TOLERANCE = "--ditar-guard-tolerance=0.15"


def _git(cwd: Path, *args: str) -> str:
    res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    assert res.returncode == 0, f"git {' '.join(args)}: {res.stderr}"
    return res.stdout.strip()


def _run(cwd: Path, *cmd: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, timeout=400,
                          env={**os.environ, **(env or {})})


def _guard(clone: Path, gh: dict, json_path: Path) -> tuple[subprocess.CompletedProcess, str]:
    res = _run(clone, sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--ditar-guard", "--ditar-tag=t",
               TOLERANCE, f"--ditar-json={json_path}", f"--junitxml={json_path.parent / 'junit.xml'}", env=gh)
    lines = res.stdout.strip().splitlines()
    # the runner reads commands only after the gate resumes them: its own annotations, then the last line
    commands = [ln for ln in lines if ln.startswith("::")]
    token = commands[0].removeprefix("::stop-commands::")
    assert commands[0] != token and commands[1] == f"::{token}::", commands
    assert lines[lines.index(commands[1]) + 1:-1] == commands[2:], lines[-10:]
    return res, lines[-1] if lines else ""


def _outputs(path: Path) -> list[dict[str, str]]:
    """$GITHUB_OUTPUT's `name=value` lines, one dict per run (each run starts with `verdict=`)."""
    runs: list[dict[str, str]] = []
    for line in path.read_text().splitlines():
        key, _, value = line.partition("=")
        if key == "verdict":
            runs.append({})
        runs[-1][key] = value
    return runs


def test_fresh_clone_fetches_the_state_and_guards_for_github_actions(pytester, model_cache, tmp_path_factory):
    research = research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT, config={"perf": PERF})
    sha, res, line = research.experiment_judged(STOCK, "exact", "Drop the redundant pass")
    assert line.startswith("DITAR VERDICT: KEEP "), res.stdout[-3000:] + res.stderr[-2000:]

    remote = tmp_path_factory.mktemp("remote") / "project.git"
    _git(remote.parent, "init", "-q", "--bare", "-b", "main", str(remote))
    research.git("remote", "add", "origin", str(remote))
    # the kept change merged to main, the research branch, and the state's backup
    research.git("push", "-q", "origin", "autoresearch/t", "autoresearch/t:main", "refs/ditar/*:refs/ditar/*")

    clone = tmp_path_factory.mktemp("runner") / "checkout"
    _git(clone.parent, "clone", "-q", "--depth", "1", f"file://{remote}", str(clone))
    assert _git(clone, "rev-parse", "HEAD") == sha and not (clone / ".autoresearch").exists()
    gh_dir = tmp_path_factory.mktemp("github")
    gh = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(gh_dir / "step_summary.md"),
          "GITHUB_OUTPUT": str(gh_dir / "output")}
    for f in ("step_summary.md", "output"):
        (gh_dir / f).write_text("")

    # no state in the clone: one clear refusal that names the command
    res, last = _guard(clone, gh, gh_dir / "refused.verdict.json")
    assert res.returncode == 4 and last.startswith("DITAR REFUSED: no research state for tag t"), res.stdout[-2000:]
    assert "`dit-ar fetch-state --remote origin --tag t`" in last, last
    refused = json.loads((gh_dir / "refused.verdict.json").read_text())
    assert refused["kind"] == "guard" and refused["verdict"] == "REFUSED" and refused["exit_status"] == 4
    assert any(ln.startswith("::error title=ditar guard REFUSED::no research state") for ln in res.stdout.splitlines())

    (gh_dir / "output").write_text("")
    fetched = _run(clone, str(Path(sys.executable).parent / "dit-ar"), "fetch-state", "--remote", "origin", env=gh)
    out = fetched.stdout + fetched.stderr
    assert fetched.returncode == 0, out
    assert "from origin refs/ditar/t" in out and "tag t verifies; next: pytest --ditar-guard --ditar-tag=t" in out, out
    base = json.loads((clone / ".autoresearch/t/baseline/manifest.json").read_text())["git_sha"]
    assert f"fetched commit {base[:7]} from origin" in out, out  # the shallow clone lacked the baseline's commit
    assert _git(clone, "status", "--porcelain") == ""  # the state is git-ignored; nothing else changed
    assert (gh_dir / "output").read_text() == "tag=t\n"  # the tag it chose, for the guard's step (action.yml)
    runs = sorted((clone / ".autoresearch/t/runs").iterdir())  # the research clone's runs, restored
    assert [r.name for r in runs] == sorted(r.name for r in (research.root / ".autoresearch/t/runs").iterdir())
    assert (runs[-1] / "summary.json").is_file()

    # 1. the unchanged tree
    for f in ("step_summary.md", "output"):
        (gh_dir / f).write_text("")
    res, last = _guard(clone, gh, gh_dir / "pass.verdict.json")
    assert res.returncode == 0 and last.startswith("DITAR GUARD: PASS "), res.stdout[-3000:]
    passed = json.loads((gh_dir / "pass.verdict.json").read_text())
    assert passed["verdict"] == "PASS" and passed["line"] == last and passed["failures"] == []
    assert passed["lane"] == "latency_b1" and passed["speedup"] == passed["lanes"]["latency_b1"]["speedup"]
    assert not [ln for ln in res.stdout.splitlines() if ln.startswith("::error")], res.stdout[-2000:]
    for lane in passed["unresolved"]:  # a PASS that could not settle a lane warns, naming it
        # the title is a property: its ':' escaped (core.ci.escape_property), as GitHub reads it
        assert f"::warning title=ditar guard%3A lane {lane} unresolved::" in res.stdout, res.stdout[-2000:]
    junit = (gh_dir / "junit.xml").read_text()
    assert '<property name="ditar.verdict" value="PASS"' in junit and 'name="ditar.speedup"' in junit, junit[:800]

    # 2. a planted 30% slowdown, left uncommitted in the working tree as a CI job's checkout of a PR would have it
    (clone / "mutable/pipeline.py").write_text(slowed(0.30))
    res, last = _guard(clone, gh, gh_dir / "fail.verdict.json")
    assert res.returncode == 1 and last.startswith("DITAR GUARD: FAIL: lane "), res.stdout[-3000:]
    failed = json.loads((gh_dir / "fail.verdict.json").read_text())
    assert failed["verdict"] == "FAIL" and failed["failing_lanes"] and failed["lane"] == failed["failing_lanes"][0]
    assert failed["speedup"] < 0.85 and failed["ci95"][1] < 1.0, failed
    errors = [ln for ln in res.stdout.splitlines() if ln.startswith("::error title=ditar guard FAIL::")]
    escaped = [f.replace("%", "%25") for f in failed["failures"]]  # as the runner reads them
    assert errors and all(ln.split("::", 2)[2] in escaped for ln in errors), errors
    assert f"lane {failed['lane']}: " in errors[0] and "slower beyond the 15% tolerance" in res.stdout

    outputs = _outputs(Path(gh["GITHUB_OUTPUT"]))
    assert [o["verdict"] for o in outputs] == ["PASS", "FAIL"], outputs
    assert [o["exit_status"] for o in outputs] == ["0", "1"]
    assert outputs[1]["lane"] == failed["lane"] and float(outputs[1]["speedup"]) == failed["speedup"]
    assert float(outputs[1]["ci_low"]) == failed["ci95"][0] and float(outputs[1]["ci_high"]) == failed["ci95"][1]
    summary = Path(gh["GITHUB_STEP_SUMMARY"]).read_text()
    assert summary.count("### pytest-ditar guard: ") == 2, summary
    assert "guard: **PASS** (tolerance 15%)" in summary and "guard: **FAIL** (tolerance 15%)" in summary, summary
    # a failure may quote the candidate's text: the summary holds it escaped (it renders as the same text)
    assert f"- {md_text(failed['failures'][0])}" in summary and f"| {failed['lane']} | " in summary, summary
    assert sorted((clone / ".autoresearch/t/runs").iterdir()) == runs  # the guard records nothing
    if available():
        for doc in (refused, passed, failed):
            validate(doc, "verdict")

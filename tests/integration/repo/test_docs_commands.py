"""Every command in README.md, program.md and docs/*.md runs, on the tiny suite, in a scratch project,
or is marked as an example: the extraction and its conventions here, the runs themselves in
tests/e2e/test_doc_commands.py (CI's e2e step).

Convention (the docs rely on it; keep them in step):

- A command is a line of a ```bash (or ```sh) fenced block: every non-blank line that is not a
  `#` comment runs (a trailing `\\` joins the next line). In a 4-space indented block (README
  style) a line runs when its first word is one of COMMAND_WORDS; other lines there are sample
  output or prose. A fenced block of any other language may not contain a command.
- An HTML comment on the line(s) just before a block changes how it is tested (it does not show
  when the Markdown is rendered, and a copied line stays exact):
  `<!-- docs-test: setup -->`: the `&&` segments that create or activate the venv or run
  `pip install` are not run here (they install packages); they must agree with `.ci/run`, and the
  rest of the line runs. `<!-- docs-test: ci -->`: the line is CI's own test command; it must be
  `.ci/run`'s venv + test line verbatim and is not run here (it would run this test again).
  `<!-- docs-test: verdict-json -->`: docs/verdict-json.md's example, run as written on a committed
  candidate (tests/e2e/test_doc_commands.py). `<!-- docs-test: example -->`: a block that needs what
  no scratch project has (a GPU, a second host, a remote, a scheduler); not run, but each line is
  checked here (check_example): a `dit-ar` line parses with dit-ar's own parser, a `pip install`
  installs this checkout, a script it runs exists. Every other block of a doc outside DOCS fails
  test_every_doc_command_runs_or_is_an_example.
- Placeholders (`<tag>`, `<class>`, `"<...>"`) are replaced through PLACEHOLDERS; any `<...>` left
  over fails the test. The prose step "# edit mutable/ ..." is performed by the test (EDIT):
  the scratch baseline does a redundant full pass, and the edit removes it, a real exact 2x
  speedup, so the documented `experiment` is a KEEP.
- Each command runs with `bash -c` in the project root, in document order, and must exit 0
  unless EXPECTED_STATUS says otherwise (`experiment`: 0 on KEEP, 1 on DISCARD, see
  VERDICT_STATUS); _checks asserts on the output of some (verdict line, demo, search, status).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO

DOCS = ("README.md", "program.md")
MARKERS = ("setup", "ci", "example", "verdict-json")
COMMAND_WORDS = {"dit-ar", "pytest", "git", "python", "python3", "pip", "bash", "sed", "export", "cat", "tail", "ls"}
PLACEHOLDERS = {
    "<tag>": "docs",
    "<class>": "exact",
    '"<hypothesis>"': '"Drop the redundant full pass"',
    '"<mechanism bottleneck model/hardware terms>"': '"cuda graphs scheduler batch 1 a5500"',
}
# The line before which the test performs the documented edit of mutable/ (first match per doc).
EDIT = re.compile(r"^(git commit|python -m pytest -m quality)")
# (doc, substring of the command, occurrence among commands containing it) -> exit status.
EXPECTED_STATUS = {
    # doctor before `init` and `baseline`: the branch and baseline rows FAIL (program.md says so).
    ("README.md", "doctor", 0): 1,
    ("program.md", " doctor", 0): 1,
}
# `experiment` exits 0 on KEEP and 1 on DISCARD. The edit is a real 2x exact speedup, but on a
# shared 2-core box the lane can be too noisy to decide (UNSTABLE, a DISCARD), so either verdict
# passes as long as the exit status matches it and quality and guards held (see _checks).
VERDICT_STATUS = {"KEEP": 0, "DISCARD": 1}
SETUP_SEGMENT = re.compile(r"^(python3 -m venv \S+|\. \S+/bin/activate|pip install .+)$")
PLACEHOLDER_LEFT = re.compile(r"<[A-Za-z][^<>]*>")


@dataclass
class Command:
    doc: str
    line: int
    text: str
    marker: str | None  # one of MARKERS, or None


def extract(doc: str, text: str) -> list[Command]:
    cmds: list[Command] = []
    lines = text.splitlines()
    i, marker = 0, None
    while i < len(lines):
        line = lines[i]
        m = re.match(r"\s*<!--\s*docs-test:\s*([\w-]+)\s*-->\s*$", line)
        if m:
            marker = m.group(1)
            assert marker in MARKERS, f"{doc}:{i + 1}: unknown docs-test marker {marker!r}"
            i += 1
            continue
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence:
            lang, body, start = fence.group(1), [], i + 2  # 1-based line of the block's first line
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            i += 1
            if lang in ("bash", "sh"):
                cmds += _block(doc, start, body, marker, every_line=True)
            else:
                bad = [line for line in body if line.split() and line.split()[0] in COMMAND_WORDS]
                assert not bad, f"{doc}:{start}: commands in a ```{lang} block (use ```bash): {bad}"
            marker = None
            continue
        if line.startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            body, start = [], i + 1
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                body.append(lines[i][4:])
                i += 1
            cmds += _block(doc, start, body, marker, every_line=False)
            marker = None
            continue
        if line.strip():
            marker = None if not line.lstrip().startswith("<!--") else marker
        i += 1
    return cmds


def _block(doc: str, start: int, body: list[str], marker: str | None, every_line: bool) -> list[Command]:
    out, pending, first = [], "", None
    for n, raw in enumerate(body):
        s = raw.strip()
        if not pending and (not s or s.startswith("#")):
            continue
        if not pending:
            first = start + n
        if s.endswith("\\"):
            pending += s[:-1].rstrip() + " "
            continue
        s, pending = pending + s, ""
        if every_line or s.split()[0] in COMMAND_WORDS:
            out.append(Command(doc, first, s, marker))
    assert not pending, f"{doc}:{start}: a block ends in a line continuation"
    return out


def substitute(cmd: str) -> str:
    for k, v in PLACEHOLDERS.items():
        cmd = cmd.replace(k, v)
    left = PLACEHOLDER_LEFT.findall(cmd)
    assert not left, f"placeholder(s) {left} in {cmd!r}: add them to PLACEHOLDERS"
    return cmd


def ci_command() -> str:
    """.ci/run's main command: the one that makes the venv and runs `pytest tests` (the
    adversarial battery follows it as a step of its own)."""
    lines = [line.strip() for line in (REPO / ".ci/run").read_text().splitlines() if line.startswith("python3 -m venv")]
    assert len(lines) == 1, ".ci/run must have exactly one venv + test line"
    return lines[0]


def venv_of(line: str) -> str | None:
    """The venv a `python3 -m venv DIR && . DIR/bin/activate && ...` line makes and activates
    (the same DIR in both), or None when it makes none."""
    made = re.match(r"python3 -m venv (\S+) && \. (\S+)/bin/activate( &&|$)", line)
    if not made:
        return None
    assert made.group(1) == made.group(2), f"{line!r} activates another venv than it makes"
    return made.group(1)


def setup_runnable(cmd: Command) -> str | None:
    """Check a `setup` line's install segments (its own venv, pinned packages, this project); return
    what still runs."""
    segments = cmd.text.split(" && ")
    ours = venv_of(cmd.text)
    assert ours, f"{cmd.doc}:{cmd.line}: the set-up line makes no venv of its own"
    # the demo's venv and the tests' are two: the tests install another torch and the evaluators
    assert ours != venv_of(ci_command()), f"{cmd.doc}:{cmd.line}: the set-up line reuses .ci/run's venv {ours}"
    rest = []
    for seg in segments:
        if not SETUP_SEGMENT.match(seg):
            rest.append(seg)
            continue
        if seg.startswith("pip install"):
            args = [a for a in shlex.split(seg)[2:] if a != "-q"]
            assert args, seg
            for a in args:  # pinned packages, or this project (extras that exist)
                ok = re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.+]*", a) or a == "-e" or \
                    re.fullmatch(r"\.(\[[a-z,]+\])?", a)
                assert ok, f"{cmd.doc}:{cmd.line}: unexpected pip argument {a!r}"
    installs = [s for s in segments if s.startswith("pip install")]
    assert any(" -e " in s for s in installs), f"{cmd.doc}:{cmd.line}: the set-up line does not install the project"
    return " && ".join(rest) or None


def test_docs_conventions():
    """Static checks: program.md's length, the CI command, the flags the docs name."""
    program = (REPO / "program.md").read_text()
    assert len(program.splitlines()) <= 150, "program.md must stay short enough to keep in context"
    head = program.split("## 1.", 1)[0]
    assert "**You CAN**" in head and "**You CANNOT**" in head, "program.md opens with its CAN/CANNOT lists"
    assert "results.tsv" not in "".join(c.text for c in extract("program.md", program)), \
        "the agent reads the ledger through `dit-ar status -n 5`, not by tailing results.tsv"
    readme_cmds = extract("README.md", (REPO / "README.md").read_text())
    ci = [c for c in readme_cmds if c.marker == "ci"]
    assert [c.text for c in ci] == [ci_command()], "the README's test command must be .ci/run's test line verbatim"
    assert any(c.marker == "setup" for c in readme_cmds), "README's set-up line lost its docs-test marker"
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for c in readme_cmds:
        for group in re.findall(r"-e '?\.\[([a-z,]+)\]", c.text):
            assert set(group.split(",")) <= set(extras), f"README:{c.line}: unknown extra in {group}"
    # Every `--flag` in program.md's command reference table exists on that subcommand.
    from pytest_ditar.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices
    table = program.split("| command | flags | exit status |", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \|([^|]*)\|", table, flags=re.M)
    # CI's own commands are docs/ci.md's, not the agent's manual: a research session never runs them
    ci_only = {"fetch-state", "guard"}
    assert {r[0] for r in rows} == set(sub) - ci_only, "program.md's command table must list every subcommand"
    for name, flags in rows:
        known = {o for a in sub[name]._actions for o in a.option_strings}
        named = set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", flags))
        for flag in named:
            assert flag in known, f"program.md: `{name}` has no flag {flag}"
        missing = {o for o in known if o.startswith("--") or o == "-n"} - named - {"--help"}
        assert not missing, f"program.md's command table does not document `{name}` {sorted(missing)}"
    plugin_flags = set(re.findall(r"`(--ditar-[a-z-]+)`", program))
    src = (REPO / "pytest_ditar/plugin/hooks.py").read_text()
    assert plugin_flags and all(f'"{f}"' in src for f in plugin_flags), plugin_flags


def all_docs() -> list[str]:
    return [*DOCS, *sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md"))]


def check_example(cmd: Command) -> None:
    """An example's line, checked without running it (it needs another machine)."""
    text = re.sub(r"\s+#.*$", "", cmd.text)  # a trailing comment
    words = shlex.split(PLACEHOLDER_LEFT.sub("X", text))
    where = f"{cmd.doc}:{cmd.line}: `{cmd.text}`"
    if words[0] == "dit-ar":
        from pytest_ditar.cli.main import build_parser

        try:
            build_parser().parse_args(words[1:])
        except SystemExit:
            raise AssertionError(f"{where}: dit-ar does not parse it") from None
    elif words[:2] == ["pip", "install"]:
        assert "-e" in words, f"{where}: the package is not published; install this checkout (`pip install -e .`)"
        for a in words[2:]:
            assert a == "-e" or re.fullmatch(r"\.(\[[a-z,]+\])?", a), f"{where}: unexpected pip argument {a!r}"
    elif words[0] in ("python", "python3", "bash"):
        assert (REPO / words[1]).is_file(), f"{where}: {words[1]} is not in the repository"
    else:
        assert words[0] == "git", f"{where}: an example line of an unknown kind"


def test_every_doc_command_runs_or_is_an_example():
    """README, program.md and docs/*.md: each command runs in tests/e2e/test_doc_commands.py (DOCS,
    and the verdict-json block), is CI's or the set-up line, or is a checked example."""
    unmarked = []
    for doc in all_docs():
        for c in extract(doc, (REPO / doc).read_text()):
            if c.marker == "example":
                check_example(c)
            elif doc not in DOCS and c.marker != "verdict-json":
                unmarked.append(f"{doc}:{c.line}: {c.text}")
    assert not unmarked, "commands neither run by a test nor marked as an example:\n" + "\n".join(unmarked)
    fleet = extract("docs/fleet.md", (REPO / "docs/fleet.md").read_text())
    assert fleet[0].text == "pip install -e '.[fleet]'", fleet[0]  # from the checkout: not published
    json_doc = [c for c in extract("docs/verdict-json.md", (REPO / "docs/verdict-json.md").read_text())
                if c.marker == "verdict-json"]
    assert len(json_doc) == 2 and all("${TMPDIR:-/tmp}/" in c.text for c in json_doc), json_doc


def _env(cache: Path) -> dict[str, str]:
    env = os.environ.copy()
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["DITAR_CACHE"] = str(cache)
    env.pop("DITAR_TAG", None)
    env.pop("DITAR_CONFIG", None)
    return env


def doctor_rows_named(program: str) -> list[str]:
    """The rows program.md says `doctor` prints (it gives no count: the rows are what it prints)."""
    listed = re.search(r"`doctor` prints a pass/FAIL/warn row per check \(([^)]*)\)", program)
    assert listed, "program.md no longer lists doctor's rows where this test looks for them"
    from pytest_ditar.core.vocabulary import CLASSES

    names = [n.strip() for n in re.sub(r"\s+", " ", listed.group(1)).split(",")]
    return [f"class {c}" for c in CLASSES if "`class` row per class" in listed.group(1)] + \
        [n for n in names if "`class`" not in n]


def _checks(doc: str, cmd: str, out: str, root: Path) -> None:
    if re.search(r" doctor$", cmd) and doc == "program.md":
        printed = {m.group(1).strip() for m in re.finditer(r"^(\S.*?)\s+(pass|FAIL|warn)  ", out, flags=re.M)}
        missing = [n for n in doctor_rows_named((REPO / doc).read_text()) if n not in printed]
        assert not missing, f"program.md names doctor rows it does not print: {missing}\n{out}"
        assert re.search(r"^doctor: \d+/\d+ checks pass", out, flags=re.M), out
    if re.search(r"dit-ar .*experiment ", cmd):
        lines = out.strip().splitlines()
        nxt = [i for i, line in enumerate(lines) if line.startswith("ditar: next: ")]
        assert nxt and nxt[-1] < len(lines) - 1, out[-3000:]  # the next step, above the verdict line
        last = lines[-1]
        m = re.match(r"DITAR VERDICT: (KEEP|DISCARD) lane=latency_b1 speedup=\S+ ci95=\S+ quality=6/6 class=exact "
                     r"commit=[0-9a-f]{7}"
                     r"( reason=\"(lane latency_b1 (unstable|not faster)|guard lane \w+ regressed)[^\"]*\")?"
                     r"( unmeasured=throughput_b8)?( off_target=1)?$", last)
        assert m, out[-3000:]
    elif cmd.endswith("dit-ar demo"):
        verdicts = [line for line in out.splitlines() if "DITAR VERDICT:" in line]
        assert len(verdicts) == 2 and "DITAR VERDICT: DISCARD" in verdicts[1], out[-3000:]
    elif cmd.startswith("sed -i"):
        assert json.loads((root / "config/autoresearch.json").read_text())["suite"] == "dit-xl-2-256"
    elif " search " in cmd and "--json" not in cmd:
        assert re.search(r"^1\. \S+\.md :: ", out, flags=re.M), out
    elif re.search(r" status$", cmd):
        assert "hash chain verifies" in out, out
    elif cmd.endswith(" suite"):
        assert "PipelineSpec(" in out and "Request(labels, seeds, steps)" in out and "resolves" in out, out
    elif "--ditar-class" in cmd:  # the smoke check before the commit: the claimed class's next step
        said = ("ditar: next: `dit-ar try --classification exact --description \"...\"` times it against the "
                "champion; FASTER: commit with the trailer `Ditar-Class: exact`")
        assert said in out, out[-3000:]
    elif "--max-experiments" in cmd:
        assert re.search(r"^bound: 0 of 40 experiments run, until 2099-01-01T06:00", out, flags=re.M), out



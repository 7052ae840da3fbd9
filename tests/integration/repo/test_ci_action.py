"""action.yml (the composite action of docs/ci.md) runs what exists: the `dit-ar` subcommand and
flags its steps name parse, its outputs are ones the guard writes to $GITHUB_OUTPUT (core.ci), and
the guard's step reads the tag the state's step writes there (cli/fetchstate.py)."""
import re
import shlex
from pathlib import Path

import yaml

from pytest_ditar.cli.main import build_parser
from pytest_ditar.core.ci import OUTPUT_KEYS

REPO = Path(__file__).resolve().parents[3]


def test_the_action_runs_fetch_state_then_the_guard_and_passes_on_its_outputs():
    action = yaml.safe_load((REPO / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    state, guard = action["runs"]["steps"]
    assert (state["id"], guard["id"]) == ("state", "guard")
    words = shlex.split(state["run"].replace("${DITAR_TAG_IN:+--tag \"$DITAR_TAG_IN\"}", "--tag t"))
    assert words[1:3] == ["-m", "pytest_ditar.cli"]
    args = build_parser().parse_args(words[3:])
    assert args.command == "fetch-state" and args.tag == "t"
    assert guard["env"]["DITAR_TAG_OUT"] == "${{ steps.state.outputs.tag }}"  # fetch-state's `tag=` output
    run = guard["run"].split("\n# shellcheck", 1)[-1]
    run = run.replace("${DITAR_TAG_OUT:+--tag \"$DITAR_TAG_OUT\"}", "--tag t").replace("$DITAR_TOL", "0.05")
    words = shlex.split(run.replace("\\\n", " "))
    words = words[words.index("-c") + 2:]  # `python -c '<main() with the working folder off sys.path>'`
    args = build_parser().parse_args(words)
    assert (args.command, args.tag, args.tolerance, args.json) == ("guard", "t", 0.05, "$DITAR_JSON")
    assert "del sys.path[0]" in guard["run"] and "pytest --ditar-guard" not in run  # the judge's way only
    for name, out in action["outputs"].items():
        m = re.fullmatch(r"\$\{\{ steps\.guard\.outputs\.(\w+) \}\}", out["value"])
        assert (m and m.group(1) == name and name in OUTPUT_KEYS) or name == "json", (name, out)
    # no input is spliced into a script: each reaches it as an environment variable
    for step in (state, guard):
        assert "${{" not in step["run"], step["run"]


def test_the_docs_commands_parse():
    text = (REPO / "docs/ci.md").read_text()
    found = re.findall(r"^\s*(?:- )?dit-ar (fetch-state[^\n]*)$", text, re.M)
    assert found
    for line in found:
        args = build_parser().parse_args(shlex.split(line.split("#")[0]))
        assert args.command == "fetch-state" and args.remote == "origin"
    guards = re.findall(r"^\s*(?:- |run: )?dit-ar (--tag \w+ guard[^\n]*)$", text, re.M)
    assert guards and "pytest --ditar-guard" not in text.replace("`pytest --ditar-guard`", "")
    for line in guards:
        assert build_parser().parse_args(shlex.split(line)).command == "guard"

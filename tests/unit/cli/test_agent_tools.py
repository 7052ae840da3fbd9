"""cli.agent_tools (issue 53): `dit-ar mcp`'s tools without the SDK. Each tool's command line is the
CLI's own (parsed here by dit-ar's parser: an argument's value never becomes an option, nothing but
`--json` is added), bad arguments are named with their fix, the output schema holds the shipped
document schema, and one gated run at a time."""
import argparse
import re

import pytest

from pytest_ditar.cli import agent_tools
from pytest_ditar.cli.agent_tools import BY_NAME, TOOLS, RunSlot, argument_problem, command, output_schema, refusal
from pytest_ditar.cli.main import build_parser
from pytest_ditar.core.verdict_json import try_record

from jsonschemas import available


def _parsed(tool: str, args: dict) -> argparse.Namespace:
    cmd = command(BY_NAME[tool], args, agent_tools.Path("/p/config.json"), None)
    assert cmd[1:3] == ["-m", "pytest_ditar.cli"] and cmd[3] == "--config=/p/config.json"
    return build_parser().parse_args(cmd[4:])


def test_each_tool_runs_its_cli_command_with_json_and_nothing_else():
    ns = _parsed("experiment", {"classification": "exact", "description": "--rootdir=/ -p evil"})
    assert (ns.command, ns.classification, ns.description, ns.json, ns.pytest_args) == \
        ("experiment", "exact", "--rootdir=/ -p evil", True, [])  # the description stays a value
    ns = _parsed("try_change", {"classification": "numerical", "description": "bf16"})
    assert (ns.command, ns.classification, ns.json, ns.pytest_args) == ("try", "numerical", True, [])
    ns = _parsed("compare", {"a": "--lane", "b": "-h"})
    assert (ns.command, ns.a, ns.b, ns.json, ns.lane) == ("compare", "--lane", "-h", True, None)
    ns = _parsed("search", {"query": "--tag=x cuda"})
    assert (ns.command, ns.query, ns.json, ns.search_tag) == ("search", "--tag=x cuda", True, None)
    ns = _parsed("profile", {"against": "baseline"})
    assert (ns.command, ns.against, ns.lane, ns.json) == ("profile", "baseline", None, True)
    assert _parsed("doctor", {"no_probe": True}).no_probe and not _parsed("doctor", {}).no_probe
    assert {t.name for t in TOOLS if t.gated} == {"profile", "try_change", "experiment"}
    tagged = command(BY_NAME["status"], {}, agent_tools.Path("c.json"), "t")
    assert tagged[3:] == ["--config=c.json", "--tag=t", "status", "--json"]


@pytest.mark.parametrize("tool, args, said", [
    ("status", {"verbose": True}, "status: unknown argument(s) verbose; it takes no arguments"),
    ("experiment", {"classification": "exact"}, "experiment: argument description is required"),
    ("experiment", {"classification": "lossless", "description": "x"},
     "experiment: classification 'lossless' is not a class this judge knows: one of exact, numerical, approximate, "
     "quantization (what the change is (program.md, Classes)"),
    ("search", {"query": 3}, "search: argument query must be a string, not int"),
    ("doctor", {"no_probe": "yes"}, "doctor: argument no_probe must be a boolean, not str"),
    ("compare", {"a": "baseline", "b": "x\0y"}, "compare: argument b holds a NUL character"),
])
def test_bad_arguments_are_named_with_their_fix(tool, args, said):
    assert argument_problem(BY_NAME[tool], args).startswith(said)


def test_good_arguments_pass_and_the_input_schema_says_the_same():
    assert argument_problem(BY_NAME["profile"], {}) is None
    assert argument_problem(BY_NAME["try_change"], {"classification": "exact", "description": "d"}) is None
    schema = BY_NAME["try_change"].input_schema()
    assert schema["additionalProperties"] is False and schema["required"] == ["classification", "description"]
    assert schema["properties"]["classification"]["enum"] == ["exact", "numerical", "approximate", "quantization"]


def test_the_output_schema_holds_the_shipped_document_schema():
    if not available():
        pytest.skip("jsonschema (the test extra) is not installed")
    import jsonschema

    out = output_schema(BY_NAME["try_change"])
    jsonschema.Draft202012Validator.check_schema(out)
    doc = try_record(None, 4, line=None, next_step="fix it", refusal="dirty tree")
    ok = {"tool": "try_change", "exit_status": 4, "next": "fix it", "document": doc}
    assert list(jsonschema.Draft202012Validator(out).iter_errors(ok)) == []  # its $refs resolve at the root
    bad = {**ok, "document": {**doc, "outcome": "KEEP"}}
    assert list(jsonschema.Draft202012Validator(out).iter_errors(bad))
    assert refusal(doc) == "REFUSED: dirty tree\nnext: fix it" and refusal({"verdict": "KEEP"}) is None


def test_one_gated_run_at_a_time_and_the_busy_error_names_it():
    slot = RunSlot()
    assert slot.claim("experiment") is None
    assert "(starting, started " in slot.claim("try_change")
    slot.started(4242)
    busy = slot.claim("profile")
    assert re.match(r"busy: experiment is running \(pid 4242, started \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\); one gated run",
                    busy), busy
    slot.release()
    assert slot.claim("profile") is None

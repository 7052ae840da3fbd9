"""`dit-ar` imports only the command it runs (cli.main): the command modules import what they need
at their top, so importing all of them would load the loop and numpy for `dit-ar search`. The
parser it builds for one command reads that command's line as the whole parser does."""
import json
import subprocess
import sys

import pytest

from pytest_ditar.cli.main import COMMANDS, build_parser, command_class, named_command


def test_every_command_is_listed_under_its_own_name():
    assert [command_class(name).name for name in COMMANDS] == list(COMMANDS)


@pytest.mark.parametrize("argv, named", [
    (["status", "-n", "3"], "status"),
    (["--config", "c.json", "--tag", "t", "try", "--device", "cpu"], "try"),
    (["--conf=doctor", "status", "--json"], "status"),  # an abbreviated option and its value
    (["fetch-state", "-h"], "fetch-state"),
    (["-h", "status"], None),  # the top-level help lists every command
    (["--help"], None),
    ([], None),
    (["--config"], None),
    (["bogus"], None),
    (["--bogus", "status"], None),
])
def test_the_command_is_named_only_where_the_line_leaves_no_doubt(argv, named):
    assert named_command(argv) == named


@pytest.mark.parametrize("argv", [
    ["status", "-n", "3", "--json"],
    ["--tag", "t", "try", "--classification", "exact", "--device", "cpu"],
    ["--config", "c.json", "compare", "baseline", "champion"],
    ["fetch-state", "--remote", "upstream"],
])
def test_one_commands_parser_reads_its_line_as_the_whole_parser_does(argv):
    assert vars(build_parser(named_command(argv)).parse_args(argv)) == vars(build_parser().parse_args(argv))


def test_a_command_loads_no_other_command_module():
    code = ("import json, sys; from pytest_ditar.cli.main import build_parser, named_command; "
            "argv = ['search', 'cuda graphs']; build_parser(named_command(argv)).parse_args(argv); "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('pytest_ditar.cli.', 'numpy')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == ["pytest_ditar.cli.command", "pytest_ditar.cli.main", "pytest_ditar.cli.search"]

"""The MCP SDK is `dit-ar mcp`'s alone (issue 53): importing pytest_ditar and building every command's
parser (`dit-ar --help` imports each command module, cli.agent included) load no `mcp` module, nor
does the judge's own pytest run in a project (its command line as `dit-ar` builds it, run in this
process, the plugin and the gate loaded: a smoke check of the quality contracts); and where the SDK is
missing, `dit-ar mcp` says how to install it instead of a traceback."""
import subprocess
import sys

PROBE = """
import os, sys, tempfile
from pathlib import Path
import pytest
import pytest_ditar, pytest_ditar.plugin.hooks
from pytest_ditar.cli.main import build_parser
from pytest_ditar.cli.experiment import judge_pytest, plugin_flag
from pytest_ditar.vcs.hardened import judge_env
build_parser()
cfg = Path("config/autoresearch.json").resolve()
with tempfile.TemporaryDirectory() as tmp:  # the judge's own pytest, as `dit-ar` starts it, in this process
    cmd = judge_pytest(cfg, None, Path(tmp))
    os.environ.update(judge_env(Path.cwd()))
    rc = pytest.main([*cmd[3:], *plugin_flag(), "-p", "no:cacheprovider", f"--ditar-config={cfg}", "-q",
                      "-m", "quality", "--ditar-class", "exact"])
print("RC", int(rc))
print("MCP", sorted(m for m in sys.modules if m == "mcp" or m.startswith("mcp.")))
print("LOADED", "pytest_ditar.plugin.gateplugin" in sys.modules and "pytest_ditar.loop.judge.gate" in sys.modules)
"""


def test_pytest_and_the_cli_never_import_mcp(research):
    res = subprocess.run([sys.executable, "-c", PROBE], cwd=research.root, capture_output=True, text=True,
                         timeout=300)
    assert "ditar: quality 6/6 passed" in res.stdout, res.stdout[-3000:] + res.stderr[-2000:]  # the judge ran here
    assert res.stdout.splitlines()[-3:] == ["RC 0", "MCP []", "LOADED True"], res.stdout[-2000:]


def test_dit_ar_mcp_without_the_sdk_names_the_extra():
    code = ("import sys; sys.modules['mcp'] = None\n"  # as if the agent extra were not installed
            "from pytest_ditar.cli.main import main; sys.exit(main(['mcp']))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stdout == "", res.stderr
    assert "`dit-ar mcp` needs the MCP SDK" in res.stderr and "pip install -e '.[agent]'" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr

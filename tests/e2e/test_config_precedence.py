"""$DITAR_CONFIG names the same config for the plugin and for `dit-ar` (issue 26), the command line
winning over it: one precedence, --ditar-config / --config > $DITAR_CONFIG > ini > default (long:
three pytest and dit-ar processes; the JSON rules are in tests/unit/config/test_config_sources.py)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import make_project


def test_ditar_config_names_the_same_file_for_the_plugin_and_the_cli(pytester, model_cache, monkeypatch):
    proj = make_project(pytester)
    cfg = proj.config()
    cfg["state_dir"] = ".elsewhere"
    proj.write("config/other.json", json.dumps(cfg, indent=1))
    monkeypatch.setenv("DITAR_CONFIG", "config/other.json")
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--co", "-q", timeout=120)
    out = res.stdout.str()
    assert "/.elsewhere/main/baseline" in out, out[-2000:]  # the plugin read config/other.json
    proj.git("add", "-A")
    proj.git("commit", "-qm", "another config")
    exe = shutil.which("dit-ar") or str(Path(sys.executable).parent / "dit-ar")
    cli = subprocess.run([exe, "init", "--tag", "t"], cwd=proj.root, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "DITAR_CONFIG": "config/other.json"})
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert (proj.root / ".elsewhere/t").is_dir() and not (proj.root / ".autoresearch").exists()  # and so did the CLI
    # the command line still wins over the variable
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--co", "-q",
                                        "--ditar-config=config/autoresearch.json", timeout=120)
    assert "/.autoresearch/t" in res.stdout.str() and ".elsewhere" not in res.stdout.str(), \
        res.stdout.str()[-2000:]

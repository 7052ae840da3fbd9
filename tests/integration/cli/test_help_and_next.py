"""`dit-ar --help` says where the loop is written down and what each exit status means; the flags an
agent must fill in say what to put there; `baseline` ends with the next step, like a gated run."""
import subprocess
import sys

from conftest import make_project


def _help(*args: str) -> str:
    res = subprocess.run([sys.executable, "-m", "pytest_ditar.cli", *args, "--help"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return " ".join(res.stdout.split())  # argparse wraps: compare words


def test_help_points_to_program_md_and_gives_the_exit_codes():
    top = _help()
    assert "program.md" in top and "dit-ar demo" in top
    assert "0 KEEP 1 DISCARD (reverted) 10 CRASH (reverted) 4 REFUSED" in top, top
    assert "0 FASTER, 1 not worth a commit, 10 crash, 11 undecided" in top, top
    exp = _help("experiment")
    assert "exact = same algorithm" in exp and "quantization = low-bit" in exp, exp
    assert "--description DESCRIPTION the hypothesis in one line" in exp, exp
    assert "--quiet print only the `ditar: next:` line and the verdict line" in exp, exp
    assert "exact = same algorithm" in _help("try")


def test_baseline_ends_with_the_next_step(pytester, model_cache):
    proj = make_project(pytester)
    assert proj.ditar("init", "--tag", "t").returncode == 0
    res = proj.ditar("baseline")
    assert res.returncode == 0, res.stderr
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("ditar: next: the first hypothesis (program.md section 2): `dit-ar profile`"), last

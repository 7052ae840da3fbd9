"""`dit-ar demo`: the whole loop on the embedded tiny suite, in a scratch git workspace.

init -> baseline -> an exact speedup that is KEPT -> a mislabelled change that is DISCARDED
and reverted -> status. The user's checkout is never touched.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_ditar.cli.command import Command, config_path
from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.vocabulary import DEFAULT_CONFIG, TRAILER
from pytest_ditar.vcs import repo as gitops

CANDIDATES = Path(__file__).resolve().parents[1] / "demo" / "candidates"
DEMO_USER = ("ditar-demo", "demo@localhost")  # the scratch repository's committer (name, email)


class Demo(Command):
    name = "demo"
    help = "the whole loop on the tiny suite in a scratch workspace (CPU, < 1 min)"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--workspace", default=None, help="keep the workspace here (default: a temp dir, removed)")

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        config = config_path(args)
        project_root = config.parent.parent if config.parent.name == "config" else config.parent
        if not (project_root / DEFAULT_CONFIG).is_file():
            raise DitarError(f"{config}: config not found; run `dit-ar demo` from a pytest-ditar checkout")
        tmp = None
        if args.workspace:
            ws = Path(args.workspace).resolve()
            if ws.exists() and any(ws.iterdir()):
                raise DitarError(f"{ws}: workspace exists and is not empty; pick a new directory")
        else:
            tmp = Path(tempfile.mkdtemp(prefix="ditar-demo-"))
            ws = tmp / "project"
        t0 = time.perf_counter()
        try:
            make_workspace(project_root, ws)
            _walk(ws)
            print(f"[demo] done in {time.perf_counter() - t0:.1f}s")
            return 0
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)


def _run(cmd: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if check and res.returncode != 0:
        raise DitarError(f"demo step failed: {' '.join(cmd[:6])}...: "
                         f"{(res.stderr or res.stdout).strip().splitlines()[-1:]}")
    return res


def make_workspace(project_root: Path, ws: Path, suite: str = "tiny") -> Path:
    """A minimal research project: config, one suite, the stock candidate, the root conftest."""
    ws.mkdir(parents=True, exist_ok=True)
    for rel in ("mutable", f"suites/{suite}", "knowledge/handbook"):
        src = project_root / rel
        if src.is_dir():
            shutil.copytree(src, ws / rel, ignore=shutil.ignore_patterns("__pycache__", ".index"))
    if not (ws / "mutable" / "pipeline.py").is_file():
        raise DitarError(f"{project_root}: no mutable/pipeline.py to start the demo from "
                         "(run it from a pytest-ditar checkout)")
    cfg = json.loads((project_root / DEFAULT_CONFIG).read_text())
    cfg.update(suite=suite, fixed_paths=["config/", "suites/", "conftest.py"])
    (ws / DEFAULT_CONFIG).parent.mkdir(exist_ok=True)
    (ws / DEFAULT_CONFIG).write_text(json.dumps(cfg, indent=1))
    shutil.copy(project_root / "conftest.py", ws / "conftest.py")
    (ws / ".gitignore").write_text(".autoresearch/\n__pycache__/\n")
    gitops.init_repo(ws, "stock DiT pipeline", user=DEMO_USER)
    return ws


def _ditar(ws: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", "pytest_ditar.cli", "--config", DEFAULT_CONFIG, *args], ws, check)


def _mislabelled(ws: Path) -> str:
    """The stock pipeline with a changed guidance scale: an output change claimed as exact."""
    stock = (ws / "mutable" / "pipeline.py").read_text()
    return stock.replace("guidance_scale=self.spec.guidance,", "guidance_scale=self.spec.guidance * 0.75,")


def _commit_candidate(ws: Path, source: str, cls: str, subject: str) -> None:
    (ws / "mutable" / "pipeline.py").write_text(source)
    gitops.commit_tracked(ws, f"{subject}\n\n{TRAILER} {cls}", user=DEMO_USER)


def _last_line(res: subprocess.CompletedProcess) -> str:
    lines = [line for line in res.stdout.splitlines() if line.strip()]
    return lines[-1] if lines else res.stderr.strip()


def _walk(ws: Path) -> None:
    """init, baseline, the stock quality gates, a KEEP, a DISCARD, status: each step's lines, prefixed."""
    print(f"[demo] workspace {ws}")
    print("[demo] " + _ditar(ws, "init", "--tag", "demo").stdout.splitlines()[0])
    res = _ditar(ws, "baseline")
    for line in res.stdout.splitlines()[1:]:
        print("[demo] " + line)
    print("[demo] quality gates of the unmodified pipeline against its own baseline:")
    q = _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "quality", "-q", "-rA"], ws, check=False)
    for line in q.stdout.splitlines():
        if line.startswith("PASSED") or line.startswith("FAILED") or "ditar: quality" in line:
            print("[demo]   " + line)
    stock = (ws / "mutable" / "pipeline.py").read_text()
    mislabelled = _mislabelled(ws)
    assert mislabelled != stock, "the stock pipeline no longer passes guidance_scale=self.spec.guidance"
    steps = [((CANDIDATES / "faster_exact.py").read_text(), "exact",
              "Lean sampling loop: cut per-step Python and dispatch overhead"),
             (mislabelled, "exact", "Lower the guidance scale (mislabelled as exact)")]
    for source, cls, subject in steps:
        _commit_candidate(ws, source, cls, subject)
        print(f"[demo] experiment: {subject} (class {cls})")
        res = _ditar(ws, "experiment", "--classification", cls, "--description", subject, check=False)
        print("[demo]   " + _last_line(res))
    print("[demo] status:")
    for line in _ditar(ws, "status", check=False).stdout.splitlines():
        print("[demo]   " + line)

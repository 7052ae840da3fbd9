"""`dit-ar demo`: the whole loop on the embedded tiny suite, in a scratch git workspace.

init -> baseline -> an exact speedup that is KEPT -> a mislabelled change that is DISCARDED
and reverted -> status. The user's checkout is never touched. Exits 0 only when both steps
came out as shown (the showcase KEPT, the mislabelled change DISCARDED), else 1 saying why and what
to do; the zygotes its gated runs kept warm end with its workspace (nothing of it outlives it).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_ditar.cli.command import Command, config_path
from pytest_ditar.config.project import load_config
from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.vocabulary import DEFAULT_CONFIG, ENV_ZYGOTE_IDLE, TRAILER
from pytest_ditar.runtime import zygote
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.vcs import branches

CANDIDATES = Path(__file__).resolve().parents[1] / "demo" / "candidates"
DEMO_USER = ("ditar-demo", "demo@localhost")  # the scratch repository's committer (name, email)
TAG = "demo"
NOISY_AA = 0.20  # a baseline lane's A/A half-width above this is worth a warning: the gate may not decide
# Should the demo itself be killed (no `finally`), its kept zygotes still go soon, not after the usual 30 min.
FALLBACK_IDLE_S = "120"


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
        zygotes: list[dict] = []
        previous = signal.signal(signal.SIGTERM, _terminated)  # a kill still runs the cleanup below
        try:
            make_workspace(project_root, ws)
            rc = _walk(ws, zygotes)
            print(f"[demo] done in {time.perf_counter() - t0:.1f}s" + ("" if rc == 0 else " (FAILED, see above)"))
            return rc
        finally:
            signal.signal(signal.SIGTERM, previous)
            _retire(zygotes)
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _retire(zygotes: list[dict]) -> None:
    """End every zygote the demo's runs kept warm: the workspace they served is gone."""
    for rec in zygotes:
        zygote.retire(rec)


def _note_zygote(ws: Path, zygotes: list[dict]) -> None:
    """The zygote the last gated run handed over (loop.run.warmstart), if any, to end with the demo."""
    cfg = load_config(ws / DEFAULT_CONFIG)
    try:
        rec = json.loads(TagPaths.of(cfg.root, cfg.state_dir, TAG).zygote_file.read_text())
    except (OSError, ValueError):
        return
    if isinstance(rec, dict) and rec not in zygotes:
        zygotes.append(rec)


def _run(cmd: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.setdefault(ENV_ZYGOTE_IDLE, FALLBACK_IDLE_S)
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
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
    branches.init_repo(ws, "stock DiT pipeline", user=DEMO_USER)
    return ws


def _ditar(ws: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", "pytest_ditar.cli", "--config", DEFAULT_CONFIG, *args], ws, check)


def _mislabelled(ws: Path) -> str:
    """The stock pipeline with a changed guidance scale: an output change claimed as exact."""
    stock = (ws / "mutable" / "pipeline.py").read_text()
    return stock.replace("guidance_scale=self.spec.guidance,", "guidance_scale=self.spec.guidance * 0.75,")


def _commit_candidate(ws: Path, source: str, claimed_class: str, subject: str) -> None:
    (ws / "mutable" / "pipeline.py").write_text(source)
    branches.commit_tracked(ws, f"{subject}\n\n{TRAILER} {claimed_class}", user=DEMO_USER)


def showcase_problem(doc: dict, want: str) -> tuple[str, str] | None:
    """(why, what to do) when a demo step's outcome (`experiment --json`'s document) is not `want`;
    None when it is."""
    verdict = doc.get("verdict")
    if verdict == want:
        return None
    reason = doc.get("reason") or "no reason given"
    if want == "DISCARD":
        return (f"the mislabelled change was {verdict}, not DISCARDED ({reason})",
                "this is a bug in the gate or the demo: report it with this output")
    if verdict == "CRASH":
        return (f"the showcase crashed: {reason}", "this is a bug in the demo: report it with this output")
    if verdict in (None, "REFUSED"):
        return (f"the showcase run did not decide: {reason}",
                "fix what the refusal names (`dit-ar doctor` checks the set-up), then run `dit-ar demo` again")
    if doc.get("judged") is False:
        why = f"the gate could not judge it on this host's noise (its objective lane was UNSTABLE: {reason})"
    else:
        why = f"the host's load hid its speed-up ({reason})"
    return (why, "the lean loop is about 2.5x faster on an idle CPU: stop other jobs on this machine and run "
                 "`dit-ar demo` again; `--workspace DIR` keeps the run's logs to read")


def _noisy_lanes(ws: Path) -> list[str]:
    """A warning per baseline lane whose A/A half-width is over NOISY_AA."""
    st = json.loads(_ditar(ws, "status", "--json", check=False).stdout or "{}")
    lanes = (st.get("baseline") or {}).get("lanes") or {}
    return [f"warning: lane {name}'s A/A noise is +/-{v['noise_half_width'] * 100:.1f}% (over {NOISY_AA:.0%}): "
            "this host is busy, so the gate needs more rounds or a larger effect and may not decide; "
            "stop other jobs for a clean demo" for name, v in lanes.items() if v["noise_half_width"] > NOISY_AA]


def _walk(ws: Path, zygotes: list[dict]) -> int:
    """init, baseline, the stock quality gates, a KEEP, a DISCARD, status: each step's lines, prefixed.
    0 when both experiments came out as shown, else 1."""
    print(f"[demo] workspace {ws}")
    print("[demo] " + _ditar(ws, "init", "--tag", TAG).stdout.splitlines()[0])
    _baseline_step(ws, zygotes)
    _quality_step(ws)
    stock = (ws / "mutable" / "pipeline.py").read_text()
    mislabelled = _mislabelled(ws)
    assert mislabelled != stock, "the stock pipeline no longer passes guidance_scale=self.spec.guidance"
    steps = [((CANDIDATES / "faster_exact.py").read_text(), "exact",
              "Lean sampling loop: cut per-step Python and dispatch overhead", "KEEP"),
             (mislabelled, "exact", "Lower the guidance scale (mislabelled as exact)", "DISCARD")]
    problems = [p for step in steps if (p := _experiment_step(ws, zygotes, *step)) is not None]
    print("[demo] status:")
    for line in _ditar(ws, "status", check=False).stdout.splitlines():
        if not line.startswith("ditar: next: "):
            print("[demo]   " + line)
    for why, todo in problems:
        print(f"[demo] FAILED: {why}")
        print(f"[demo] next: {todo}")
    return 1 if problems else 0


def _baseline_step(ws: Path, zygotes: list[dict]) -> None:
    res = _ditar(ws, "baseline")
    _note_zygote(ws, zygotes)
    for line in res.stdout.splitlines()[1:]:
        if not line.startswith("ditar: next: "):  # the demo takes the next steps itself
            print("[demo] " + line)
    for line in _noisy_lanes(ws):
        print("[demo] " + line)


def _quality_step(ws: Path) -> None:
    print("[demo] quality gates of the unmodified pipeline against its own baseline:")
    q = _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "quality", "-q", "-rA"], ws, check=False)
    for line in q.stdout.splitlines():
        if line.startswith("PASSED") or line.startswith("FAILED") or "ditar: quality" in line:
            print("[demo]   " + line)


def _experiment_step(ws: Path, zygotes: list[dict], source: str, claimed_class: str, subject: str,
                     want: str) -> tuple[str, str] | None:
    """Commit a candidate and judge it; the problem (why, what to do) where its verdict is not `want`."""
    _commit_candidate(ws, source, claimed_class, subject)
    print(f"[demo] experiment: {subject} (class {claimed_class}; shown to be {want})")
    res = _ditar(ws, "experiment", "--classification", claimed_class, "--description", subject, "--json",
                 check=False)
    _note_zygote(ws, zygotes)
    try:
        doc = json.loads(res.stdout)
    except ValueError:
        doc = {"verdict": None, "line": None, "reason": (res.stderr.strip().splitlines() or ["no output"])[-1]}
    print("[demo]   " + (doc.get("line") or f"no verdict (exit status {res.returncode})"))
    problem = showcase_problem(doc, want)
    if problem:
        print(f"[demo]   NOT {want}: {problem[0]}")
    return problem

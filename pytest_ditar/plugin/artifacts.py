"""JUnit XML and pytest-benchmark JSON of a gated run, filed into its run directory.

Why the detour through a pending path: both files are opened by other plugins at configure time
(pytest's junitxml builds its LogXML from `config.option.xmlpath`, pytest-benchmark reads
`--benchmark-json` when its session starts), but the run directory is named after HEAD and is
only created once the gate has decided to act. So a likely-gated run asks for both files under
`<state>/.pending/`, and session finish moves them into `runs/<stamp>-<sha7>/` as `junit.xml`
and `benchmark.json` (or deletes them when the run was not gated after all). Paths the user gave
with --junitxml / --benchmark-json are left where they are and copied into the run directory.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest

JUNIT_NAME = "junit.xml"
BENCHMARK_NAME = "benchmark.json"
PENDING_DIR = ".pending"

# "junit"/"benchmark" -> (path, ours?): written before configure, read at session finish
PLAN_KEY = pytest.StashKey[dict[str, tuple[Path, bool]]]()


def _likely_gated(config: pytest.Config, cfg_path: Path | None) -> Path | None:
    """The state dir when this run will probably be a gated one (--ditar-gate or a research branch)."""
    if cfg_path is None or not cfg_path.is_file():
        return None
    if config.getoption("--ditar-baseline", default=False) or getattr(config, "workerinput", None) is not None:
        return None
    try:
        from pytest_ditar.config.project import load_config
        from pytest_ditar.loop.session import resolve_tag
        from pytest_ditar.vcs import repo as gitops

        cfg = load_config(cfg_path)
        if not config.getoption("--ditar-gate", default=False):
            branch = gitops.state(cfg.root).branch or ""
            if not branch.startswith(cfg.branch_prefix):
                return None
        return cfg.state_path / resolve_tag(cfg, config.getoption("--ditar-tag"))
    except Exception:  # noqa: BLE001 - artifacts are a convenience; the gate reports real config errors
        return None


def request_artifacts(config: pytest.Config, cfg_path: Path | None) -> None:
    """Before configure: point junitxml and pytest-benchmark at pending files for a gated run."""
    state = _likely_gated(config, cfg_path)
    if state is None:
        return
    pending = state / PENDING_DIR
    plan: dict[str, tuple[Path, bool]] = {}
    opt = config.option
    if getattr(opt, "xmlpath", None):
        plan["junit"] = (Path(opt.xmlpath), False)
    else:
        pending.mkdir(parents=True, exist_ok=True)
        path = pending / f"junit-{os.getpid()}.xml"
        opt.xmlpath = str(path)
        plan["junit"] = (path, True)
    if hasattr(opt, "benchmark_json"):  # pytest-benchmark installed and loaded
        if opt.benchmark_json:  # a path (pytest-benchmark >= 5.3) or an open file (earlier)
            plan["benchmark"] = (Path(getattr(opt.benchmark_json, "name", opt.benchmark_json)), False)
        else:
            pending.mkdir(parents=True, exist_ok=True)
            path = pending / f"benchmark-{os.getpid()}.json"
            opt.benchmark_json = _benchmark_json_value(path)
            plan["benchmark"] = (path, True)
            # A run that stops at a quality failure times nothing; pytest-benchmark would then warn
            # about a JSON file the user never asked for.
            from pytest_benchmark.logger import PytestBenchmarkWarning

            warnings.filterwarnings("ignore", message="Not saving anything, no benchmarks have been run",
                                    category=PytestBenchmarkWarning)
    config.stash[PLAN_KEY] = plan


def _benchmark_json_value(path: Path) -> Any:
    """What `--benchmark-json PATH` itself would have produced: pytest-benchmark 5.3 parses the
    option into a Path, earlier releases into a file opened for binary writing."""
    from importlib.metadata import version

    major, minor = (int(x) for x in version("pytest-benchmark").split(".")[:2])
    return path if (major, minor) >= (5, 3) else open(path, "wb")  # noqa: SIM115 - closed at collect


def collect_artifacts(config: pytest.Config, run_dir: Path | None) -> list[Path]:
    """After the other plugins wrote their files: file them in `run_dir` (a gated run's), else
    delete the ones we asked for. Returns the files filed."""
    plan = config.stash.get(PLAN_KEY, None)
    if not plan:
        return []
    del config.stash[PLAN_KEY]
    with contextlib.suppress(AttributeError):
        config.option.benchmark_json.close()  # the file an older pytest-benchmark wrote into
    filed = []
    for key, name in (("junit", JUNIT_NAME), ("benchmark", BENCHMARK_NAME)):
        if key not in plan:
            continue
        path, ours = plan[key]
        if run_dir is not None and path.is_file():
            dest = run_dir / name
            (shutil.move if ours else shutil.copyfile)(str(path), str(dest))
            filed.append(dest)
        elif ours:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    return filed

"""JUnit XML and pytest-benchmark JSON of a gated run, filed into its run directory.

Why the detour through a pending path: both files are opened by other plugins at configure time
(pytest's junitxml builds its LogXML from `config.option.xmlpath`, pytest-benchmark reads
`--benchmark-json` when its session starts), but the run directory is named after HEAD and is
only created once the gate has decided to act. So a likely-gated run asks for both files under
`<state>/.pending/`, and session finish moves them into `runs/<stamp>-<sha7>/` as `junit.xml`
and `benchmark.json` (or deletes them when the run was not gated after all). Paths the user gave
with --junitxml / --benchmark-json are left where they are and copied into the run directory.

pytest-benchmark gets its option value the way `--benchmark-json PATH` on the command line would
give it: parsed by pytest's own parser (the public `Parser.parse_known_args`), so the option's
own type makes it, an open file before 5.3, a Path from 5.3 on. No release number is read and
nothing private of pytest-benchmark is touched.
"""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from pytest_ditar.config.project import load_config
from pytest_ditar.hardware.fingerprint import _cpu_model
from pytest_ditar.loop.integrity.tags import resolve_tag
from pytest_ditar.plugin.keys import PARSER_KEY
from pytest_ditar.vcs import queries

JUNIT_NAME = "junit.xml"
BENCHMARK_NAME = "benchmark.json"
PENDING_DIR = ".pending"

# "junit"/"benchmark" -> (path, ours?): written before configure, read at session finish
PLAN_KEY = pytest.StashKey[dict[str, tuple[Path, bool]]]()
# A run that stops at a quality failure times nothing; pytest-benchmark then warns about a JSON
# file the user never asked for.
NOTHING_SAVED = "ignore:Not saving anything, no benchmarks have been run"


def _likely_gated(config: pytest.Config, cfg_path: Path | None) -> Path | None:
    """The state dir when this run will probably be a gated one (--ditar-gate or a research branch)."""
    if cfg_path is None or not cfg_path.is_file():
        return None
    if config.getoption("--ditar-baseline", default=False) or getattr(config, "workerinput", None) is not None:
        return None
    try:
        cfg = load_config(cfg_path)
        if not config.getoption("--ditar-gate", default=False):
            branch = queries.state(cfg.root).branch or ""
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
        if opt.benchmark_json:  # the user's own: a path or an open file, whatever their release made of it
            plan["benchmark"] = (option_path(opt.benchmark_json), False)
        else:
            pending.mkdir(parents=True, exist_ok=True)
            path = pending / f"benchmark-{os.getpid()}.json"
            value = benchmark_json_value(config, path)
            if value is not None:
                opt.benchmark_json = value
                plan["benchmark"] = (path, True)
                config.addinivalue_line("filterwarnings", NOTHING_SAVED)
    config.stash[PLAN_KEY] = plan


def quiet_tables(config: pytest.Config) -> None:
    """A guard's verdict is its lanes' lines, as `dit-ar experiment`'s is: pytest-benchmark's tables
    (the fixture's first rounds alone) off, before its configure reads the option."""
    opt = config.option
    if hasattr(opt, "benchmark_quiet"):  # pytest-benchmark 4.0+ installed and loaded
        opt.benchmark_quiet = True


def benchmark_json_value(config: pytest.Config, path: Path) -> Any:
    """What `--benchmark-json PATH` on the command line gives pytest-benchmark, made by its own
    option type through pytest's parser; None (no JSON asked for) where that cannot be done."""
    parser = config.stash.get(PARSER_KEY, None)
    if parser is None:  # the plugin was registered too late to be handed the parser
        return None
    try:
        return parser.parse_known_args([f"--benchmark-json={path}"]).benchmark_json
    except (Exception, SystemExit):  # noqa: BLE001 - argparse exits on a bad value; the JSON is a convenience
        return None


def option_path(value: Any) -> Path:
    """The file behind a --benchmark-json value: a path itself, or an open file's name (a Path
    has a `name` too, its last part only, so paths are told apart first)."""
    return Path(value) if isinstance(value, (str, os.PathLike)) else Path(value.name)


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
        # An empty file is one an older pytest-benchmark opened at parse time and never wrote.
        if run_dir is not None and path.is_file() and path.stat().st_size:
            dest = run_dir / name
            (shutil.move if ours else shutil.copyfile)(str(path), str(dest))
            filed.append(dest)
        elif ours:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    return filed


def machine_info() -> dict[str, Any]:
    """pytest-benchmark's `machine_info` for a gated run's benchmark.json, through its public hook
    (pytest_benchmark_generate_machine_info): the fields its own has, but the CPU named from
    /proc as the run's fingerprint names it, not by py-cpuinfo, which took 1.2 s of every gated
    run on an H200 host, between the last lane and the verdict."""
    import platform
    import sys

    impl = platform.python_implementation()
    impl_version = platform.python_version()
    if impl == "PyPy":
        impl_version = ".".join(str(n) for n in sys.pypy_version_info[:3])  # type: ignore[attr-defined]
    return {"node": platform.node(), "processor": platform.processor(), "machine": platform.machine(),
            "python_compiler": platform.python_compiler(), "python_implementation": impl,
            "python_implementation_version": impl_version, "python_version": platform.python_version(),
            "python_build": list(platform.python_build()), "release": platform.release(),
            "system": platform.system(),
            "cpu": {"brand_raw": _cpu_model(), "count": os.cpu_count(), "arch": platform.machine(),
                    "source": "pytest-ditar (/proc/cpuinfo; py-cpuinfo not run)"}}

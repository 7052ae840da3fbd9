"""pytest-ditar's pytest11 entry point: its options, and hooks that each hand over to the run's
GatePlugin in a ditar run (plugin.activation says which runs are), else to NoRun, which leaves
pytest alone. (GatePlugin itself is registered too, for pytest_runtest_logreport, which has no
config, and for pytest_internalerror and a wrapper around every plugin's pytest_sessionfinish, so
that an error in the judge after the tests ends a gated run as a CRASH instead of leaving it
undecided.)

This module is loaded by every pytest start wherever the package is installed, so it imports
nothing at load time but pluggy (pytest's own marker): the rest of the plugin comes in inside
the hooks, and the gate only in a ditar run."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pluggy import HookimplMarker

if TYPE_CHECKING:
    from pathlib import Path
    from types import ModuleType

    import pytest

hookimpl = HookimplMarker("pytest")  # what pytest.hookimpl is, without importing pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("ditar", "pytest-ditar: DiT inference gates")
    g.addoption("--ditar-config", default=None,
                help="config file (default: ini ditar_config, else config/autoresearch.json)")
    g.addoption("--ditar-baseline", action="store_true", help="store the baseline snapshot instead of running tests")
    g.addoption("--ditar-force", action="store_true", help="with --ditar-baseline: replace an existing baseline")
    g.addoption("--ditar-tag", default=None, help="session tag (default: from the autoresearch/<tag> branch)")
    g.addoption("--ditar-device", default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    g.addoption("--ditar-class", default=None, help="experiment class: exact, numerical, approximate, quantization")
    g.addoption("--ditar-description", default=None, help="experiment description (default: commit subject)")
    g.addoption("--ditar-no-revert", action="store_true", help="record the verdict but leave git alone")
    g.addoption("--ditar-gate", action="store_true", help="demand a full gated run: refuse instead of reporting")
    g.addoption("--ditar-try", action="store_true",
                help="report only (dit-ar try): the working tree's quality and lanes against the champion; no "
                     "verdict, nothing recorded, no git")
    g.addoption("--ditar-guard", action="store_true",
                help="a regression gate for ordinary CI: time the working tree against the stored champion (or "
                     "baseline) and fail on a lane slower beyond --ditar-guard-tolerance or a failed quality "
                     "contract; records nothing, no git, no research branch needed")
    g.addoption("--ditar-guard-tolerance", type=float, default=0.05, metavar="TOL",
                help="with --ditar-guard: the slowdown a lane may show (default 0.05: 5%%)")
    g.addoption("--ditar-json", default=None, metavar="PATH",
                help="write the run's outcome (a gated run's verdict, a guard's PASS/FAIL, a refusal) as one JSON "
                     "document to PATH (schema: pytest_ditar/schemas/verdict.schema.json, docs/verdict-json.md)")
    g.addoption("--ditar-phase", default=None, choices=["quality", "decide"],
                help="two-phase gate (dit-ar experiment --workers N): 'quality' records results without deciding "
                     "(may run under -n); 'decide' loads them, times the lanes serially and decides once")
    parser.addini("ditar_config", "path of the pytest-ditar config file, relative to the rootdir", default="")


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    # start-up: pytest loads this module in every run, ditar's or not; it imports nothing of ours at its top
    from pytest_ditar.plugin import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@hookimpl(optionalhook=True, tryfirst=True)
def pytest_benchmark_generate_commit_info(config: pytest.Config) -> dict | None:
    """pytest-benchmark's commit info in a ditar run, from vcs.queries: its own runs plain `git
    describe --dirty` and `git show`, which start the repository's fsmonitor and filter drivers in
    the judge's process. Elsewhere pytest-benchmark's own (None hands over to it)."""
    return _activation().commit_info(config)


def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    _activation().before_conftests(early_config, parser)


@hookimpl(tryfirst=True)  # before junitxml's and pytest-benchmark's configure read their file options
def pytest_cmdline_main(config: pytest.Config) -> None:
    _activation().before_configure(config)


def pytest_configure(config: pytest.Config) -> None:
    _activation().configure(config)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    _activation().parametrize(metafunc)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    return _run(config).ignore_collect(collection_path)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    return _run(config).header()


@hookimpl(trylast=True)  # after -k/-m deselection: the gate must see what will really run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _run(config).collection(items)


def pytest_runtestloop(session: pytest.Session) -> bool | None:
    return _run(session.config).runtestloop(session)


# after junitxml and pytest-benchmark wrote their files; GatePlugin's wrapper around every plugin's
# session finish makes a run whose finish raised before this one a CRASH, never undecided
@hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _run(session.config).sessionfinish(session, exitstatus)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    _run(config).terminal_summary(terminalreporter)


def pytest_unconfigure(config: pytest.Config) -> None:
    _run(config).unconfigure(config)


def _run(config: pytest.Config) -> Any:
    return _activation().of(config)


def _activation() -> ModuleType:
    # start-up: pytest loads this module in every run, ditar's or not; it imports nothing of ours at its top
    from pytest_ditar.plugin import activation

    return activation

"""pytest-ditar's pytest11 entry point: its options, and hooks that each hand over to gateplugin:
to the run's GatePlugin where a ditar config is active, else to NoRun, which leaves pytest alone.
(GatePlugin itself is registered too, for pytest_runtest_logreport, which has no config, and for
pytest_internalerror and a wrapper around every plugin's pytest_sessionfinish, so that an error in
the judge after the tests ends a gated run as a CRASH instead of leaving it undecided.)"""
from __future__ import annotations

from pathlib import Path

import pytest

from pytest_ditar.plugin import artifacts, gateplugin, hookspecs


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("ditar", "pytest-ditar: DiT inference gates")
    g.addoption("--ditar-config", default=None, help="config file (default: ini ditar_config, else config/autoresearch.json)")
    g.addoption("--ditar-baseline", action="store_true", help="store the baseline snapshot instead of running tests")
    g.addoption("--ditar-force", action="store_true", help="with --ditar-baseline: replace an existing baseline")
    g.addoption("--ditar-tag", default=None, help="session tag (default: from the autoresearch/<tag> branch)")
    g.addoption("--ditar-device", default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    g.addoption("--ditar-class", default=None, help="experiment class: exact, numerical, approximate, quantization")
    g.addoption("--ditar-description", default=None, help="experiment description (default: commit subject)")
    g.addoption("--ditar-no-revert", action="store_true", help="record the verdict but leave git alone")
    g.addoption("--ditar-gate", action="store_true", help="demand a full gated run: refuse instead of reporting")
    g.addoption("--ditar-phase", default=None, choices=["quality", "decide"],
                help="two-phase gate (dit-ar experiment --workers N): 'quality' records results without deciding "
                     "(may run under -n); 'decide' loads them, times the lanes serially and decides once")
    parser.addini("ditar_config", "path of the pytest-ditar config file, relative to the rootdir", default="")


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_benchmark_generate_commit_info(config: pytest.Config) -> dict:
    """pytest-benchmark's commit info, from vcs.repo: its own runs plain `git describe --dirty` and
    `git show`, which start the repository's fsmonitor and filter drivers in the judge's process."""
    from pytest_ditar.vcs import repo as gitops

    return gitops.commit_info(Path(str(config.rootpath)), config.getoption("benchmark_project_name", None))


def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    # the one hook that hands over pytest's option parser: artifacts asks it for pytest-benchmark's
    # --benchmark-json value, as that plugin's own option type makes it
    artifacts.keep_parser(early_config, parser)
    gateplugin.drop_rewrite_caches(early_config)  # before pytest loads the first conftest


@pytest.hookimpl(tryfirst=True)  # before junitxml's and pytest-benchmark's configure read their file options
def pytest_cmdline_main(config: pytest.Config) -> None:
    gateplugin.before_configure(config)


def pytest_configure(config: pytest.Config) -> None:
    gateplugin.configure(config)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    gateplugin.parametrize(metafunc)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    return gateplugin.of(config).ignore_collect(collection_path)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    return gateplugin.of(config).header()


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: the gate must see what will really run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gateplugin.of(config).collection(items)


def pytest_runtestloop(session: pytest.Session) -> bool | None:
    return gateplugin.of(session.config).runtestloop(session)


# after junitxml and pytest-benchmark wrote their files; GatePlugin's wrapper around every plugin's
# session finish makes a run whose finish raised before this one a CRASH, never undecided
@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    gateplugin.of(session.config).sessionfinish(session, exitstatus)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    gateplugin.of(config).terminal_summary(terminalreporter)


def pytest_unconfigure(config: pytest.Config) -> None:
    gateplugin.of(config).unconfigure(config)

"""pytest-ditar's pytest11 entry point: its options and the hooks every project gets, each handing
over to gateplugin. The hooks of a run itself live on gateplugin.GatePlugin, registered only where
a ditar config is active."""
from __future__ import annotations

import pytest

from pytest_ditar.plugin import gateplugin, hookspecs


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


@pytest.hookimpl(tryfirst=True)  # before junitxml's and pytest-benchmark's configure read their file options
def pytest_cmdline_main(config: pytest.Config) -> None:
    gateplugin.before_configure(config)


def pytest_configure(config: pytest.Config) -> None:
    gateplugin.configure(config)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    gateplugin.parametrize(metafunc)


def pytest_runtestloop(session: pytest.Session) -> None:
    gateplugin.refuse_baseline_without_config(session.config)  # with a config, GatePlugin ran the baseline

"""pytest hooks and options for pytest-ditar. Hooks only: the work lives in the role modules."""
from __future__ import annotations

from pathlib import Path

import pytest

from pytest_ditar.plugin import fixtures
from pytest_ditar.core.errors import DitarError
from pytest_ditar.plugin.fixtures import ERROR_KEY, SESSION_KEY

DEFAULT_CONFIG = "config/autoresearch.json"


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


def _config_path(config: pytest.Config) -> Path | None:
    opt = config.getoption("--ditar-config")
    if opt:
        return Path(opt)
    ini = config.getini("ditar_config")
    if ini:
        return Path(config.rootpath) / ini
    hook = config.pluginmanager.hook.pytest_ditar_config_path(config=config)
    if hook:
        return Path(hook)
    default = Path(config.rootpath) / DEFAULT_CONFIG
    return default if default.is_file() else None


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Before any plugin's configure: ask junitxml / pytest-benchmark for files a gated run files away."""
    from pytest_ditar.plugin.artifacts import request_artifacts
    from pytest_ditar.plugin.console import install_bars

    install_bars(config)  # progress bars only when stderr is a terminal (pytest's capture is off here)
    request_artifacts(config, _config_path(config))


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_ditar.plugin import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "quality: a pytest-ditar quality contract (candidate vs the original baseline)")
    config.addinivalue_line("markers", "perf: a pytest-ditar performance lane (candidate vs the champion)")
    config.pluginmanager.register(fixtures, "ditar-fixtures")
    # diffusers' own deprecation noise is not the candidate's problem; keep the agent's output short.
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:diffusers.*")
    config.addinivalue_line("filterwarnings", "ignore::FutureWarning:diffusers.*")
    path = _config_path(config)
    config.stash[SESSION_KEY] = None
    config.stash[ERROR_KEY] = None
    if path is None:
        return
    from pytest_ditar.loop.session import DitarSession

    try:
        from pytest_ditar.plugin.xdist import worker_device

        # An xdist worker gwN is pinned to cuda:N unless the device is given explicitly.
        device = config.getoption("--ditar-device") or worker_device(config)
        sess = DitarSession.open(path, tag=config.getoption("--ditar-tag"), device=device)
    except DitarError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[SESSION_KEY] = sess
    from pytest_ditar.loop.gate import Gate

    config.stash[GATE_KEY] = Gate(sess, config)
    from pytest_ditar.plugin import xdist

    xdist.register(config)  # controller/worker halves of `-n N`; no-op without xdist
    _ACTIVE.append(config.stash[GATE_KEY])


GATE_KEY = pytest.StashKey["object"]()


def _gate(config: pytest.Config):
    return config.stash.get(GATE_KEY, None)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Collect only the active suite's folder under suites/."""
    sess = config.stash.get(SESSION_KEY, None)
    if sess is None:
        return None
    suites = (sess.cfg.root / sess.cfg.suites_dir).resolve()
    try:
        rel = collection_path.resolve().relative_to(suites)
    except ValueError:
        return None
    if rel.parts and rel.parts[0] != sess.cfg.suite:
        return True
    return None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = metafunc.fixturenames
    if "ditar_item" not in names and "ditar_lane" not in names:
        return
    sess = fixtures.get_session(metafunc.config)
    if "ditar_item" in names:
        items = list(sess.suite.corpus)
        metafunc.parametrize("ditar_item", items, ids=[it.id for it in items])
    if "ditar_lane" in names:
        lanes = list(sess.suite.lanes)
        metafunc.parametrize("ditar_lane", lanes, ids=[ln.name for ln in lanes])


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    gate = _gate(config)
    return gate.header() if gate else None


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: the gate must see what will really run
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    # Quality before performance: a candidate that breaks a contract is not worth timing.
    items.sort(key=lambda it: 1 if it.get_closest_marker("perf") else 0)
    gate = _gate(config)
    if gate:
        gate.collected(items)


def pytest_runtestloop(session: pytest.Session) -> bool | None:
    gate = _gate(session.config)
    if gate and session.config.getoption("--ditar-baseline"):
        return gate.run_baseline(session)
    if session.config.getoption("--ditar-baseline"):
        raise pytest.UsageError("--ditar-baseline needs a config: pass --ditar-config PATH")
    if gate and not gate.before_tests(session):
        return True  # refused or guarded: the candidate never runs
    return None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    gate = _gate_of_report(report)
    if gate:
        gate.log_report(report)


_ACTIVE: list = []  # the gate of the running session (logreport has no config argument)


def _gate_of_report(report: pytest.TestReport):
    return _ACTIVE[-1] if _ACTIVE else None


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    gate = _gate(session.config)
    if gate:
        gate.finish(session, exitstatus)
    from pytest_ditar.plugin.artifacts import collect_artifacts

    collect_artifacts(session.config, gate)  # after junitxml and pytest-benchmark wrote theirs


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    gate = _gate(config)
    if gate:
        gate.summary(terminalreporter)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The verdict line is the very last line of a gated run, after pytest's own summary."""
    gate = config.stash.get(GATE_KEY, None)
    if gate in _ACTIVE:
        _ACTIVE.remove(gate)
    line = gate.final_line() if gate else None
    if line:
        config.get_terminal_writer().line(line)

"""pytest's side of the gate: a run's options become RunOptions, collected items and test reports
become plain values, and the gate's exit status and lines go back to pytest.

A ditar run (plugin.activation) has a GatePlugin; any other has NoRun, whose hooks do nothing,
so such a run sees nothing of pytest-ditar beyond its options and its two namespaced markers
(its items keep their order, its warning filters and exit status stay its own)."""
from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import pytest

from pytest_ditar.core.ci import resume_commands, stop_commands
from pytest_ditar.core.errors import DitarError
from pytest_ditar.loop.judge import ci
from pytest_ditar.loop.judge.gate import Gate
from pytest_ditar.loop.judge.nextstep import next_step
from pytest_ditar.loop.run.options import RunOptions
from pytest_ditar.loop.run.results import RunResults
from pytest_ditar.loop.run.session import open_session
from pytest_ditar.plugin import artifacts, fixtures, keys, xdist
from pytest_ditar.plugin.console import install_bars
from pytest_ditar.store.space import is_full

# the short names the suites and `-m quality` use, registered in a ditar run only (a project's own
# `perf` marker elsewhere stays its own); each is the same marker as its namespaced one
ALIASES = ("quality: in a ditar run, the same as ditar_quality", "perf: in a ditar run, the same as ditar_perf")
MARKER_PAIRS = (("quality", "ditar_quality"), ("perf", "ditar_perf"))
# diffusers' own deprecation noise is not the candidate's problem; keep the agent's output short.
WARNING_FILTERS = ("ignore::DeprecationWarning:diffusers.*", "ignore::FutureWarning:diffusers.*")


def run_options(config: pytest.Config, path: Path) -> RunOptions:
    opt = config.getoption
    if opt("--ditar-guard") and not 0 <= opt("--ditar-guard-tolerance") < 1:
        raise pytest.UsageError(f"--ditar-guard-tolerance must be in [0, 1), e.g. 0.05 for 5%; got "
                                f"{opt('--ditar-guard-tolerance')}")
    return RunOptions(
        config_path=path, tag=opt("--ditar-tag"),
        device=opt("--ditar-device") or xdist.worker_device(config),  # an xdist worker gwN: cuda:N
        claimed_class=opt("--ditar-class"), description=opt("--ditar-description"),
        no_revert=bool(opt("--ditar-no-revert")), gate_demanded=bool(opt("--ditar-gate")),
        baseline=bool(opt("--ditar-baseline")), force=bool(opt("--ditar-force")), phase=opt("--ditar-phase"),
        xdist_controller=xdist.is_controller(config), try_only=bool(opt("--ditar-try")),
        guard=float(opt("--ditar-guard-tolerance")) if opt("--ditar-guard") else None)


# pytest-codspeed's plugin object, registered under this name in its own pytest_configure (tryfirst)
CODSPEED_PLUGIN = "codspeed_plugin"


def plugin_conflict(config: pytest.Config) -> str | None:
    """Another plugin that takes the run apart, named with the fix; None where there is none.

    pytest-codspeed, once enabled (`--codspeed` or `$CODSPEED_ENV`), disables pytest-benchmark,
    puts its own `benchmark` fixture (no `pedantic`) in its place and deselects every test that does
    not benchmark: the quality contracts would not run, and a lane would fail inside the judge. It
    is refused rather than half-run. Installed but not enabled, it changes nothing and the gate runs."""
    codspeed = config.pluginmanager.get_plugin(CODSPEED_PLUGIN)
    if codspeed is None or not getattr(codspeed, "is_codspeed_enabled", False):
        return None
    return ("pytest-codspeed is enabled in this ditar run (--codspeed or $CODSPEED_ENV): it disables "
            "pytest-benchmark, replaces its benchmark fixture and deselects the quality tests, so the gate cannot "
            "judge; run the gate without it (unset CODSPEED_ENV, drop --codspeed, or pass -p no:codspeed)")


def before_configure(config: pytest.Config, path: Path) -> None:
    """Before any plugin's configure: ask junitxml / pytest-benchmark for files a gated run files away."""
    install_bars(config)  # progress bars only when stderr is a terminal (pytest's capture is off here)
    artifacts.request_artifacts(config, path)
    if config.getoption("--ditar-guard"):
        artifacts.quiet_tables(config)


def configure(config: pytest.Config, path: Path) -> None:
    """A ditar run's session, gate and plugin, on the config `path`."""
    for line in ALIASES:
        config.addinivalue_line("markers", line)
    config.pluginmanager.register(fixtures, "ditar-fixtures")
    for line in WARNING_FILTERS:
        config.addinivalue_line("filterwarnings", line)
    conflict = plugin_conflict(config)
    if conflict:
        raise pytest.UsageError(conflict)
    try:
        opts = run_options(config, path)
        results = RunResults()  # the gate's; the session reports the candidate's failures it finds into it
        sess = open_session(path, tag=opts.tag, device=opts.device, on_error=results.add_error)
    except DitarError as exc:
        raise pytest.UsageError(str(exc)) from None
    gate = Gate(sess, opts, results)
    gate.prestart()
    config.stash[keys.SESSION_KEY] = sess
    config.stash[keys.GATE_KEY] = gate
    config.pluginmanager.register(GatePlugin(gate, _stop_commands(config)), keys.RUN_PLUGIN)
    xdist.register(config)  # controller/worker halves of `-n N`; no-op without xdist


def _stop_commands(config: pytest.Config) -> str | None:
    """Under GitHub Actions, before any test runs: the runner reads no workflow command from here on
    until the token comes back at the run's end (core.ci.stop_commands). Returns the token."""
    import os
    import secrets
    import sys

    if os.environ.get("GITHUB_ACTIONS") != "true" or getattr(config, "workerinput", None) is not None:
        return None
    token = f"ditar-{secrets.token_hex(16)}"
    sys.stdout.write(stop_commands(token) + "\n")  # pytest's capture is off during configure
    sys.stdout.flush()
    return token


def parametrize(metafunc: pytest.Metafunc) -> None:
    """One quality test per corpus item, one perf test per lane."""
    names = metafunc.fixturenames
    if "ditar_item" not in names and "ditar_lane" not in names:
        return
    sess = keys.get_session(metafunc.config)
    if "ditar_item" in names:
        items = list(sess.suite.corpus)
        metafunc.parametrize("ditar_item", items, ids=[it.id for it in items])
    if "ditar_lane" in names:
        lanes = list(sess.suite.lanes)
        metafunc.parametrize("ditar_lane", lanes, ids=[ln.name for ln in lanes])


class GatePlugin:
    """One run with an active ditar config, holding its gate. Registered as a plugin for the one
    hook that has no config to find it by (pytest_runtest_logreport); the module-level hooks in
    hooks.py call the rest, so they keep the entry point's place among other plugins' hooks
    (an xdist worker's own runtestloop, for one, must run before ours and ends the loop there)."""

    def __init__(self, gate: Gate, commands_token: str | None = None):
        self.gate = gate
        self.commands_token = commands_token  # GitHub's runner reads commands again only at the end
        self.annotations: tuple[str, ...] = ()  # GitHub annotations (loop.judge.ci), printed once commands resume
        self.notes: list[str] = []  # this plugin's own summary lines (the filed artifacts)
        self.closed = False
        self.finished = False  # our session finish ran (decided, refused or reported)
        self.summarized = False  # our lines went out with pytest's terminal summary
        self.interrupted = False  # a Ctrl-C (not an error) went through the session's finish
        self.failure: tuple[str, str] | None = None  # (what, traceback) that failed in the judge after the tests

    def ignore_collect(self, collection_path: Path) -> bool | None:
        """Collect only the active suite's folder under suites/, and nothing beside the way to it:
        pytest imports the conftest.py of every folder it walks into, so the judge never walks
        into mutable/ (or any other folder of the project) on its way to suites/."""
        cfg = self.gate.sess.cfg
        active = (cfg.root / cfg.suites_dir / cfg.suite).resolve()
        path = collection_path.resolve()
        return None if path == active or active in path.parents or path in active.parents else True

    def header(self) -> list[str]:
        return self.gate.header()

    @pytest.hookimpl(tryfirst=True)  # before -m deselects: `-m quality` and `-m ditar_quality` pick the same tests
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            for short, namespaced in MARKER_PAIRS:
                if item.get_closest_marker(short) and not item.get_closest_marker(namespaced):
                    item.add_marker(namespaced)
                elif item.get_closest_marker(namespaced) and not item.get_closest_marker(short):
                    item.add_marker(short)

    def collection(self, items: list[pytest.Item]) -> None:
        # Quality before performance: a candidate that breaks a contract is not worth timing.
        items.sort(key=lambda it: 1 if it.get_closest_marker("perf") else 0)
        self.gate.collected(*keys.collected_keys(items))

    def runtestloop(self, session: pytest.Session) -> bool | None:
        if self.gate.opts.baseline:
            tr = session.config.pluginmanager.get_plugin("terminalreporter")
            if self.gate.run_baseline(echo=tr.write_line if tr else lambda line: None):
                session.testsfailed += 1
            return True
        if not self.gate.before_tests():
            return True  # refused or guarded: the candidate never runs
        return None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        first = self.gate.log_report(report.nodeid, report.when, report.outcome,
                                     report.longreprtext if report.failed else "")
        if first:  # pytest's summary prints this error once, under the first test that hit it
            report.longrepr = f"the same error as {first}"

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Any:
        """Around every plugin's session finish (pytest-benchmark writes its JSON in its own): one
        that raises before ours ran leaves no run undecided. Ours then runs here, the error makes
        the run a CRASH "internal:", and pytest sees no error; a run that was not ours to decide
        (not gated, interrupted) lets the error through after our finish."""
        try:
            return (yield)
        except Exception as exc:
            full = is_full(exc)  # a full disk met by another writer too (pytest's junitxml into the run's folder)
            if self.finished and not (full and self.gate.final_line()):
                raise  # decided or refused before it: the error is that plugin's to report
            if not self.finished:
                self.failure = (f"{_hook_owner(exc, 'pytest_sessionfinish')} raised {type(exc).__name__}: {exc}",
                                traceback.format_exc())
                self.sessionfinish(session, exitstatus)
            if not (self.gate.verdict or (full and self.gate.final_line())):
                raise
            if full:  # the run says so in its last line already; the writer's loss is a note
                self.notes.append(f"ditar: {_hook_owner(exc, 'pytest_sessionfinish')} wrote nothing: {exc}")
            return None
        except BaseException:
            self.interrupted = True
            raise

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_benchmark_generate_machine_info(self, config: pytest.Config) -> dict[str, Any]:
        return artifacts.machine_info()  # a ditar run's only: a project's own runs keep py-cpuinfo's

    def pytest_internalerror(self, excrepr: Any, excinfo: Any) -> None:
        """A hook that raised during the run (INTERNALERROR): kept for the CRASH it makes of a gated run."""
        exc = excinfo.value
        what = f"pytest internal error: {_hook_owner(exc, None)} raised {type(exc).__name__}: {exc}"
        self.failure = self.failure or (what, str(excrepr))

    def sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.finished = True
        status = self._finish(int(exitstatus))
        if status != exitstatus:
            try:
                session.exitstatus = pytest.ExitCode(status)
            except ValueError:  # a CRASH's code is none of pytest's own: pytest ends with the int as it is
                session.exitstatus = int(status)
        self._publish(session.config, int(status))
        self._file_artifacts(session.config)
        self.close()

    def _publish(self, config: pytest.Config, status: int) -> None:
        """--ditar-json, junit properties and, under GitHub Actions, its summary, annotations and outputs
        (loop.judge.ci); an xdist worker leaves them to its controller."""
        import os

        if getattr(config, "workerinput", None) is not None:
            return
        given = config.getoption("--ditar-json")
        xml = getattr(config.option, "xmlpath", None)
        try:
            done = ci.publish(self.gate, status, json_path=Path(config.invocation_params.dir, given) if given else None,
                              junit_path=Path(config.invocation_params.dir, xml) if xml else None, env=os.environ)
            self.notes += done.notes
            self.annotations = done.annotations
        except Exception as exc:  # noqa: BLE001 - what CI reads is a copy: never the undoing of a recorded verdict
            self.notes.append(f"ditar: CI outputs not written: {type(exc).__name__}: {exc}")

    def _finish(self, exitstatus: int) -> int:
        """The gate's decision and record. An error in the judge after the tests (another plugin's,
        or one in the decision and record themselves) makes a gated run a CRASH (record.internal)."""
        if self.failure and exitstatus != pytest.ExitCode.INTERRUPTED:
            status = self.gate.internal(*self.failure)
            if status is not None:
                return status
        try:
            return self.gate.finish(exitstatus)
        except Exception as exc:
            status = self.gate.internal(f"pytest-ditar's decision and record raised {type(exc).__name__}: {exc}",
                                        traceback.format_exc())
            if status is None:
                raise
            return status

    def _file_artifacts(self, config: pytest.Config) -> None:
        run_dir = self.gate.sess.run_dir() if self.gate.gated else None
        try:
            filed = artifacts.collect_artifacts(config, run_dir)
        except OSError as exc:  # a convenience: the verdict is recorded already
            self.notes.append(f"ditar: junit.xml / benchmark.json not filed: {exc}")
            return
        if filed:
            self.notes.append("ditar: " + ", ".join(p.name for p in filed) + f" in {run_dir}")

    def terminal_summary(self, terminalreporter) -> None:
        self.summarized = True
        for line in self.summary_lines():
            terminalreporter.write_line(line)

    def summary_lines(self) -> list[str]:
        nxt = next_step(self.gate)  # the block's last line: what to do next, above the verdict
        return [*self.gate.summary(), *self.notes, *([nxt] if nxt else [])]

    def unconfigure(self, config: pytest.Config) -> None:
        """The verdict is the very last line of a gated run, after pytest's own summary."""
        if not self.finished and not self.interrupted and self.gate.gated:
            # the session's finish never reached us: a plugin's hook raised around ours
            self.finished = True
            self.gate.internal("the session's finish never reached pytest-ditar (another plugin's "
                               "pytest_sessionfinish raised around it)", None)
            self._file_artifacts(config)
        self.close()  # a run that never reached its session's end still stops its workers
        tw = config.get_terminal_writer()
        if not (self.summarized or config.getoption("no_summary", False)) and self.gate.verdict:
            # pytest skipped its summary (a plugin raised in the session's finish): ours goes out here
            for line in self.summary_lines():
                tw.line(line)
        if self.commands_token:  # the runner reads commands again: ours, escaped, and nothing else
            tw.line(resume_commands(self.commands_token))
            for line in self.annotations:
                tw.line(line)
        final = self.gate.final_line()
        if final:
            if getattr(tw, "width_of_current_line", 0):  # pytest's progress line left open by an error
                tw.line()
            tw.line(final)

    def close(self) -> None:
        """Stop the candidate workers, once, after the decision and the revert (their logs join the run's)."""
        if not self.closed:
            self.closed = True
            compiled_note = self.gate.sess.close()
            self.gate.drop_guard_dir()
            if compiled_note:
                self.notes.append(compiled_note)


def _hook_owner(exc: BaseException, hook: str | None) -> str:
    """Who raised `exc`: "pytest_sessionfinish of plugin 'mod'" from the innermost frame of that
    hook (else of any hook) in its traceback; a plugin's error is named by its module."""
    tb, owner = exc.__traceback__, None
    while tb is not None:
        name = tb.tb_frame.f_code.co_name
        if name == hook or (hook is None and name.startswith("pytest_")):
            owner = f"{name} of plugin '{tb.tb_frame.f_globals.get('__name__', '?')}'"
        tb = tb.tb_next
    return owner or (hook or "a hook")

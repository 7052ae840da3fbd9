"""Whether a pytest run is a ditar run, decided once, before any plugin's configure.

A ditar run is one that asks for it: a `--ditar-*` option on the command line (every `dit-ar`
command passes `--ditar-config`), or a collection that reaches the config's suites folder (plain
`pytest` in a research project, whose testpaths name `suites`, or `pytest suites/tiny`). A
project's own `pytest tests` is none, even where a ditar config lies at the default path: it
opens no session, starts no worker and prints nothing of ours. Everything here stays light (no
numpy, no torch, no gate): it runs in every pytest start of every environment that has the
plugin installed.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

import pytest

from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.vocabulary import DEFAULT_CONFIG, ENV_CONFIG
from pytest_ditar.loop.integrity import hermetic  # its copy of the environment, before torch's imports
from pytest_ditar.plugin.keys import RUN_PLUGIN, keep_parser

if TYPE_CHECKING:
    from pytest_ditar.plugin.gateplugin import GatePlugin

# the options whose presence alone makes a ditar run (their argparse dests)
OPTIONS = ("ditar_config", "ditar_baseline", "ditar_force", "ditar_tag", "ditar_device", "ditar_class",
           "ditar_description", "ditar_no_revert", "ditar_gate", "ditar_try", "ditar_guard", "ditar_phase",
           "ditar_json")
DEFAULT_SUITES = "suites"

_DECIDED_KEY = pytest.StashKey["Path | None"]()
_START_KEY = pytest.StashKey["Start | None"]()


def config_path(config: pytest.Config) -> Path | None:
    """--ditar-config, else $DITAR_CONFIG (as `dit-ar --config` defaults to it), else the ini's
    ditar_config, else a conftest's hook, else the default file."""
    opt = config.getoption("--ditar-config") or os.environ.get(ENV_CONFIG)
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


def ditar_config(config: pytest.Config) -> Path | None:
    """The config of this run when it is a ditar run, else None; decided once per run."""
    if _DECIDED_KEY not in config.stash:
        path = config_path(config)
        if path is not None and not (asked(config) or collects_suites(config, path)):
            path = None
        config.stash[_DECIDED_KEY] = path
    return config.stash[_DECIDED_KEY]


def asked(config: pytest.Config) -> bool:
    """A `--ditar-*` option was given."""
    return any(getattr(config.option, dest, None) for dest in OPTIONS)


def collects_suites(config: pytest.Config, path: Path) -> bool:
    """The run's collection paths reach the config's suites folder (lie in it, or hold it)."""
    suites = suites_dir(path)
    here = Path(config.invocation_params.dir)
    for arg in config.args:
        target = (here / str(arg).split("::", 1)[0]).resolve()
        if target == suites or suites in target.parents or target in suites.parents:
            return True
    return False


def suites_dir(path: Path) -> Path:
    """The config's suites folder; for a config that does not load, the default one (the run that
    reaches it then reports the config's error)."""
    from pytest_ditar.config import project  # start-up: yaml, for a project with a ditar config only

    try:
        cfg = project.load_config(path)
        return (cfg.root / cfg.suites_dir).resolve()
    except (DitarError, OSError):
        return (project.project_root_of(Path(path).resolve()) / DEFAULT_SUITES).resolve()


MARKERS = ("ditar_quality: a pytest-ditar quality contract (candidate vs the original baseline)",
           "ditar_perf: a pytest-ditar performance lane (candidate vs the champion)")


def before_conftests(early_config: pytest.Config, parser: pytest.Parser) -> None:
    """The one hook that hands over pytest's option parser: artifacts asks it for pytest-benchmark's
    --benchmark-json value, as that plugin's own option type makes it. A ditar run's command line
    and environment are checked here, before the first conftest loads; a ditar run that the judge
    did not start (a plain `pytest`) is handed to one it starts (`delegate`). In a ditar project
    (its config named on the command line, in the ini, or at the default path), pytest's
    assertion-rewrite caches go before the first conftest loads (loop.integrity.stamps): whether this is a
    ditar run is not known yet, pytest has not decided its collection arguments."""
    keep_parser(early_config, parser)
    start = early_config.stash[_START_KEY] = ditar_start(early_config)
    why = hermetic_refusal(early_config, start)
    if why:  # before the first conftest loads; pytest ends with its usage-error code, 4, as a refusal does
        line = f"DITAR REFUSED: {why}"
        print(line, flush=True)
        raise pytest.UsageError(line)
    if start is not None and start.judged is None and not start.baseline:
        delegate(early_config, start)
    root = Path(early_config.rootpath)
    if getattr(early_config.known_args_namespace, "ditar_config", None) or os.environ.get(ENV_CONFIG) \
            or early_config.getini("ditar_config") or (root / DEFAULT_CONFIG).is_file():
        from pytest_ditar.loop.integrity.stamps import (
            drop_rewrite_caches,  # start-up: in a project with a ditar config only
        )

        drop_rewrite_caches(root)


class Start(NamedTuple):
    """A ditar run's start: its config, suites folder and invocation folder; the user's arguments
    when the judge started it (its own options taken off: loop.integrity.judgetree), else None."""
    cfg: Any
    path: Path
    suites: Path
    here: Path
    judged: list[str] | None
    baseline: bool


def ditar_start(early_config: pytest.Config) -> Start | None:
    """This pytest start when it is a ditar run (asked for with a --ditar-* option, or collecting
    the suites), and not an xdist worker (its controller's command line was checked); else None.
    Decided from the command line alone: no conftest has loaded yet."""
    if hasattr(early_config, "workerinput") or not parsed_from_a_command_line():
        return None
    ns = early_config.known_args_namespace
    path = getattr(ns, "ditar_config", None) or os.environ.get(ENV_CONFIG)
    root = Path(early_config.rootpath)
    if path:
        path = Path(path)
    elif early_config.getini("ditar_config"):
        path = root / early_config.getini("ditar_config")
    else:
        path = root / DEFAULT_CONFIG
        if not path.is_file():
            return None
    from pytest_ditar.config.project import load_config  # start-up: yaml, for a project with a ditar config only

    try:
        cfg = load_config(path)
    except (DitarError, OSError):
        return None  # the run reports the config's error where it always did
    suites = (cfg.root / cfg.suites_dir).resolve()
    here = Path(early_config.invocation_params.dir)
    targets = list(getattr(ns, "file_or_dir", None) or ())
    if not targets:
        targets = list(early_config.getini("testpaths") or ()) if here.resolve() == root.resolve() else []
        targets = targets or ["."]
    reaches = any((here / str(t).split("::", 1)[0]).resolve() in (suites, *suites.parents)
                  or suites in (here / str(t).split("::", 1)[0]).resolve().parents for t in targets)
    if not (reaches or any(getattr(ns, dest, None) for dest in OPTIONS)):
        return None
    from pytest_ditar.loop.integrity import judgetree  # start-up: git, in a ditar run only

    return Start(cfg, Path(path).resolve(), suites, here,
                 judgetree.judge_started(early_config.invocation_params.args, cfg),
                 bool(getattr(ns, "ditar_baseline", False)))


def parsed_from_a_command_line() -> bool:
    """Whether this config is pytest's parse of a command line (`pytest`, `python -m pytest`,
    `pytest.main`): its `pytest_cmdline_parse` hook is on the stack. A config another tool builds
    for its own use (`pytest-benchmark compare` calls `Config.fromdictargs`) runs no session, so
    it is never a ditar run: handed over, it would start a gated run nobody asked for."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "pytest_cmdline_parse":
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def hermetic_refusal(early_config: pytest.Config, start: Start | None) -> str | None:
    """Why this pytest start may not be a ditar run (loop.integrity.hermetic): an option that loads code, a
    collection path outside the suites folder, pytest's or Python's code-loading variables; in a
    run the judge started, a tree that differs from the baseline's outside the mutable paths
    (loop.integrity.judgetree). The judge's own options (`-c` its ini, `--rootdir`, `--noconftest`) are taken
    off before the rest is checked as the user's. A `-p` module and `PYTEST_PLUGINS` were imported
    by pytest before this plugin: the run is refused, but their code ran (`dit-ar experiment`
    refuses before pytest starts)."""
    if start is None:
        return None
    cfg, here = start.cfg, start.here
    args = early_config.invocation_params.args if start.judged is None else start.judged
    protected = (*cfg.fixed_paths, *cfg.mutable_paths)
    why = (hermetic.option_refusal(args, cfg.root, start.suites, cfg.state_path, protected, here=here)
           or hermetic.env_refusal(os.environ, cfg.root, start.suites, cfg.state_path, protected))
    if why:
        return why
    found = hermetic.code_env(os.environ, allowed_paths=(cfg.root, here))
    if found:
        return (f"environment variable {found[0]} changes how Python runs the judge (it loads code or moves "
                f"paths): unset it (unset {' '.join(found)}), or run `dit-ar experiment`, which clears it")
    if start.judged is not None and not start.baseline:
        from pytest_ditar.loop.integrity import judgetree  # start-up: git, in a ditar run only
        from pytest_ditar.loop.integrity.tags import resolve_tag  # start-up: the same

        try:
            tag = resolve_tag(cfg, early_config.known_args_namespace.ditar_tag)
        except DitarError:
            return None  # no tag: the gate says which
        return judgetree.launch_refusal(cfg, tag)
    return None


def delegate(early_config: pytest.Config, start: Start) -> NoReturn:
    """Hand a ditar run started as plain `pytest` to a pytest the judge starts: this process has
    read the project's ini files and conftest.py already (an ini's `-p module` ran before any
    plugin), so it decides nothing. The judge's pytest checks the tree against the baseline, runs
    on the judge's own configuration (loop.integrity.judgetree), and its output and exit status are this
    run's. A ditar run that is never handed over (its config named by a conftest alone) is refused
    at configure (`before_configure`)."""
    import subprocess
    import tempfile

    from pytest_ditar.loop.integrity import judgetree  # start-up: git, in a ditar run handed over only
    from pytest_ditar.loop.integrity.tags import resolve_tag  # start-up: the same
    from pytest_ditar.vcs.hardened import judge_env  # start-up: the same

    cfg, ns = start.cfg, early_config.known_args_namespace
    args = list(early_config.invocation_params.args)
    if not getattr(ns, "ditar_config", None):
        args.append(f"--ditar-config={start.path}")
    try:
        base = judgetree.baseline_commit(cfg.root, cfg.state_dir, resolve_tag(cfg, ns.ditar_tag))
    except DitarError:
        base = None
    sys.stdout.flush()
    with tempfile.TemporaryDirectory(prefix="ditar-judge-") as tmp:
        ini = judgetree.write_judge_ini(cfg, Path(tmp), base)
        cmd = [sys.executable, "-m", "pytest", *judgetree.judge_args(ini, cfg.root), *args]
        rc = subprocess.call(cmd, cwd=start.here, env={**os.environ, **judge_env(cfg.root)})
    raise SystemExit(rc)


def before_configure(config: pytest.Config) -> None:
    path = ditar_config(config)
    if path is not None and not hasattr(config, "workerinput"):
        why = unjudged_refusal(config, path)
        if why:
            print(f"DITAR REFUSED: {why}", flush=True)
            raise pytest.UsageError(f"DITAR REFUSED: {why}")
    if path is not None:
        from pytest_ditar.plugin import xdist  # start-up: the gate's (numpy, the loop), in a ditar run only

        if not xdist.is_controller(config):
            # first, before the gate's own imports: a warm zygote is adopted at once, a new one's
            # imports overlap everything the judge does until its first build
            from pytest_ditar.loop.run import warmstart  # start-up: it starts a zygote (runtime), in a ditar run only

            warmstart.begin(path, config.getoption("--ditar-tag"), records=records(config))
        from pytest_ditar.plugin import gateplugin  # start-up: the gate, in a ditar run only

        gateplugin.before_configure(config, path)


def unjudged_refusal(config: pytest.Config, path: Path) -> str | None:
    """A ditar run that neither the judge started nor was handed to it (`delegate`): its config was
    named only by a conftest hook, which ran in this process. It never decides (issue 49)."""
    start = config.stash.get(_START_KEY, None)
    if start is not None and (start.judged is not None or start.baseline):
        return None
    from pytest_ditar.config.project import load_config  # start-up: in a ditar run only

    try:
        load_config(path)
    except (DitarError, OSError):
        return None  # the gate reports the config's error, as it always did
    return (f"this ditar run was not started by the judge (its config {path} was named by a conftest.py, which "
            "ran in this process before any check): name the config on the command line (--ditar-config), or run "
            "`dit-ar experiment` / `dit-ar try` / `dit-ar guard`")


def records(config: pytest.Config) -> bool:
    """Whether this run writes the tag's record (a gated run or a baseline: not `--ditar-try`,
    `--ditar-guard`, nor the quality phase's xdist workers), so may hand its zygote over."""
    opt = config.getoption
    return not (opt("--ditar-try") or opt("--ditar-guard") or opt("--ditar-phase") == "quality"
                or os.environ.get("PYTEST_XDIST_WORKER"))


def configure(config: pytest.Config) -> None:
    """The namespaced markers in every run; the gate in a ditar run only."""
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    path = ditar_config(config)
    if path is not None:
        from pytest_ditar.plugin import gateplugin  # start-up: the gate, in a ditar run only

        gateplugin.configure(config, path)


def parametrize(metafunc: pytest.Metafunc) -> None:
    if of(metafunc.config) is not NO_RUN:
        from pytest_ditar.plugin import gateplugin  # start-up: the gate, in a ditar run only

        gateplugin.parametrize(metafunc)


def commit_info(config: pytest.Config) -> dict | None:
    """pytest-benchmark's commit info for a ditar run (vcs.queries'), else None: its own."""
    if of(config) is NO_RUN:
        return None
    from pytest_ditar.vcs import queries  # start-up: in a ditar run only

    return queries.commit_info(Path(str(config.rootpath)), config.getoption("benchmark_project_name", None))


def of(config: pytest.Config) -> "GatePlugin | NoRun":
    """The run that the module-level hooks hand over to: the gate's, or one that does nothing."""
    return config.pluginmanager.get_plugin(RUN_PLUGIN) or NO_RUN


class NoRun:
    """A run that is not a ditar run: every hook leaves pytest alone."""

    def ignore_collect(self, collection_path: Path) -> None:
        return None

    def header(self) -> None:
        return None

    def collection(self, items: list[pytest.Item]) -> None:
        pass

    def runtestloop(self, session: pytest.Session) -> None:
        if session.config.getoption("--ditar-baseline"):
            raise pytest.UsageError("--ditar-baseline needs a config: pass --ditar-config PATH")

    def sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        pass

    def terminal_summary(self, terminalreporter: Any) -> None:
        pass

    def unconfigure(self, config: pytest.Config) -> None:
        pass


NO_RUN = NoRun()

"""What a gated run takes from its command line and its environment (issue 39, docs/trust.md).

The judge is a pytest process, and pytest loads code from wherever its command line and its
environment say: `-p module`, a collection path whose `conftest.py` it imports, `-c`/`--rootdir`
(another ini, another conftest tree), `-o` (any ini key), `-W` and `PYTHONWARNINGS` (a warning
category is imported by name), `PYTEST_PLUGINS`, `PYTHONPATH`, `LD_PRELOAD`. So a gated run takes
a fixed set of options that only shape pytest's output and pace (`ALLOWED`) and collection paths
inside the suites folder, and every other option is refused by name; the environment variables
that load code or change how Python runs are cleared by `dit-ar experiment` and refused in a
gated `pytest`; those that change how torch and its libraries compute (threads, TF32, the
allocator, the library path) are pinned to their values at the baseline (loop.integrity.stamps).
"""
from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Iterable, Mapping, Sequence

# long options that take no value, and those that take one (`--tb=short` or `--tb short`)
FLAGS = frozenset({
    "--quiet", "--verbose", "--exitfirst", "--showlocals", "--no-header", "--no-summary", "--collect-only", "--co",
    "--strict-markers", "--disable-warnings", "--disable-pytest-warnings", "--full-trace", "--no-showlocals",
    "--benchmark-quiet",  # pytest-benchmark's tables off (`dit-ar experiment` and `try` add it)
})
VALUED = frozenset({
    "--tb", "--color", "--code-highlight", "--maxfail", "--capture", "--durations", "--durations-min",
    "--show-capture", "--verbosity", "--numprocesses", "--dist", "--maxprocesses", "--deselect",
})
SHORT_FLAGS = "qvxsl"  # -q -v -x -s -l, alone or joined (-xq)
SHORT_VALUED = "nrmkp"  # -n 2, -rA, -m perf, -k expr, -p (only the two forms below)
# pytest-ditar's own options that take a value (the rest are flags)
DITAR_VALUED = frozenset({"--ditar-config", "--ditar-tag", "--ditar-device", "--ditar-class", "--ditar-description",
                          "--ditar-phase", "--ditar-guard-tolerance", "--ditar-json"})
OWN_PLUGIN = "pytest_ditar.plugin.hooks"  # `dit-ar` names it where the package has no entry point
OWN_NAMES = frozenset({"ditar", OWN_PLUGIN})  # the judge's names to pytest: its entry point's, its module's
ALLOWED = ("-q -v -x -s -l -r -n -m -k --tb --color --maxfail --capture --durations --deselect --numprocesses --dist "
           "--collect-only --no-header --no-summary --showlocals --strict-markers --disable-warnings "
           "--benchmark-quiet, -p no:NAME, "
           "--ditar-*, and paths inside the suites folder")

# Python's own variables that change nothing but its output's encoding and buffering, and what it
# writes beside sources (every other PYTHON* loads code, moves paths, or changes how it runs)
BENIGN_PYTHON = frozenset({"PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "PYTHONUTF8",
                           "PYTHONHASHSEED", "PYTHONFAULTHANDLER", "PYTHONCOERCECLOCALE", "PYTHONSTARTUP",
                           "PYTHON_COLORS", "PYTHON_BASIC_REPL", "PYTHON_HISTORY", "PYTHONLEGACYWINDOWSSTDIO"})
# pytest's variables that load code or change its command line: refused, never cleared (an ask)
PYTEST_CODE = ("PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
# what torch and the libraries under it read: pinned to the baseline's values (loop.integrity.stamps)
PINNED_PREFIXES = ("TORCH", "PYTORCH_", "CUDA_", "CUBLAS", "CUDNN", "NVIDIA_TF32", "OMP_", "MKL_", "OPENBLAS_",
                   "KMP_", "GOMP_", "NCCL_", "TRITON_", "MALLOC_", "GLIBC_TUNABLES", "LD_LIBRARY_PATH")
# which GPUs a run uses is the user's to choose per run (the hardware fingerprint pins the device);
# the compile caches' folders are set by the judge for its workers (loop.run.session), whatever they were
NOT_PINNED = frozenset({"CUDA_VISIBLE_DEVICES", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
                        "TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCHINDUCTOR_AUTOGRAD_CACHE"})
# the environment as the judge started, before torch sets variables of its own in it
STARTUP_ENV = dict(os.environ)


def code_env(environ: Mapping[str, str], allowed_paths: Iterable[Path] = ()) -> list[str]:
    """The names in `environ` that load code into Python or change how it runs (cleared by `dit-ar
    experiment`, refused in a gated `pytest`). A PYTHONPATH of `allowed_paths` only (the project
    root, which `python -m pytest` puts first on the path anyway, as pytester does) is no more."""
    allowed = {Path(p).resolve() for p in allowed_paths}
    out = [k for k in environ if k.startswith("PYTHON") and k not in BENIGN_PYTHON
           and not (k == "PYTHONPATH" and allowed
                    and all(Path(e or ".").resolve() in allowed for e in environ[k].split(os.pathsep)))]
    out += [k for k in environ if k.startswith("LD_") and k != "LD_LIBRARY_PATH"]
    return sorted(out)


def pinned_env(environ: Mapping[str, str]) -> dict[str, str]:
    """{name: value} of the variables a gated run holds to the baseline's values."""
    return {k: v for k, v in sorted(environ.items())
            if k.startswith(PINNED_PREFIXES) and k not in NOT_PINNED}


def pinned_env_changes(recorded: Mapping[str, str], environ: Mapping[str, str]) -> list[str]:
    now = pinned_env(environ)
    out = [f"{k} set ({now[k]!r})" for k in sorted(now.keys() - recorded.keys())]
    out += [f"{k} unset (was {recorded[k]!r})" for k in sorted(recorded.keys() - now.keys())]
    out += [f"{k} changed ({recorded[k]!r} -> {now[k]!r})" for k in sorted(recorded.keys() & now.keys())
            if recorded[k] != now[k]]
    return out


def env_refusal(environ: Mapping[str, str], root: Path, suites: Path, state: Path,
                protected: Iterable[str] = ()) -> str | None:
    """Why a gated run may not start in `environ`: pytest's code-loading variables, PYTEST_ADDOPTS
    naming an option outside the allowed set (None when none)."""
    for name in PYTEST_CODE:
        if environ.get(name):
            return (f"environment variable {name}={environ[name]!r} loads code into the judge: unset it "
                    f"(unset {name}); a gated run loads only pytest-ditar and the installed plugins")
    addopts = environ.get("PYTEST_ADDOPTS", "")
    if addopts.strip():
        try:
            tokens = shlex.split(addopts)
        except ValueError:
            tokens = [addopts]
        why = option_refusal(tokens, root, suites, state, protected, here=root)
        if why:
            return f"PYTEST_ADDOPTS: {why}"
    return None


def option_refusal(args: Sequence[str], root: Path, suites: Path, state: Path, protected: Iterable[str] = (),
                   here: Path | None = None) -> str | None:
    """Why the pytest arguments `args` may not start a gated run (None: every one is allowed).
    Collection paths count from `here` (the invocation folder) and must lie in `suites`."""
    return _OptionScan(args, root, suites, state, protected, Path(here or os.getcwd())).refusal()


class _OptionScan:
    """pytest's arguments read left to right as pytest reads them (an option's value may be the next
    argument), each option checked against the allowed set, each path against the suites folder."""

    def __init__(self, args: Sequence[str], root: Path, suites: Path, state: Path, protected: Iterable[str],
                 here: Path):
        self.args = [str(a) for a in args]
        self.root, self.suites, self.state, self.protected, self.here = root, suites, state, protected, here
        self.i = 0

    def refusal(self) -> str | None:
        while self.i < len(self.args):
            a = self.args[self.i]
            self.i += 1
            if a == "--":
                bad = next((p for p in self.args[self.i:] if not _in_suites(p, self.here, self.suites)), None)
                return _path_refusal(bad, self.suites) if bad is not None else None
            if a.startswith("--"):
                why = self._long_option(a)
            elif a.startswith("-") and len(a) > 1:
                why = self._short_options(a)
            else:
                why = None if _in_suites(a, self.here, self.suites) else _path_refusal(a, self.suites)
            if why:
                return why
        return None

    def _next_value(self) -> str:
        """The next argument, taken as the value of the option before it ("" past the end)."""
        value = self.args[self.i] if self.i < len(self.args) else ""
        self.i += 1
        return value

    def _long_option(self, a: str) -> str | None:
        name, eq, value = a.partition("=")
        if name in FLAGS or (name.startswith("--ditar-") and name not in DITAR_VALUED):
            return None
        if name in VALUED or name in DITAR_VALUED:
            self.i += 0 if eq else 1
            return None
        if name in ("--basetemp", "--junitxml", "--junit-xml"):
            return self._write_path(name, value if eq else self._next_value())
        return _refusal(name, a)

    def _write_path(self, name: str, value: str) -> str | None:
        why = _basetemp_refusal(value, self.here, self.root, self.state, self.protected)
        if why and name != "--basetemp":
            return (f"pytest option {name}={value} is not allowed in a gated run: it would write a file in the "
                    "project, its git or its state (point it outside the project)")
        return why

    def _short_options(self, a: str) -> str | None:
        """A cluster of short options (-vx, -pNAME, -p NAME): flags, then at most one that takes a value."""
        for j, c in enumerate(a[1:], 1):
            if c in SHORT_FLAGS:
                continue
            if c not in SHORT_VALUED:
                return _refusal(f"-{c}", a)
            value = a[j + 1:] or self._next_value()
            if c == "p" and not (value.startswith("no:") or value == OWN_PLUGIN):
                return (f"pytest option -p {value} is not allowed in a gated run: it imports that module "
                        "into the judge (only -p no:NAME is; drop it)")
            if c == "p" and value[3:] in OWN_NAMES:
                return (f"pytest option -p {value} is not allowed in a gated run: it turns the judge off "
                        "(drop it)")
            return None
        return None

_WHY = {"-p": "imports a module into the judge", "-c": "reads another ini file", "-o": "overrides the ini",
        "--override-ini": "overrides the ini", "--rootdir": "moves the rootdir",
        "--confcutdir": "changes which conftest.py files load", "--pyargs": "collects modules by import",
        "--import-mode": "changes how test modules are imported", "-W": "imports a warning category by name",
        "--pythonwarnings": "imports a warning category by name", "--noconftest": "drops the fixed conftest",
        "--tx": "starts the interpreters it names", "--rsyncdir": "copies folders to xdist nodes",
        "--junitxml": "writes a file where it says", "--benchmark-json": "writes a file where it says"}


def _refusal(name: str, token: str) -> str:
    shown = token if len(token) <= 80 else token[:77] + "..."
    why = f": it {_WHY[name]}" if name in _WHY else ""
    return (f"pytest option {name} is not allowed in a gated run ({shown}){why}; a gated run takes only {ALLOWED} "
            "(drop it, or run report-only off the research branch)")


def _in_suites(arg: str, here: Path, suites: Path) -> bool:
    target = (here / arg.split("::", 1)[0]).resolve()
    return target == suites or suites in target.parents


def _path_refusal(arg: str, suites: Path) -> str:
    return (f"collection path {arg} is outside the suites folder {suites}: a gated run collects only the suites "
            "(a conftest.py on another path would run in the judge); drop it")


def _basetemp_refusal(value: str, here: Path, root: Path, state: Path, protected: Iterable[str]) -> str | None:
    """pytest empties --basetemp when a test asks for a temporary folder, and writes --junitxml (the
    report CI reads, issue 43) where it says: never the project, its git, its state or a path the
    config names."""
    p, root = (here / value).resolve(), root.resolve()
    bad = p == root or p in root.parents
    if not bad and root in p.parents:
        first = p.relative_to(root).parts[0]
        tops = {".git", Path(state).resolve().relative_to(root).parts[0] if Path(state).resolve().is_relative_to(root)
                else ".git"}
        tops |= {Path(x.rstrip("/")).parts[0] for x in protected if x.strip("/")}
        bad = first in tops
    if bad:
        return (f"pytest option --basetemp={value} is not allowed in a gated run: pytest empties that folder, which "
                "holds the project, its git or its state (drop it)")
    return None


def judge_environ(environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The environment `dit-ar experiment` runs the gate's pytest in, and the names it cleared."""
    cleared = code_env(environ)
    return {k: v for k, v in environ.items() if k not in cleared}, cleared

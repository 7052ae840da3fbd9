"""`dit-ar experiment`: the full gate on the committed candidate, run as `pytest --ditar-gate`.

pytest runs in a subprocess: the CLI never imports it, and the gate's run is the same one a
plain `pytest` at the root would make.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Callable

from pytest_ditar.cli.command import Command, config_path
from pytest_ditar.config.project import load_config
from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.verdict_json import record, try_record
from pytest_ditar.core.vocabulary import CLASSES
from pytest_ditar.loop.integrity import hermetic, judgetree, stamps
from pytest_ditar.loop.integrity.guards import config_refusal
from pytest_ditar.loop.integrity.tags import resolve_tag
from pytest_ditar.loop.judge.nextstep import PREFIX as NEXT, REFUSED as REFUSED_NEXT
from pytest_ditar.loop.perf.bound import bound_refusal
from pytest_ditar.loop.run.options import Exit
from pytest_ditar.loop.run.phases import run_two_phase
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.space import shortage
from pytest_ditar.vcs import queries
from pytest_ditar.vcs.hardened import judge_env

CLASS_HELP = ("what the change is (program.md, Classes): exact = same algorithm (layout, fusion, scheduling, "
              "memory); numerical = arithmetic mode (fp16/bf16, TF32); approximate = computation changed or skipped "
              "(fewer steps, caching, sparsity); quantization = low-bit weights/activations. Its quality floors "
              "judge the change")
# pytest-benchmark's own option (4.0+): its tables off. Their statistics are the fixture's first rounds
# alone, not the verdict's (the summary says so), and they stood between the next step and the verdict.
BENCHMARK_QUIET = "--benchmark-quiet"


class Experiment(Command):
    name = "experiment"
    help = "run the full gate on the committed candidate (pytest); exit 0 KEEP, 1 DISCARD, 10 CRASH, 4 REFUSED"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--classification", required=True, choices=CLASSES, help=CLASS_HELP)
        parser.add_argument("--description", required=True,
                            help="the hypothesis in one line: recorded in the ledger, the run's summary and the report")
        parser.add_argument("--device", default=None)
        parser.add_argument("--no-revert", action="store_true", help="record the verdict but leave git alone")
        parser.add_argument("--workers", type=int, default=0,
                            help="shard the quality phase over N pytest-xdist workers (one GPU each), then time the "
                                 "lanes serially and decide once")
        parser.add_argument("--json", action="store_true",
                            help="print the run's outcome as one JSON document on stdout, pytest's output going to "
                                 "stderr (schema: docs/verdict-json.md)")
        parser.add_argument("--quiet", action="store_true",
                            help="print only the `ditar: next:` line and the verdict line (the run dir keeps the rest)")
        parser.add_argument("--benchmark-tables", action="store_true",
                            help="show pytest-benchmark's tables (off by default: the verdict is the judge's clock)")
        parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="extra pytest arguments after --")

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        cfg = config_path(args)
        root, refusal = _bound_check(cfg, args.tag)
        code = Exit.BOUND_REACHED  # a person bounded the session (`dit-ar init --max-experiments/--until`)
        if not refusal:
            refusal = _space_refusal(cfg) or hermetic_refusal(cfg, args.pytest_args, args.tag, gated=True)
            code = Exit.REFUSED
        if refusal:
            print(_dumps(record(None, code, refusal=refusal, next_step=_refusal_next(code)))
                  if args.json else f"DITAR REFUSED: {refusal}")
            return code
        # every git command of the gate's pytest runs no repository code, whoever starts it
        # (pytest-benchmark runs plain git while it adds its options, before any hook of ours)
        os.environ.update(judge_env(root))
        cleared = hermetic.code_env(os.environ)
        for name in cleared:  # Python's code-loading variables never reach the judge (nor its workers)
            os.environ.pop(name)
        if cleared:
            print(f"ditar: not passed to the judge: {', '.join(cleared)} (they load code or change how Python runs)",
                  file=sys.stderr)
        tee = _Tee(quiet=args.quiet, to_stderr=args.json) if args.json or args.quiet else None
        call = tee.call if tee else subprocess.call
        with tempfile.TemporaryDirectory(prefix="ditar-experiment-") as tmp:
            cmd = pytest_command(args, cfg, "--ditar-gate", f"--ditar-description={args.description}",
                                 ini_dir=Path(tmp))
            if not args.benchmark_tables:
                cmd.append(BENCHMARK_QUIET)
            if args.no_revert:
                cmd.append("--ditar-no-revert")
            doc = Path(tmp) / "verdict.json"
            if args.json:  # the gate writes its outcome there itself (--ditar-json): nothing reads its line back
                cmd.append(f"--ditar-json={doc}")
            if args.workers:
                rc = run_two_phase(cmd, args.workers, root, call=call)
            else:
                rc = call(cmd, cwd=root)
            if tee and args.json:
                print(_dumps(_document(doc, rc, tee.last)))
        return rc


class _Tee:
    """Runs the gate's pytest with its output passed on as it comes, keeping the verdict line: to
    stderr under --json (stdout is the document's), and only the next-step and verdict lines when
    `quiet` (pytest's stderr then folded in and filtered alike)."""

    def __init__(self, quiet: bool = False, to_stderr: bool = False) -> None:
        self.last: str | None = None
        self.quiet, self.to_stderr = quiet, to_stderr

    def call(self, cmd: list[str], cwd: Path) -> int:
        out = sys.stderr if self.to_stderr else sys.stdout
        with subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT if self.quiet else None,
                              text=True, bufsize=1) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                if not self.quiet or line.startswith(("DITAR ", NEXT)):
                    out.write(line)
                    out.flush()
                if line.startswith("DITAR "):
                    self.last = line.strip()
            return proc.wait()


def _refusal_next(code: int) -> str:
    """A refusal's next step: stop at the session's bound, else fix what it names (loop.judge.nextstep)."""
    return "stop: the session's bound is reached" if code == Exit.BOUND_REACHED else REFUSED_NEXT


def _document(path: Path, rc: int, last: str | None) -> Mapping[str, object]:
    """The --json document: the one the gate wrote (`path`, its --ditar-json), with the process's exit
    status; where it wrote none (pytest failed before the gate decided or refused), the run's last
    DITAR line and no verdict."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return record(None, int(rc), line=last)
    return {**doc, "exit_status": int(rc)}


def _dumps(doc: Mapping[str, object]) -> str:
    return json.dumps(doc, indent=1)


def pytest_command(args: argparse.Namespace, cfg: Path, *flags: str, ini_dir: Path) -> list[str]:
    """The gate's pytest command line for `args` (class, tag, device, extra pytest arguments), run
    outside any xdist worker's environment even when dit-ar itself runs inside one, on the judge's
    own configuration (loop.integrity.judgetree: its ini written in `ini_dir`, the project root as rootdir, no
    conftest), added after the user's arguments were checked."""
    for var in [k for k in os.environ if k.startswith("PYTEST_XDIST_")]:
        os.environ.pop(var)
    cmd = [*judge_pytest(cfg, args.tag, ini_dir), *plugin_flag(), "-p", "no:cacheprovider", f"--ditar-config={cfg}",
           *flags, f"--ditar-class={args.classification}", "-q", *(a for a in args.pytest_args if a != "--")]
    if args.tag:
        cmd.append(f"--ditar-tag={args.tag}")
    if args.device:
        cmd.append(f"--ditar-device={args.device}")
    return cmd


def run_judge(cfg: Path, args: argparse.Namespace, prefix: str, command: Callable[[Path], list[str]],
              as_json: bool = False) -> int:
    """A report-only judge (`try`, `guard`): refused before pytest reads a file of the project
    (hermetic_refusal), else `command(ini_dir)` run from the project root, git hardened, the
    judge's ini written in a temporary folder of `prefix`. `as_json` (`try --json`): one document
    on stdout (core.verdict_json.try_record, the run writing it itself), pytest's output on stderr."""
    refusal = hermetic_refusal(cfg, args.pytest_args, args.tag)
    if refusal:
        print(_dumps(try_record(None, Exit.REFUSED, line=None, next_step=REFUSED_NEXT, refusal=refusal))
              if as_json else f"DITAR REFUSED: {refusal}")
        return int(Exit.REFUSED)
    root = load_config(cfg).root
    os.environ.update(judge_env(root))
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        if not as_json:
            return subprocess.call(command(Path(tmp)), cwd=root)
        doc = Path(tmp) / "try.json"
        rc = subprocess.call([*command(Path(tmp)), f"--ditar-json={doc}"], cwd=root, stdout=sys.stderr)
        try:
            out = {**json.loads(doc.read_text()), "exit_status": int(rc)}
        except (OSError, ValueError):  # pytest ended before the try had an outcome
            out = dict(try_record(None, int(rc), line=None, next_step=None))
        print(_dumps(out))
        return rc


def judge_pytest(cfg: Path, tag: str | None, ini_dir: Path) -> list[str]:
    """`python -m pytest` with the judge's own options first (loop.integrity.judgetree.judge_args)."""
    conf = load_config(cfg)
    try:
        base = judgetree.baseline_commit(conf.root, conf.state_dir, resolve_tag(conf, tag))
    except DitarError:
        base = None
    ini = judgetree.write_judge_ini(conf, ini_dir, base)
    return [sys.executable, "-m", "pytest", *judgetree.judge_args(ini, conf.root)]


def plugin_flag() -> list[str]:
    """Load the plugin explicitly where the package is importable but not installed (no entry point)."""
    import importlib.metadata as md

    if any(ep.name == "ditar" for ep in md.entry_points(group="pytest11")):
        return []
    return ["-p", "pytest_ditar.plugin.hooks"]


def hermetic_refusal(path: Path, extra: list[str], tag: str | None, gated: bool = False) -> str | None:
    """Why the extra pytest arguments, the environment, the tree outside the mutable paths
    (loop.integrity.judgetree) or a changed module of the judge's (against the baseline's stamp) may not
    start a run of the judge (loop.integrity.hermetic, loop.integrity.stamps), decided before pytest starts: none of
    what they name has run in the judge. A `gated` run takes only the repository's config. The
    gate checks them all again."""
    import json

    cfg = load_config(path)
    if gated:
        why = config_refusal(cfg, queries.state(cfg.root).toplevel)
        if why:
            return why
    suites, protected = (cfg.root / cfg.suites_dir).resolve(), (*cfg.fixed_paths, *cfg.mutable_paths)
    why = (hermetic.option_refusal([a for a in extra if a != "--"], cfg.root, suites, cfg.state_path, protected,
                                   here=cfg.root)
           or hermetic.env_refusal(os.environ, cfg.root, suites, cfg.state_path, protected))
    if why:
        return why
    try:
        why = judgetree.launch_refusal(cfg, resolve_tag(cfg, tag))
    except DitarError:
        why = None  # no tag: the gate says which
    if why:
        return why
    try:
        manifest = TagPaths.of(cfg.root, cfg.state_dir, resolve_tag(cfg, tag)).baseline / "manifest.json"
        stamped = json.loads(manifest.read_text())
    except (DitarError, OSError, ValueError):  # no tag or baseline, a damaged one: the gate says which
        return None
    return stamps.before_pytest(stamped) if isinstance(stamped, dict) else None


def _space_refusal(path: Path) -> str | None:
    """A disk too full for the run's record, before git or pytest writes a byte (store.space)."""
    cfg = load_config(path)
    return shortage(cfg.root, cfg.state_path)


def _bound_check(path: Path, tag: str | None) -> tuple[Path, str | None]:
    """The project root, and the refusal once the session's bound is reached (else None)."""
    cfg = load_config(path)
    return cfg.root, bound_refusal(TagPaths.of(cfg.root, cfg.state_dir, resolve_tag(cfg, tag)).dir)

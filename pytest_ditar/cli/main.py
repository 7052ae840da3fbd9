"""`dit-ar`: the seed's command line, thin over the plugin's modules.

Heavy imports (torch, diffusers) happen inside the commands that need them, so `dit-ar search`
and `dit-ar status` start fast.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from pytest_ditar.core.errors import DitarError

DEFAULT_CONFIG = "config/autoresearch.json"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dit-ar", description="DiT inference autoresearch gates (pytest-ditar)")
    p.add_argument("--config", default=os.environ.get("DITAR_CONFIG", DEFAULT_CONFIG), help="config file (default: %(default)s)")
    p.add_argument("--tag", default=None, help="session tag (default: from the autoresearch/<tag> branch)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("doctor", help="check branch, tree, baseline, config, versions, device")
    sp = sub.add_parser("init", help="create and check out autoresearch/<tag> from a clean tree")
    sp.add_argument("--tag", dest="init_tag", required=True)
    sp.add_argument("--gpu", type=int, default=None,
                    help="parallel research: a git worktree for this tag, bound to GPU N (cuda:N)")
    sp.add_argument("--worktree", default=None, help="with --gpu: the worktree path (default: <repo>-<tag> beside the repo)")
    sp = sub.add_parser("baseline", help="store the unmodified pipeline's outputs, lane samples and noise floor")
    sp.add_argument("--force", action="store_true", help="replace an existing baseline")
    sp.add_argument("--device", default=None)
    sp = sub.add_parser("experiment", help="run the full gate on the committed candidate (pytest)")
    sp.add_argument("--classification", required=True, choices=["exact", "numerical", "approximate", "quantization"])
    sp.add_argument("--description", required=True)
    sp.add_argument("--device", default=None)
    sp.add_argument("--no-revert", action="store_true", help="record the verdict but leave git alone")
    sp.add_argument("--workers", type=int, default=0,
                    help="shard the quality phase over N pytest-xdist workers (one GPU each), then time the lanes "
                         "serially and decide once")
    sp.add_argument("pytest_args", nargs=argparse.REMAINDER, help="extra pytest arguments after --")
    sp = sub.add_parser("status", help="baseline, champion, recent experiments, ledger chain")
    sp.add_argument("-n", type=int, default=10, help="recent experiments to show")
    sp.add_argument("--json", action="store_true")
    sp.add_argument("--all", action="store_true", help="every tag of every worktree (branch, path, GPU, champion, counts)")
    sp = sub.add_parser("demo", help="the whole loop on the tiny suite in a scratch workspace (CPU, < 1 min)")
    sp.add_argument("--workspace", default=None, help="keep the workspace here (default: a temp dir, removed)")
    sp = sub.add_parser("verify", help="re-check snapshot hashes, ledger chain, fixed paths; re-generate sample baseline items")
    sp.add_argument("--sample", type=int, default=3, help="baseline items to re-generate (default: %(default)s)")
    sp.add_argument("--device", default=None)
    sp = sub.add_parser("report", help="HTML report (progress plot, ledger, image diffs) in .autoresearch/<tag>/report/")
    sp.add_argument("--out", default=None, help="output directory (default: <state dir>/report)")
    from pytest_ditar.cli.search import add_search_parser

    add_search_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except DitarError as exc:
        print(f"dit-ar: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dit-ar: interrupted", file=sys.stderr)
        return 130


def _config_path(args: argparse.Namespace) -> Path:
    return Path(args.config).resolve()


def _session(args: argparse.Namespace, device: str | None = None):
    from pytest_ditar.loop.session import DitarSession

    return DitarSession.open(_config_path(args), tag=args.tag, device=device)


def cmd_init(args: argparse.Namespace) -> int:
    from pytest_ditar.vcs import repo as gitops
    from pytest_ditar.config.project import load_config

    cfg = load_config(_config_path(args))
    if args.gpu is not None or args.worktree:
        from pytest_ditar.loop.worktrees import init_worktree

        wt = init_worktree(cfg, args.init_tag, args.gpu, args.worktree)
        gpu = f"cuda:{args.gpu}" if args.gpu is not None else "the default device"
        print(f"worktree {wt} on {cfg.branch_prefix}{args.init_tag}, bound to {gpu}; state in "
              f"{wt / cfg.state_dir / args.init_tag}")
        print(f"next: cd {wt} && dit-ar --config {cfg.path.relative_to(cfg.root)} baseline")
        return 0
    st = gitops.state(cfg.root)
    if not st.is_repo or not st.head:
        raise DitarError(f"{cfg.root}: not a git repository with a commit (git init && git add -A && git commit first)")
    gitops.ensure_ignored(cfg.root, [f"/{cfg.state_dir}/"])
    st = gitops.state(cfg.root)
    if st.dirty_paths:
        raise DitarError(f"{cfg.root}: the tree is not clean ({', '.join(st.dirty_paths[:3])}); commit or stash first")
    branch = cfg.branch_prefix + args.init_tag
    start = st.head
    gitops.create_branch(cfg.root, branch)
    state = cfg.state_path / args.init_tag
    state.mkdir(parents=True, exist_ok=True)
    session_file = state / "session.json"
    if not session_file.exists():
        session_file.write_text(json.dumps({"tag": args.init_tag, "branch": branch, "start_commit": start}, indent=1))
    print(f"on {branch} (start {start[:7]}); state in {state}")
    print("next: dit-ar --config {} baseline".format(os.path.relpath(cfg.path)))
    return 0


def cmd_baseline(args: argparse.Namespace) -> int:
    from pytest_ditar.vcs import repo as gitops
    from pytest_ditar.loop.baseline import create_baseline, manifest_summary

    sess = _session(args, args.device)
    start = _start_commit(sess)
    if start:
        changed = [p for p in gitops.changed_files(sess.cfg.root, start)
                   if any(p.startswith(m.rstrip("/") + "/") or p == m.rstrip("/") for m in sess.cfg.mutable_paths)]
        if changed:
            raise DitarError(f"{', '.join(changed[:3])} differ from the branch's start commit {start[:7]}: "
                             "the baseline must be the unmodified pipeline (reset mutable/ to the start commit)")
    print(f"dit-ar: storing baseline of suite {sess.suite.name} ({len(sess.suite.corpus)} items) on {sess.resolved_device()}...",
          flush=True)
    path = create_baseline(sess, force=args.force)
    print(manifest_summary(path))
    lanes = json.loads((path / "lanes.json").read_text())
    for name, lane in lanes.items():
        n = lane["noise"]
        paired = f" (paired {n['paired']['ci_half_width'] * 100:.2f}%)" if n.get("paired") else ""
        print(f"  lane {name}: median {statistics.median(lane['samples']) * 1e3:.2f} ms, A/A noise ci half-width "
              f"{n['ci_half_width'] * 100:.2f}%{paired}, shift {n['abs_shift'] * 100:.2f}%")
    return 0


def _start_commit(sess) -> str | None:
    f = sess.state_dir / "session.json"
    return json.loads(f.read_text()).get("start_commit") if f.is_file() else None


def cmd_experiment(args: argparse.Namespace) -> int:
    # The gate's pytest is never an xdist worker, even when dit-ar itself runs inside one.
    for var in [k for k in os.environ if k.startswith("PYTEST_XDIST_")]:
        os.environ.pop(var)
    cfg = _config_path(args)
    extra = [a for a in args.pytest_args if a != "--"]
    cmd = [sys.executable, "-m", "pytest", *_plugin_flag(), "-p", "no:cacheprovider", f"--ditar-config={cfg}", "--ditar-gate",
           f"--ditar-class={args.classification}", f"--ditar-description={args.description}", "-q", *extra]
    if args.tag:
        cmd.append(f"--ditar-tag={args.tag}")
    if args.device:
        cmd.append(f"--ditar-device={args.device}")
    if args.no_revert:
        cmd.append("--ditar-no-revert")
    root = _root_of(cfg)
    if args.workers:
        from pytest_ditar.loop.phases import run_two_phase

        return run_two_phase(cmd, args.workers, root)
    return subprocess.call(cmd, cwd=root)


def _plugin_flag() -> list[str]:
    """Load the plugin explicitly where the package is importable but not installed (no entry point)."""
    import importlib.metadata as md

    if any(ep.name == "ditar" for ep in md.entry_points(group="pytest11")):
        return []
    return ["-p", "pytest_ditar.plugin.hooks"]


def _root_of(cfg: Path) -> Path:
    from pytest_ditar.config.project import load_config

    return load_config(cfg).root


def cmd_status(args: argparse.Namespace) -> int:
    from pytest_ditar.cli.status import status

    if args.all:
        from pytest_ditar.config.project import load_config
        from pytest_ditar.loop.worktrees import status_all

        return status_all(load_config(_config_path(args)), as_json=args.json)
    return status(_session_light(args), n=args.n, as_json=args.json)


def _session_light(args: argparse.Namespace):
    """Config + suite + tag without touching torch (status must be quick)."""
    from pytest_ditar.config.project import load_config
    from pytest_ditar.loop.session import resolve_tag
    from pytest_ditar.config.suite import load_suite

    cfg = load_config(_config_path(args))
    return cfg, load_suite(cfg.suite_dir), resolve_tag(cfg, args.tag)


def cmd_doctor(args: argparse.Namespace) -> int:
    from pytest_ditar.cli.doctor import doctor

    return doctor(_config_path(args), args.tag)


def cmd_search(args: argparse.Namespace) -> int:
    from pytest_ditar.cli.search import run_search

    handbook = Path("knowledge/handbook")
    cfg_path = _config_path(args)
    if cfg_path.is_file():
        from pytest_ditar.config.project import load_config

        cfg = load_config(cfg_path)
        handbook = cfg.root / cfg.knowledge_dir
    return run_search(args, handbook)


def cmd_report(args: argparse.Namespace) -> int:
    from pytest_ditar.report.html import build_report

    cfg, _suite, tag = _session_light(args)
    state = cfg.state_path / tag
    if not state.is_dir():
        raise DitarError(f"{state}: no research state for tag '{tag}' (run `dit-ar init` and `dit-ar baseline` first)")
    index = build_report(state, args.out, lane=cfg.objective_lane, target=cfg.target, title=f"pytest-ditar: {tag}")
    print(f"report {index}")
    print(f"plot   {index.parent / 'progress.png'}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from pytest_ditar.loop.verify import verify

    return verify(_session(args, args.device), sample=args.sample)


def cmd_demo(args: argparse.Namespace) -> int:
    from pytest_ditar.cli.demo import demo

    return demo(_config_path(args), args.workspace)


COMMANDS = {
    "init": cmd_init,
    "baseline": cmd_baseline,
    "experiment": cmd_experiment,
    "status": cmd_status,
    "doctor": cmd_doctor,
    "search": cmd_search,
    "demo": cmd_demo,
    "report": cmd_report,
    "verify": cmd_verify,
}


if __name__ == "__main__":
    sys.exit(main())

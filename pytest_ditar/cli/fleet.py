"""`dit-ar fleet {init,push,promote,launch}`: many hosts, one champion, shared through a git
remote (docs/fleet.md). The git and fleet rules are loop.share.fleet's; the re-judge is `dit-ar
experiment`'s gate, run here on the staged commit."""
from __future__ import annotations

import argparse
from pathlib import Path

from pytest_ditar.cli.command import Command, config_path
from pytest_ditar.cli.experiment import Experiment
from pytest_ditar.config.project import Config, load_config
from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.fleet import reference_row
from pytest_ditar.core.vocabulary import FLEET_REF, PROMOTION, SCREENING, UNJUDGED
from pytest_ditar.loop.integrity.tags import resolve_tag
from pytest_ditar.loop.integrity.worktrees import collect_all
from pytest_ditar.loop.run import launch
from pytest_ditar.loop.share import fleet
from pytest_ditar.vcs import branches, queries, trees


class Fleet(Command):
    name = "fleet"
    help = "share research across hosts through a git remote: init, push, promote, launch (docs/fleet.md)"
    description = ("A host's tag is <fleet>.<host> (`dit-ar init --tag lab.box1`). `init` makes this host the "
                   "fleet's reference (its card judges promotions); `push` sends this host's branch, state backup "
                   "and champion to the remote; `promote --host H` re-judges host H's champion here with the gate "
                   "and, on a KEEP on the reference card, makes it the fleet champion; `launch` runs one loop a GPU "
                   "as submitit jobs (Slurm, or its local executor).")

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("action", choices=("init", "push", "promote", "launch"))
        parser.add_argument("--remote", default="origin", help="remote name or URL (default: %(default)s)")
        parser.add_argument("--force", action="store_true",
                            help="push: write this host's refs over a remote copy another loop wrote")
        parser.add_argument("--host", help="promote: the host whose champion to re-judge")
        parser.add_argument("--command", dest="job_command",
                            help="launch: what each job runs in its tag's worktree ({tag} is replaced)")
        parser.add_argument("--tags", default="", help="launch: comma-separated tags (default: every worktree's)")
        parser.add_argument("--checkouts", default="",
                            help="launch: comma-separated clones, each on its research branch (instead of --tags)")
        parser.add_argument("--cluster", choices=("slurm", "local"), default="slurm",
                            help="launch: the scheduler (default %(default)s)")
        parser.add_argument("--gpus", default="", help="launch --cluster local: the cards, one a job (e.g. 0,1)")
        parser.add_argument("--partition", default=None, help="launch: the Slurm partition")
        parser.add_argument("--timeout-min", type=int, default=12 * 60, help="launch: each job's limit")
        parser.add_argument("--folder", default=".ditar-jobs", help="launch: submitit's logs (default: %(default)s)")
        parser.add_argument("--wait", action="store_true", help="launch: wait for the jobs and print their last lines")

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        cfg = load_config(config_path(args))
        if args.action == "launch":
            return _launch(cfg, args)
        tag = resolve_tag(cfg, args.tag)
        name, _host = fleet.own_host(tag)
        if args.action == "init":
            theirs = _fetched(cfg, args, tag, name)
            ref_row = reference_row(theirs)
            if ref_row is not None and ref_row.get("host") != _host:
                raise DitarError(f"fleet {name} on {args.remote} has a reference host already: {ref_row.get('host')}")
            if ref_row is None:
                fleet.publish(cfg, args.remote, name, [fleet.reference(cfg, tag)])
            print(f"fleet {name}: host {_host} is the reference on {args.remote} ({FLEET_REF}{name})")
            return 0
        if args.action == "push":
            theirs = _fetched(cfg, args, tag, name)
            own = [f"refs/heads/{cfg.branch_prefix}{tag}", trees.state_ref(tag)]
            rows, tries = fleet.publish(cfg, args.remote, name, fleet.announce(fleet.own_state(cfg, tag), theirs), own)
            print(f"fleet push: {cfg.branch_prefix}{tag} and {trees.state_ref(tag)} to {args.remote}; "
                  f"fleet ledger {len(rows)} rows (push {tries} of at most 8)")
            return 0
        return _promote(cfg, args, tag, name)


def _promote(cfg, args: argparse.Namespace, tag: str, name: str) -> int:
    if not args.host:
        raise DitarError("fleet promote: --host names the host whose champion to re-judge")
    cand, _ = fleet.stage(cfg, tag, args.remote, args.host)
    print(f"fleet promote: host {args.host}'s champion {cand.source_commit[:7]} committed here as "
          f"{cand.commit[:7]} ({cand.claimed_class}); the gate judges it against this host's champion")
    exp = argparse.ArgumentParser()
    exp.add_argument("--config")
    exp.add_argument("--tag")
    Experiment.add_arguments(exp)
    ns = exp.parse_args(["--config", args.config, "--tag", tag, "--classification", cand.claimed_class, "--description",
                         f"promote host {args.host}'s champion {cand.source_commit[:7]}"])
    rc = Experiment.run(ns)
    out, row = fleet.verdict_row(cfg, tag, cand)
    if row is None:  # the gate refused: the staged commit goes, so the branch is as it was
        branches.revert_to_parent(cfg.root, cand.commit)
        print(f"DITAR FLEET: nothing recorded (the gate exited {rc} without a verdict on {cand.commit[:7]}, "
              "which was taken back off the branch)")
        return rc or 4
    fleet.publish(cfg, args.remote, name, [row],
                  [f"refs/heads/{cfg.branch_prefix}{tag}", trees.state_ref(tag)])
    if out.kind == PROMOTION:
        print(f"DITAR FLEET: PROMOTED host {out.source_host}'s {out.source_commit[:7]} as {out.candidate[:7]}: "
              "the fleet champion")
        return 0
    if out.kind == SCREENING:
        print(f"DITAR FLEET: SCREENING {out.verdict} on another card ({'; '.join(out.card_diff)}): not a promotion; "
              "the reference host re-judges it")
        return 0
    if out.kind == UNJUDGED:
        print(f"DITAR FLEET: NOT JUDGED: the reference host's run could not judge host {out.source_host}'s "
              f"{out.source_commit[:7]} (its objective lane was UNSTABLE); next: `dit-ar fleet promote --host "
              f"{out.source_host}` once more")
        return 1
    print(f"DITAR FLEET: NOT PROMOTED: the gate's verdict on the reference host was {out.verdict}")
    return 1


def _launch(cfg, args: argparse.Namespace) -> int:
    if not args.job_command:
        raise DitarError("fleet launch: --command is what each job runs (the agent's loop), e.g. "
                         "--command 'dit-ar experiment --classification exact --description x'")
    if args.checkouts:  # separate clones: each one's tag is its research branch's
        paths = [Path(p).resolve() for p in args.checkouts.split(",") if p]
        found = [(queries.state(p).branch or "", p) for p in paths]
        off = [str(p) for b, p in found if not b.startswith(cfg.branch_prefix)]
        if off:
            raise DitarError(f"fleet launch: not on a research branch ({cfg.branch_prefix}<tag>): {', '.join(off)}")
        pairs = [(b[len(cfg.branch_prefix):], p) for b, p in found]
    else:
        known = {r["tag"]: Path(r["worktree"]) for r in collect_all(cfg)}
        tags = [t for t in args.tags.split(",") if t] or list(known)
        missing = [t for t in tags if t not in known]
        if missing:
            raise DitarError(f"fleet launch: no worktree holds tag(s) {', '.join(missing)} (`dit-ar init --tag T`)")
        pairs = [(t, known[t]) for t in tags]
    gpus = [int(g) for g in args.gpus.split(",") if g]
    folder = Path(args.folder) if Path(args.folder).is_absolute() else cfg.root / args.folder
    jobs = launch.launch(pairs, args.job_command, folder, args.cluster, gpus, args.timeout_min,
                         args.partition)
    for (t, _), j in zip(pairs, jobs):
        print(f"fleet launch: tag {t} job {j.job_id} ({args.cluster})")
    if not args.wait:
        return 0
    worst = 0
    for j in jobs:
        res = j.result()
        print(f"fleet launch: tag {res.tag} exit {res.returncode} gpu {res.gpu or '-'}: {res.last_line}")
        worst = max(worst, res.returncode)
    return worst


def _fetched(cfg: Config, args: argparse.Namespace, tag: str, name: str) -> list[dict[str, object]]:
    """The remote fetched and this host's refs there checked as its own loop's (else refused,
    unless --force restores them); returns the fleet ledger's rows."""
    key = fleet.fetch(cfg, args.remote)
    clash = fleet.other_writer(cfg, key, tag)
    if clash and not args.force:
        raise DitarError(f"fleet {args.action}: {clash}")
    theirs, _ = fleet.read_fleet(cfg.root, f"{FLEET_REF}{key}/{name}", args.remote)
    return theirs

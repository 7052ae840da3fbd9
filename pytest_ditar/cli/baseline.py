"""`dit-ar baseline`: store the unmodified pipeline's outputs, lane samples and A/A noise floor."""
from __future__ import annotations

import argparse
import json
import statistics

from pytest_ditar.cli.command import Command, config_path, open_session
from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.hostcheck import MODEST
from pytest_ditar.loop.run import warmstart
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.records import read_lanes
from pytest_ditar.vcs import queries

NEXT = "ditar: next: "  # as a gated run's summary ends (loop.judge.nextstep)


class Baseline(Command):
    name = "baseline"
    help = "store the unmodified pipeline's outputs, lane samples and noise floor"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--force", action="store_true", help="replace an existing baseline")
        parser.add_argument("--device", default=None)
        parser.add_argument("--accept-noise", action="store_true",
                            help="store the baseline even where its A/A noise is above perf.max_baseline_win")

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        warmstart.begin(config_path(args), args.tag, records=True)  # the zygote it hands the first gated run
        # start-up: after warmstart.begin, so that the zygote's imports overlap the loop's
        from pytest_ditar.loop.judge.baseline import create_baseline, manifest_summary, objective_reach

        sess = open_session(args, args.device)
        _refuse_changed_mutable(sess)
        print(f"dit-ar: storing baseline of suite {sess.suite.name} ({len(sess.suite.corpus)} items) on "
              f"{sess.resolved_device()}...", flush=True)
        try:
            path = create_baseline(sess, force=args.force, accept_noise=args.accept_noise)
        finally:
            sess.close()  # its worker processes
        print(manifest_summary(path))
        stored = json.loads((path / "lanes.json").read_text())
        for name, lane in read_lanes(stored).items():
            if lane.noise is None:  # a lane of another kind (loop.perf.lanekinds): its own figure
                print(f"  lane {name}: {lane.figure or 'stored'}")
                continue
            n = lane.noise
            paired = f" (paired {n['paired']['ci_half_width'] * 100:.2f}%)" if n.get("paired") else ""
            print(f"  lane {name}: median {statistics.median(lane.samples) * 1e3:.2f} ms, A/A noise ci half-width "
                  f"{n['ci_half_width'] * 100:.2f}%{paired}, shift {n['abs_shift'] * 100:.2f}%")
        reach = objective_reach(sess, stored)
        if reach is not None:
            big = reach.effect > MODEST
            print(f"{'warning: ' if big else ''}lane {sess.cfg.objective_lane}: smallest resolvable win "
                  f"1+{reach.effect * 100:.1f}% (bound 1+{sess.cfg.perf.max_baseline_win * 100:.0f}%, "
                  "perf.max_baseline_win)" + (f"; a win under {1 + MODEST:.2f}x cannot be judged on this baseline: "
                                              "`dit-ar doctor` measures the host now, and on a quieter host "
                                              "`dit-ar baseline --force` re-takes it" if big else ""))
        print(f"{NEXT}the first hypothesis (program.md section 2): `dit-ar profile` shows where the time goes; "
              "edit mutable/, `dit-ar try`, commit with its `Ditar-Class:` trailer, `dit-ar experiment`")
        return 0


def _refuse_changed_mutable(sess) -> None:
    """Every later verdict compares against this baseline, so it must be the branch's start, unedited."""
    start = _start_commit(sess)
    if not start:
        return
    changed = [p for p in queries.changed_files(sess.cfg.root, start)
               if any(p.startswith(m.rstrip("/") + "/") or p == m.rstrip("/") for m in sess.cfg.mutable_paths)]
    if changed:
        raise DitarError(f"{', '.join(changed[:3])} differ from the branch's start commit {start[:7]}: "
                         "the baseline must be the unmodified pipeline (reset mutable/ to the start commit)")


def _start_commit(sess) -> str | None:
    f = TagPaths(sess.state_dir).session_file
    return json.loads(f.read_text()).get("start_commit") if f.is_file() else None

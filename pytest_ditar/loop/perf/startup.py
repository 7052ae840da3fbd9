"""Worker start-up ahead of need: the candidate's interpreter at configure time, then every build
a gated run will wait on, sent at once so they overlap the guards and each other.

Starting early is an optimisation only. What fails here (a candidate that cannot import, a
worktree that cannot be checked out) fails again, and is reported, where the build is needed:
the fixtures' `get_candidate`, the lanes, the holdout. So a failure here is returned as text,
which the gate keeps (`Gate.start_failures`), never raised and never the verdict."""
from __future__ import annotations

from typing import Iterable

from pytest_ditar.config.suite import Lane
from pytest_ditar.core.errors import CandidateError, DitarError
from pytest_ditar.loop.perf.lanes import TWIN_PHASE
from pytest_ditar.loop.run import champion, holdout, phases
from pytest_ditar.loop.run.options import RunOptions
from pytest_ditar.loop.run.session import DitarSession

# What starting a worker or a build can raise: the worker's own errors, ours (a missing package,
# a worktree git will not make) and the operating system's (a process that cannot spawn).
START_ERRORS = (CandidateError, DitarError, OSError)


def prestart(sess: DitarSession, opts: RunOptions) -> str | None:
    """The candidate's worker process, started at configure time (no candidate code runs before
    its build is sent): its interpreter and torch import overlap collection and the guards."""
    if opts.xdist_controller:
        return None  # the controller runs no candidate; its xdist workers start their own
    try:
        sess.worker(sess.code(), "candidate")
    except START_ERRORS as exc:
        return f"candidate worker: {exc}"
    return None


def start_builds(sess: DitarSession, opts: RunOptions, lane_names: Iterable[str], head: str | None,
                 champion_commit: str | None, baseline_commit: str | None) -> list[str]:
    """Send the candidate's, the champion's (and its twin's) and the holdout baseline's builds now,
    so they overlap: the second and third start-ups then cost no wall time. Returns what could not
    start."""
    if opts.xdist_controller:
        return []
    failed = []
    try:
        sess.get_candidate(start_only=True)
    except START_ERRORS as exc:
        failed.append(f"candidate build: {exc}")
    wanted = set(lane_names)
    lanes = [ln for ln in sess.suite.lanes if ln.name in wanted]
    if opts.phase == phases.QUALITY or not lanes:
        return failed  # no lane to time
    try:
        _start_reference_sides(sess, lanes, head, champion_commit)
        _start_holdout_reference(sess, opts, head, baseline_commit)
    except START_ERRORS as exc:
        failed.append(f"reference builds: {exc}")
    return failed


def _start_reference_sides(sess: DitarSession, lanes: list[Lane], head: str | None,
                           champion_commit: str | None) -> None:
    """The champion's build (and its twin's, for the objective lane), one a side per rank count: 1 for
    the one-GPU lanes, N for a lane of N GPUs (a group), with the candidate's of that count."""
    objective = sess.cfg.objective_lane
    for ranks in sorted({getattr(ln, "gpus", 1) for ln in lanes}):
        if ranks > 1:
            sess.get_candidate(ranks, start_only=True)
        champion.build(sess, champion_commit, head, start_only=True, ranks=ranks)
        if sess.cfg.perf.twin and champion_commit and champion_commit != head and sess.cfg.perf.interleave \
                and any(ln.name == objective and getattr(ln, "gpus", 1) == ranks for ln in lanes):
            # the objective lane times the champion's twin too (loop.perf.lanes): it builds beside the others
            sess.build_at_commit(champion_commit, TWIN_PHASE, start_only=True, ranks=ranks, role="twin")


def _start_holdout_reference(sess: DitarSession, opts: RunOptions, head: str | None,
                             baseline_commit: str | None) -> None:
    """The holdout's reference is the baseline code, a third worker where it is not the champion's."""
    if not (baseline_commit and sess.cfg.holdout.count):
        return
    if opts.phase is None:  # built, and its outputs for the fresh items made, beside the candidate's quality
        holdout.start_reference(sess, baseline_commit)
    elif baseline_commit != head:
        sess.build_at_commit(baseline_commit, "holdout", start_only=True, role="holdout")

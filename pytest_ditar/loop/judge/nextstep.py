"""The last line of a run's summary block: what to do next, in one line, as `dit-ar init` ends.

It sits just above the verdict (or DITAR REFUSED) line, which stays the run's very last line, and
follows program.md section 2: the agent reads one line, not a manual, after every run."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pytest_ditar.core import rerun
from pytest_ditar.core.quality import aggregate
from pytest_ditar.core.vocabulary import INTERNAL
from pytest_ditar.loop.perf.bound import bound_refusal
from pytest_ditar.loop.perf.reach import undecided_note
from pytest_ditar.loop.run import phases

if TYPE_CHECKING:
    from pytest_ditar.core.decision import Decision
    from pytest_ditar.loop.judge.gate import Gate

PREFIX = "ditar: next: "
# The re-run rule (core.rerun.RULE) in the words every output gives it: the experiment's next: line
# after a run not judged, `dit-ar status`'s count of them, program.md section 2.
HOST_NOT_JUDGED = ("not judged because of the host (noise or load, not the idea): this never counts toward leaving "
                   "it; run it again as it is, when the host is quieter")
NOT_JUDGED_WHY = "the objective lane was UNSTABLE for the {who}'s doing (interference, champion drift), not the host's"
RUN_ONCE_MORE = "run it once more as it is"
LEAVE_IT = ("not judged twice for the candidate's or the champion's doing: leave the idea on this champion (a new "
            "baseline or a new champion lifts that); `dit-ar doctor` says whether this host can judge a modest win now")
NOT_JUDGED_RULE = rerun.RULE
REFUSED = "nothing was judged or recorded; fix what the DITAR REFUSED line names, then run it again"


def next_step(gate: Gate) -> str | None:
    """The next-step line for this run, or None where the run is one step of another (a baseline,
    phase 1 of a two-phase gate, a run that collected nothing of ours)."""
    if gate.opts.baseline or gate.opts.phase == phases.QUALITY or gate.opts.guard is not None:
        return None  # a guard is CI's, not the loop's: its FAIL line and the lanes' lines say it all
    if gate.gated and gate.decision is not None:
        return PREFIX + _after_verdict(gate, gate.decision)
    if gate.refusal:
        if gate.refused_class:  # the class gate: nothing to fix, only to choose
            return PREFIX + ("nothing was judged; pick a class this session can judge (`dit-ar doctor` lists them) "
                             "or stop")
        return PREFIX + REFUSED
    return _after_smoke(gate)


def _after_verdict(gate: Gate, d: Decision) -> str:
    bound = bound_refusal(gate.sess.state_dir)
    if bound:
        return bound
    head = str(gate.head or "")[:7]
    run = os.path.relpath(gate.sess.run_dir(), gate.root)  # the summary's lines above give it in full
    left = "the commit stays (--ditar-no-revert)" if gate.opts.no_revert else f"reverted to {str(gate.parent)[:7]}"
    if d.status == "KEEP":
        # the KEEP stands (program.md section 5); an unmeasured guard lane is said, not hidden
        unmeasured = getattr(d, "unmeasured", ())
        said = (f" (guard lane {', '.join(unmeasured)} not measured: its reason in {run}/summary.json)"
                if unmeasured else "")
        return f"{head} is the champion{said}; commit the next hypothesis on top of it (program.md section 2, step 1)"
    if d.status == "CRASH" and INTERNAL in d.causes:
        # the judge failed, not the candidate: nothing in the patch to fix
        return (f"{left}; the judge itself failed (an 'internal:' reason, log in {run}): report it, then run "
                "the same hypothesis again")
    if d.status == "CRASH":
        return (f"{left}; plainly wrong code (a typo, a shape)? `git apply {run}/candidate.patch`, fix, commit, "
                "run again; else the next hypothesis")
    if any(g.name == "class_gate" and not g.ok for g in gate.guards):
        return f"{left}; this session cannot judge that class: a hypothesis of a class it can judge, or stop"
    reach = undecided_note(gate.sess, gate.results)
    left = f"{left}; {reach}" if reach else left
    if d.status == "DISCARD" and not d.judged:  # one rule for an UNSTABLE objective lane (core.rerun)
        if d.unjudged == rerun.HOST:
            return (f"{left}; {HOST_NOT_JUDGED}: `git apply {run}/candidate.patch`, commit, the same experiment "
                    "(`dit-ar doctor` says what the host is doing)")
        if d.rerun_of is None:
            return (f"{left}; not judged: {NOT_JUDGED_WHY.format(who=d.unjudged)}; {RUN_ONCE_MORE}: `git apply "
                    f"{run}/candidate.patch`, commit, the same experiment (its ledger row links this one)")
        return f"{left}; UNSTABLE again (this re-ran run {d.rerun_of}): {LEAVE_IT}"
    # where the discarded commit's time went, against the champion it lost to (loop.perf.profile): its
    # commit stays reachable after the reset, so it is profiled from git, not from the tree
    return (f"{left}; every reason is in {run}/summary.json; where its time went: `dit-ar profile --commit {head} "
            f"--against champion`; next, a different hypothesis (not this one again)")


def _after_try(gate: Gate) -> str:
    """`dit-ar try`: the step its outcome calls for (program.md, "Try before you commit")."""
    out, claimed_class = gate.try_outcome, gate.opts.claimed_class or gate.sess.judged_class
    assert out is not None
    drop = (f"drop the edit (`git checkout -- {' '.join(gate.sess.cfg.mutable_paths)}`; this try is noted for "
            "later sessions, `dit-ar status` lists it), then a different hypothesis")
    return {
        "FASTER": f"worth a commit: commit with the trailer `Ditar-Class: {claimed_class}`, then "
                  f"`dit-ar experiment --classification {claimed_class} --description \"...\"`",
        "NOT_FASTER": f"not faster than the champion beyond the gate's bar: {drop}",
        "SLOWER": f"slower than the champion: {drop}",
        "REJECTED": f"the timing was voided (its lane line says why; a cache is no speed-up): {drop}",
        "QUALITY_FAILED": f"{(out.total or 0) - (out.passed or 0)} item(s) fail the '{out.judged_class}' contract "
                          "against the baseline: fix the edit, or try the looser class it belongs to",
        "CRASH": "the candidate did not run (errors above): fix it, then `dit-ar try` again",
        "UNSTABLE": "undecided: the host's noise, not the idea (its lane line says why); `dit-ar try` once more as it "
                    "is; UNSTABLE again: `dit-ar doctor`, and do what its `host:` line says before a third try (never "
                    "commit without FASTER)",
    }.get(out.outcome, "no objective lane was timed (deselected by -k/-m?): run `dit-ar try` with no test selection")


def _after_smoke(gate: Gate) -> str | None:
    """A report-only run (the smoke check `pytest -m quality --ditar-class CLASS`), or `dit-ar try`."""
    if gate.try_outcome is not None:
        return PREFIX + _after_try(gate)
    s, r = gate.sess, gate.results
    if r.errors and not r.quality:
        return PREFIX + "the candidate did not run (errors above): fix it before you commit"
    if not r.quality:
        return None
    passed, total, _ = aggregate(list(r.quality.values()))
    claimed_class = gate.opts.claimed_class
    if passed < total:
        return (PREFIX + f"{total - passed} item(s) fail the '{s.judged_class}' contract against the baseline: "
                "fix the edit, or smoke-check the looser class it belongs to")
    if not claimed_class:
        return PREFIX + (f"judged as '{s.judged_class}' (the branch's class); smoke-check your claim: "
                         "`pytest -m quality --ditar-class CLASS`")
    return (PREFIX + f"`dit-ar try --classification {claimed_class} --description \"...\"` times it against the "
            f"champion; FASTER: commit with the trailer `Ditar-Class: {claimed_class}`, then "
            f"`dit-ar experiment --classification {claimed_class} --description \"...\"`")

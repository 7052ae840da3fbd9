"""Two-phase gated runs: quality (sharded with pytest-xdist) then perf + ONE decision (serial).

Perf lanes must never share a machine with other GPU work, and xdist workers run at the same
time, so `dit-ar experiment --workers N` runs

  1. `pytest -m quality -n N --ditar-phase=quality`: guards once on the controller, quality items
     spread over the workers, results merged on the controller and RECORDED (no decision, no ledger
     row, no git action) under the run dir, with a pointer `<state>/phase-quality.json`;
  2. `pytest -m perf --ditar-phase=decide`: guards again (the tree may have changed), the recorded
     quality results, errors and outputs loaded into the session as if this process had produced
     them, the lanes timed serially, then the usual decision, ledger row and git action.

The pointer names the commit it is for; the decide phase refuses a record for another commit
and consumes the pointer, so a record is never decided twice.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Protocol

from pytest_ditar.core.decision import GuardResult
from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.quality import aggregate
from pytest_ditar.loop.run.results import RunResults
from pytest_ditar.loop.run.session import DitarSession
from pytest_ditar.store.atomic import write_json_atomic
from pytest_ditar.store.paths import TagPaths


class QualityRun(Protocol):
    """What the quality phase reads of a gated run (loop.judge.record.RunFacts, the gate)."""

    @property
    def sess(self) -> DitarSession: ...
    @property
    def results(self) -> RunResults: ...
    @property
    def head(self) -> str | None: ...
    @property
    def guards(self) -> list[GuardResult]: ...

QUALITY, DECIDE = "quality", "decide"


def pointer_path(sess: DitarSession) -> Path:
    return TagPaths(sess.state_dir).phase_pointer


def record_quality(gate: QualityRun) -> str:
    """End of phase 1 on the controller: write the merged session and point at it. Returns the
    summary line that says so."""
    s, r = gate.sess, gate.results
    run_dir = s.run_dir()
    d = run_dir / "quality-phase"
    payload = r.dump(d, "quality")
    payload.update(head=gate.head, cls=s.judged_class, guards=[g.__dict__ for g in gate.guards], run_dir=str(run_dir))
    write_json_atomic(d / "quality.json", payload, default=str)
    write_json_atomic(pointer_path(s), {"head": gate.head, "record": str(d / "quality.json"), "run_dir": str(run_dir)},
                      default=str)
    passed, total, _ = aggregate(list(r.quality.values()))
    return (f"ditar: quality phase recorded {passed}/{total} for {str(gate.head)[:7]} "
            f"({len(r.errors)} error(s)) in {d}; next: pytest -m perf --ditar-phase=decide")


def load_quality(gate: QualityRun) -> str | None:
    """Start of phase 2 (guards passed): load phase 1 into the session. Returns a refusal or None."""
    s, r = gate.sess, gate.results
    p = pointer_path(s)
    if not p.is_file():
        return (f"--ditar-phase=decide: no quality-phase record in {p} (run `pytest -m quality "
                "--ditar-phase=quality` first, or `dit-ar experiment --workers N`)")
    ptr = json.loads(p.read_text())
    if ptr.get("head") != gate.head:
        return (f"--ditar-phase=decide: the quality phase ran on {str(ptr.get('head'))[:7]}, HEAD is "
                f"{str(gate.head)[:7]}: run the quality phase again")
    payload = json.loads(Path(ptr["record"]).read_text())
    s.run_dir(use=Path(ptr["run_dir"]))  # both phases log into one run dir
    try:
        r.absorb(payload, s.suite.corpus)
    except DitarError as exc:  # a record of another format (store.shards.API_VERSION)
        return f"--ditar-phase=decide: {exc}"
    if payload.get("clock"):
        s.clock.absorb(payload["clock"])
    missing = [it.id for it in s.suite.corpus if it.id not in r.quality] if not r.errors else []
    if missing:
        return (f"--ditar-phase=decide: the quality phase has no result for {len(missing)} corpus item(s) "
                f"({', '.join(missing[:3])}): run the full quality phase again")
    return None


def consume(sess: DitarSession) -> None:
    """After the decision: the record is spent."""
    pointer_path(sess).unlink(missing_ok=True)


def run_two_phase(cmd: list[str], workers: int, cwd: Path, call: Callable[..., int] | None = None) -> int:
    """`dit-ar experiment --workers N`: quality sharded over N xdist workers, then perf + decision,
    each pytest run by `call(cmd, cwd=...)` (subprocess.call unless the caller reads the output)."""
    import subprocess

    call = call or subprocess.call
    quality = [*cmd, "-m", "quality", "-n", str(workers), f"--ditar-phase={QUALITY}"]  # batches stay whole: xdist.py
    rc = call(quality, cwd=cwd)
    if rc not in (0, 1):  # refused (4), interrupted (2), internal error (3): nothing to decide
        return rc
    return call([*cmd, "-m", "perf", f"--ditar-phase={DECIDE}"], cwd=cwd)

"""`pytest --ditar-guard`: an ordinary CI's regression gate, outside any research session.

The working tree is timed against the stored champion (or the baseline) with the gate's own lanes
and checked against the quality contracts, as `dit-ar try` does; the guard then fails where a
contract failed, the candidate raised, a lane never ran, or a lane is slower beyond the tolerance:
its median ratio below 1 - tolerance with the whole 95% CI below 1 (a slowdown the rounds show,
not one noise could make). It records nothing and acts on nothing, like pytest-benchmark's
`--benchmark-compare-fail`.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from pytest_ditar.core.decision import LaneOutcome


def failures(quality: Sequence[tuple[str, bool]], lanes: Iterable[LaneOutcome], expected_lanes: Iterable[str],
             errors: Sequence[str], tolerance: float) -> list[str]:
    """Why the guard fails, in order (quality, errors, lanes); [] where it passes."""
    out = []
    failed = [item for item, ok in quality if not ok]
    if failed:
        shown = ", ".join(failed[:5]) + (", ..." if len(failed) > 5 else "")
        out.append(f"quality: {len(failed)} of {len(quality)} items failed their contracts ({shown})")
    out += [f"the working tree raised: {e}" for e in errors[:1]]
    seen = {oc.name: oc for oc in lanes}
    for name in expected_lanes:
        oc = seen.get(name)
        if oc is None or oc.speedup is None:
            out.append(f"lane {name}: not measured" + (f" ({oc.reason})" if oc is not None and oc.reason else ""))
        elif oc.speedup < 1 - tolerance and oc.ci_high is not None and oc.ci_high < 1:
            out.append(f"lane {name}: {oc.speedup:.3f}x ci95=[{oc.ci_low:.3f},{oc.ci_high:.3f}] of the reference, "
                       f"slower beyond the {tolerance:.0%} tolerance")
    return out


def line(fails: Sequence[str], lanes: Iterable[LaneOutcome], tolerance: float) -> str:
    """The guard's last line: `DITAR GUARD: PASS ...` or `DITAR GUARD: FAIL: <first reason>`."""
    speeds = " ".join(f"{oc.name}={oc.speedup:.3f}x" for oc in lanes if oc.speedup is not None)
    if fails:
        more = f" (+{len(fails) - 1} more)" if len(fails) > 1 else ""
        return f"DITAR GUARD: FAIL: {fails[0]}{more}"
    return f"DITAR GUARD: PASS {speeds} tolerance={tolerance:.0%}".rstrip()

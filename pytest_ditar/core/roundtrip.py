"""The speed-up net of the harness's round trip (issue 49).

Every timed call holds the judge's own round trip (resuming the worker, the request, the reply and
its arrays, pausing it again): about 0.9 ms a call on a 2-core CPU, the same on both sides, so it
shrinks every ratio toward 1 where a call is short (a champion 8.4x the baseline outside the tool
read 7.5x chained on the tiny suite). The judge times an empty call of each worker (its reply
carries the last call's arrays again) after each of the objective lane's first rounds, and states
the speed-up with that round trip taken off each side's median call, beside the gross one.

Whose empty calls: the anchor's where it ran (the baseline's code, from the baseline commit's
objects: nothing the agent wrote answers them), the champion's where the champion is that code;
otherwise both sides pooled. An empty call is answered inside a worker's own process, so a
candidate's (or a planted champion's) could be slowed to inflate the net figure: the gross figure
decides, and the net one is what `status` cites beside it (core.cumulative). Pure.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Net:
    gross: float  # median(champion) / median(candidate)
    net: float  # the same, the round trip (empty_s) taken off each
    empty_s: float  # the median empty call taken off: the trusted side's, else both sides pooled
    champion_empty_s: float  # each side's own median, for the record
    candidate_empty_s: float
    source: str = "pooled"  # whose empty calls gave empty_s: "anchor", "champion" (the baseline's code) or "pooled"

    def describe(self) -> str:
        return (f"net of the harness's round trip (an empty call {self.empty_s * 1e3:.2f} ms, the {self.source}'s; "
                f"champion {self.champion_empty_s * 1e3:.2f}, candidate {self.candidate_empty_s * 1e3:.2f}) "
                f"{self.net:.3f}x, gross {self.gross:.3f}x (the gross figure decides)")


def net_speedup(champion: Sequence[float], candidate: Sequence[float], champion_empty: Sequence[float],
                candidate_empty: Sequence[float], trusted: tuple[str, Sequence[float]] | None = None) -> Net | None:
    """The gross and net speed-ups, or None without empty calls or where one would leave a call
    no time of its own. `trusted`: (side, its empty calls) of a side whose code the agent did not
    write; its median is the round trip taken off, else both sides' pooled."""
    if not (champion and candidate and champion_empty and candidate_empty):
        return None
    ch, ca = statistics.median(champion), statistics.median(candidate)
    source, e = "pooled", statistics.median([*champion_empty, *candidate_empty])
    if trusted is not None and trusted[1]:
        source, e = trusted[0], statistics.median(trusted[1])
    if ca <= 0 or ch - e <= 0 or ca - e <= 0:
        return None
    return Net(ch / ca, (ch - e) / (ca - e), e, statistics.median(champion_empty), statistics.median(candidate_empty),
               source)

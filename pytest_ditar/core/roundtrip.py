"""The speed-up net of the harness's round trip (issue 49).

Every timed call holds the judge's own round trip (resuming the worker, the request, the reply,
pausing it again): about 0.6 ms a call on a 2-core CPU, the same on both sides, so it shrinks every
ratio toward 1 where a call is short (a champion 12.6x the baseline outside the tool read 7.5x
chained on the tiny suite). The judge times an empty call of each worker after each of the
objective lane's first rounds and states the speed-up with the median empty call of both sides
pooled (the round trip is the harness's, the same on each side; one side's alone read 1 ms against
5 ms under a loaded host's bursts) taken off each side's median call, beside the gross one. The gross
figure decides: it is what a caller of the pipeline through this harness pays, and the empty call
is answered inside the candidate's own process, so its figure is the candidate's to inflate. Pure.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Net:
    gross: float  # median(champion) / median(candidate)
    net: float  # the same, the pooled median empty call taken off each
    empty_s: float  # the median empty call, both sides pooled
    champion_empty_s: float  # each side's own median, for the record
    candidate_empty_s: float

    def describe(self) -> str:
        return (f"net of the harness's round trip (an empty call {self.empty_s * 1e3:.2f} ms; champion "
                f"{self.champion_empty_s * 1e3:.2f}, candidate {self.candidate_empty_s * 1e3:.2f}) {self.net:.3f}x, "
                f"gross {self.gross:.3f}x (the gross figure decides)")


def net_speedup(champion: Sequence[float], candidate: Sequence[float], champion_empty: Sequence[float],
                candidate_empty: Sequence[float]) -> Net | None:
    """The gross and net speed-ups, or None without empty calls or where one would leave a call
    no time of its own."""
    if not (champion and candidate and champion_empty and candidate_empty):
        return None
    ch, ca = statistics.median(champion), statistics.median(candidate)
    e = statistics.median([*champion_empty, *candidate_empty])
    if ca <= 0 or ch - e <= 0 or ca - e <= 0:
        return None
    return Net(ch / ca, (ch - e) / (ca - e), e, statistics.median(champion_empty), statistics.median(candidate_empty))

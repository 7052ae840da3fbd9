"""The caching probe and the FLOP count: calls on the candidate alone, outside a lane's rounds.

The probe alternates new requests with one it has timed already: an honest pipeline takes as long
for a request it has seen, and a cache does not (core.probes decides which). Its calls are timed
and audited as a lane's are (runtime.calls).
"""
from __future__ import annotations

from typing import Any

from pytest_ditar.config.suite import Lane, Suite
from pytest_ditar.core.probes import caching_suspected
from pytest_ditar.core.requests import RequestStream
from pytest_ditar.interface import Request
from pytest_ditar.runtime.calls import JUDGE_ORDER, Audit, AuditFailure, fresh_request, lane_request, timed_call
from pytest_ditar.runtime.clock import judge_clock
from pytest_ditar.runtime.worker import CandidateWorker

PROBE_PAIRS = 2  # (new request, repeated request) pairs in the caching probe's screen
CONFIRM_PAIRS = 6  # more pairs, only when the screen trips: 6+6 can reach p ~ 0.001


def caching_probe(candidate: CandidateWorker, workers: list, stream: RequestStream, suite: Suite, lane: Lane,
                  repeated: Request, timeout_s: float | None, audit: Audit | None,
                  sent: list[Request] | None = None) -> dict[str, Any]:
    """Alternate new requests with the last timed round's request, asked again (MLPerf's TEST04,
    in spirit): an honest pipeline takes as long for a request it has seen; a cache does not.
    Both kinds run back to back on the candidate alone, so caches and clocks treat them alike
    (against the interleaved rounds, consecutive calls ran up to 1.3x faster on a busy CPU host).
    `sent` gets every request, in order: the references are asked the same afterwards, so no role
    can tell from its history of requests that it was never probed (issue 38). Which of a pair runs
    first is drawn, half the pairs each way: always new-then-repeated, the first call after a pause
    ran cold and the repeat warm, and under a CPU hog an honest 2x read as a 1.74x cache."""
    t0 = judge_clock()

    def pairs(n: int, label: str) -> dict[str, list[float]]:
        rep: list[float] = []
        uniq: list[float] = []
        new_first = [k % 2 == 0 for k in range(n)]
        JUDGE_ORDER.shuffle(new_first)
        for k in range(n):
            fresh = fresh_request(stream, suite, lane, f"{label}/{k}")
            if new_first[k]:
                new = timed_call(candidate, workers, fresh, timeout_s, [])
                again = timed_call(candidate, workers, repeated, timeout_s, [])
            else:
                again = timed_call(candidate, workers, repeated, timeout_s, [])
                new = timed_call(candidate, workers, fresh, timeout_s, [])
            if sent is not None:
                sent.extend((fresh, repeated) if new_first[k] else (repeated, fresh))
            uniq.append(new.seconds)
            rep.append(again.seconds)
            for out in (new, again):
                problem = audit(out, None) if audit is not None else None
                if problem:
                    raise AuditFailure(f"audit: caching probe call {k + 1}: {problem[1]}")
        return {"repeat_s": rep, "unique_s": uniq}

    screen = pairs(PROBE_PAIRS, "probe")
    out: dict[str, Any] = dict(screen)
    if caching_suspected(screen["repeat_s"], screen["unique_s"], 0.0):
        out["confirm"] = pairs(CONFIRM_PAIRS, "probe-confirm")
    out["seconds"] = judge_clock() - t0
    return out


def count_flops(candidate: CandidateWorker, suite: Suite, lane: Lane) -> float | None:
    """FLOPs of one lane call, counted in the worker with torch's FlopCounterMode (None if it cannot)."""
    try:
        return candidate.flops(lane_request(suite, lane))
    except Exception:  # noqa: BLE001 - counting is informative, never a verdict by itself
        return None

"""One call of a lane, as the judge makes it: the requests a lane sends (its fixed warm-up batch,
or one drawn fresh from the run's secret-keyed stream), the call on the judge's clock with every
other worker paused, the judge's entropy for who runs next, and the audit of what a call returned.
runtime.lanes, runtime.cacheprobe and runtime.peaks make their calls through here.
"""
from __future__ import annotations

import os
import random
import secrets
from typing import Any, Callable

from pytest_ditar.config.suite import Lane, Suite
from pytest_ditar.core.audit import audit_batch
from pytest_ditar.core.requests import RequestStream
from pytest_ditar.interface import Request
from pytest_ditar.runtime.clock import judge_clock
from pytest_ditar.runtime.worker import CandidateWorker, Outputs
from pytest_ditar.runtime.worker_process import only_running

# An audit sees the candidate's and the champion's outputs (None without a champion) of one
# request and returns (index in the batch, what is wrong) for the first bad image, or None.
Audit = Callable[[Outputs, "Outputs | None"], "tuple[int, str] | None"]
JUDGE_ORDER = random.SystemRandom()  # the judge's entropy: a candidate cannot predict whose call comes next


class AuditFailure(Exception):
    """A timed output failed its audit: the lane stops, and its verdict names the round."""


def lane_request(suite: Suite, lane: Lane) -> Request:
    """The lane's fixed batch: the first `batch` corpus items, cycling if the corpus is short.
    Warm-up and FLOP counting use it; timed rounds never do."""
    items = [suite.corpus[i % len(suite.corpus)] for i in range(lane.batch)]
    return Request(labels=tuple(it.label for it in items), seeds=tuple(it.seed for it in items),
                   steps=lane.steps or suite.pipeline.steps)


def fresh_request(stream: RequestStream, suite: Suite, lane: Lane, key: str,
                  nonces: list[str] | None = None) -> Request:
    """A request drawn now, with entropy taken now (kept in `nonces`, hex, for the record)."""
    nonce = os.urandom(16)
    if nonces is not None:
        nonces.append(nonce.hex())
    seeds, labels = stream.draw(f"{lane.name}/{key}", lane.batch, nonce)
    return Request(labels=labels, seeds=seeds, steps=lane.steps or suite.pipeline.steps)


def new_stream(suite: Suite, secret: bytes | None = None) -> RequestStream:
    return RequestStream(secret or secrets.token_bytes(32), (it.seed for it in suite.corpus))


def timed_call(worker: CandidateWorker, others: list, req: Request, timeout_s: float | None,
               overhead: list[float]) -> Outputs:
    """One call on the judge's clock with every other worker paused, the worker itself paused
    again once it replied; the gap between the judge's time and the worker's own account is the
    round trip's overhead, kept for the record."""
    with only_running(worker, others):
        out = worker.generate(req, timeout_s)
    # Paused again at once: between its own calls a candidate gets no untimed time to work ahead in.
    worker.pause()
    overhead.append(out.seconds - out.worker_s)
    return out


def empty_call(worker: CandidateWorker, others: list) -> float:
    """Seconds of one call that does no work, on the judge's clock with every other worker paused:
    the harness's round trip (pause, resume, the request, the reply) that sits in every timed
    call (a group's: to its last rank's reply)."""
    with only_running(worker, others):
        t0 = judge_clock()
        worker.empty()
        seconds = judge_clock() - t0
    worker.pause()
    return seconds


def output_audit(claimed_class: str, thresholds: Any) -> Audit:
    """The audit of a candidate claiming `claimed_class` (core.audit: cheap checks, class-claim thresholds)."""
    def check(cand: Outputs, ref: Outputs | None) -> tuple[int, str] | None:
        return audit_batch(claimed_class, thresholds, cand.latents, cand.images,
                           None if ref is None else ref.latents, None if ref is None else ref.images)
    return check

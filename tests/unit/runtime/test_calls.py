"""runtime.calls: the requests a lane sends. Warm-up uses the lane's fixed batch (the corpus's first
items, cycling); a timed round's request is drawn from the secret-keyed stream with fresh entropy,
so two draws under one key differ, and the nonce is kept for the record."""
from __future__ import annotations

from types import SimpleNamespace

from pytest_ditar.runtime.calls import fresh_request, lane_request, new_stream

ITEMS = [SimpleNamespace(label=7, seed=101), SimpleNamespace(label=9, seed=202)]
SUITE = SimpleNamespace(corpus=ITEMS, pipeline=SimpleNamespace(steps=4))


def test_the_fixed_batch_cycles_the_corpus_and_takes_the_lanes_steps():
    req = lane_request(SUITE, SimpleNamespace(name="b3", batch=3, steps=None))
    assert (req.labels, req.seeds, req.steps) == ((7, 9, 7), (101, 202, 101), 4)
    assert lane_request(SUITE, SimpleNamespace(name="b1", batch=1, steps=2)).steps == 2


def test_a_fresh_request_is_new_each_draw_and_its_nonce_is_kept():
    stream = new_stream(SUITE, b"k" * 32)
    lane = SimpleNamespace(name="latency_b1", batch=2, steps=None)
    nonces: list[str] = []
    a = fresh_request(stream, SUITE, lane, "round/0", nonces)
    b = fresh_request(stream, SUITE, lane, "round/0", nonces)
    assert len(nonces) == 2 and nonces[0] != nonces[1] and all(len(n) == 32 for n in nonces)
    assert len(a.seeds) == 2 and a.steps == 4 and a.seeds != b.seeds
    assert not set(a.seeds) & {101, 202}  # never a corpus seed the warm-up batch used

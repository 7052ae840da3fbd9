"""The caching probe (runtime.cacheprobe.caching_probe) against a host where the first call after a
pause runs cold: with the new request always first, an honest pipeline's repeat read as a cache
(an honest 2x REJECTED "caching: ... 1.74x faster" beside a CPU hog). The pair order is drawn,
half each way, so position falls on both kinds alike; a real cache is still found."""
from __future__ import annotations

from types import SimpleNamespace

from pytest_ditar.core import probes
from pytest_ditar.runtime import cacheprobe

REPEATED = object()


def _probe(monkeypatch, seconds) -> dict:
    calls: list[object] = []

    def timed(_worker, _workers, req, _timeout, _overhead):
        calls.append(req)
        return SimpleNamespace(seconds=seconds(req, len(calls) - 1))

    monkeypatch.setattr(cacheprobe, "timed_call", timed)
    monkeypatch.setattr(cacheprobe, "fresh_request", lambda *_a: object())
    monkeypatch.setattr(cacheprobe, "caching_suspected", lambda *_a: True)  # always confirm: the verdict's samples
    sent: list[object] = []
    out = cacheprobe.caching_probe(None, [], None, None, None, REPEATED, None, None, sent)
    assert sent == calls  # the references are asked what the candidate was, in its order
    return out


def test_a_cold_first_call_of_each_pair_is_not_read_as_a_cache(monkeypatch):
    for _ in range(20):  # every draw of orders: balanced by construction, never by luck
        out = _probe(monkeypatch, lambda _req, i: 0.100 if i % 2 == 0 else 0.060)
        conf = out["confirm"]
        assert sorted(conf["repeat_s"]) == sorted(conf["unique_s"]), conf  # half of each kind ran first
        assert probes.caching(conf["repeat_s"], conf["unique_s"], 0.0) is None


def test_a_real_cache_is_still_found_whichever_call_runs_first(monkeypatch):
    out = _probe(monkeypatch, lambda req, i: (0.010 if req is REPEATED else 0.100) * (1.2 if i % 2 == 0 else 1.0))
    reason = probes.caching(out["confirm"]["repeat_s"], out["confirm"]["unique_s"], 0.0)
    assert reason is not None and reason.startswith("caching: a repeated request ran")

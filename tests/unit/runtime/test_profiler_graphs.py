"""runtime.profiler's graph mark (issue 52): `torch.cuda.CUDAGraph.replay` is wrapped on the class
in a `ditar::graph` range while the marks are on, and put back exactly after."""
from __future__ import annotations

import torch
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

from pytest_ditar.runtime import kineto
from pytest_ditar.runtime.profiler import PREFIX, _Marker, install


class FakeGraph:
    def __init__(self) -> None:
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1
        torch.ones(2).add_(1)


class SubGraph(FakeGraph):  # inherits replay: the wrapper goes on it, and comes off without a trace
    pass


def test_a_replay_runs_inside_a_graph_range_while_marked_and_the_class_is_restored(tmp_path):
    own, inherited = FakeGraph.__dict__["replay"], "replay" in SubGraph.__dict__
    marker = _Marker(record_function, torch.nn.Module)
    marker.graphs(FakeGraph)
    marker.graphs(SubGraph)
    g = SubGraph()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function(PREFIX + "call"):
            g.replay()
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    assert g.replays == 1 and marker.marks.counts == {"graph": 2}
    assert [s[0] for s in kineto.read(tmp_path / "t.json")["spans"]].count("graph") >= 1
    marker.marks.remove()
    assert FakeGraph.__dict__["replay"] is own and ("replay" in SubGraph.__dict__) == inherited


def test_install_wraps_torchs_cuda_graph_replay_and_remove_puts_it_back():
    before = torch.cuda.CUDAGraph.__dict__.get("replay")
    marks = install(object())
    try:
        assert torch.cuda.CUDAGraph.__dict__.get("replay") is not before and marks.counts.get("graph") == 1
    finally:
        marks.remove()
    assert torch.cuda.CUDAGraph.__dict__.get("replay") is before

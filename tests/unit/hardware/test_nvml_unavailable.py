"""Without NVML a CUDA lane's exclusivity cannot be checked, and such a lane is UNSTABLE with that
reason (never a silent pass); `dit-ar doctor` says so in its "gpu exclusivity" row. There is no
GPU here: the decision is tested with NVML made unavailable, and the row through the CLI in
tests/integration/cli/test_doctor_nvml.py."""
import os
import sys
from types import SimpleNamespace

import pytest

from pytest_ditar.config.project import PerfConfig
from pytest_ditar.core.decision import QualityOutcome, decide
from pytest_ditar.hardware import exclusivity
from pytest_ditar.loop.perf.lanes import judge
from pytest_ditar.runtime.lanes import LaneMeasurement


def _judged(device=None):
    """A lane 2x faster than its champion (stored samples), judged with `device` its exclusivity watch's report."""
    champion = [0.1 * (1 + 0.001 * i) for i in range(12)]
    m = LaneMeasurement("latency_b1", [x / 2 for x in champion], [])
    return judge(m, champion, objective=True, source="stored", noise=None, perf_cfg=PerfConfig(), device=device)


def test_a_cuda_lane_without_pynvml_is_unstable_and_the_gate_discards_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    report = exclusivity.check("cuda:0")
    assert not report.checked and not report.ok
    assert report.message().startswith("GPU exclusivity cannot be checked: NVML unavailable (pynvml not importable: ")
    assert report.message().endswith("; pip install nvidia-ml-py)")
    lane = _judged(report)
    assert lane.outcome.verdict == "UNSTABLE" and lane.outcome.reason == report.message()
    d = decide(guards=[], quality=QualityOutcome(6, 6, ()), lanes=[lane.outcome], errors=[], vram_budget_gib=None,
               expected_items=6)
    assert d.status == "DISCARD" and d.reason == f"lane latency_b1 unstable: {report.message()}"


def test_nvml_that_fails_to_start_or_to_answer_is_unstable_too(monkeypatch):
    def init():
        raise RuntimeError("Driver Not Loaded")

    monkeypatch.setitem(sys.modules, "pynvml", SimpleNamespace(nvmlInit=init))
    with exclusivity.Watch("cuda:1") as watch:
        pass
    assert watch.report.message() == ("GPU exclusivity cannot be checked: NVML unavailable (nvmlInit failed: "
                                      "RuntimeError: Driver Not Loaded)")
    assert _judged(watch.report).outcome.verdict == "UNSTABLE"

    def lister(gpu):
        raise OSError("query failed")

    report = exclusivity.check("cuda:0", lister, allowed={os.getpid()})
    assert not report.ok and report.message() == "GPU exclusivity cannot be checked: NVML query failed: query failed"
    # a CPU lane has no GPU to share: not checked, and fine
    assert exclusivity.check("cpu").ok \
        and _judged(exclusivity.check("cpu")).outcome.verdict == "FASTER"


@pytest.mark.parametrize("cuda,status", [(2, "FAIL"), (0, "warn")])
def test_doctor_row_fails_only_where_a_cuda_lane_would_be_unstable(cuda, status):
    row = exclusivity.doctor_row("pass", "warn", "FAIL", cuda_devices=cuda,
                                 probe=lambda: (None, "NVML unavailable (x)"))
    assert row[:2] == ("gpu exclusivity", status) and row[2].startswith("GPU exclusivity cannot be checked" if cuda
                                                                        else "NVML unavailable (x); no CUDA device")
    ok = exclusivity.doctor_row("pass", "warn", "FAIL", cuda_devices=cuda, probe=lambda: (lambda gpu: [], ""))
    assert ok[1] == "pass"


def test_counting_gpus_leaves_nvml_shut_down_for_the_forks_after_it(monkeypatch):
    # The zygote forks every worker; an NVML it left initialized was inherited into the sandbox,
    # where it counted no GPU and torch refused device 0 (seen on an H200 host).
    from pytest_ditar.hardware import fingerprint

    calls: list[str] = []
    fake = SimpleNamespace(nvmlInit=lambda: calls.append("init"), nvmlShutdown=lambda: calls.append("shutdown"),
                           nvmlDeviceGetCount=lambda: calls.append("count") or 2)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert fingerprint.nvml_device_count() == 2
    assert calls == ["init", "count", "shutdown"]

    def broken():
        raise RuntimeError("driver went away")

    calls.clear()
    monkeypatch.setitem(sys.modules, "pynvml", SimpleNamespace(nvmlInit=lambda: calls.append("init"),
                                                               nvmlShutdown=lambda: calls.append("shutdown"),
                                                               nvmlDeviceGetCount=broken))
    assert fingerprint.nvml_device_count() is None and calls == ["init", "shutdown"]


def test_the_zygote_asks_the_device_nodes_not_nvml(monkeypatch):
    from pytest_ditar.hardware import fingerprint

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert fingerprint.cuda_nodes_present() is False  # nothing visible, whatever the host has
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setattr(fingerprint.glob, "glob",
                        lambda pattern: ["/dev/nvidia0"] if pattern == "/dev/nvidia[0-9]*" else [])
    assert fingerprint.cuda_nodes_present() is True
    monkeypatch.setitem(sys.modules, "pynvml", None)  # and never imports NVML to answer
    monkeypatch.setattr(fingerprint.glob, "glob", lambda pattern: [])
    assert fingerprint.cuda_nodes_present() is False

"""Perf-lane exclusivity: a second process on the lane's GPU makes the lane UNSTABLE, by PID."""
import os
import time
from types import SimpleNamespace

import pytest

from pytest_ditar.config.project import PerfConfig
from pytest_ditar.core.vocabulary import SHARED_DEVICE
from pytest_ditar.hardware import exclusivity
from pytest_ditar.loop.perf.lanes import judge
from pytest_ditar.runtime import proctree
from pytest_ditar.runtime.lanes import LaneMeasurement


def _judged(device=None):
    """A lane 2x faster than its champion (stored samples), judged with `device` its exclusivity watch's report."""
    champion = [0.1 * (1 + 0.001 * i) for i in range(12)]
    m = LaneMeasurement("latency_b1", [x / 2 for x in champion], [])
    return judge(m, champion, objective=True, source="stored", noise=None, perf_cfg=PerfConfig(), device=device)

def names(pid):
    return {1234: "python"}.get(pid, "?")


def test_cpu_is_not_checked_and_passes_but_a_gpu_without_nvml_is_not_exclusive():
    r = exclusivity.check("cpu")
    assert not r.checked and r.ok and r.message() == "exclusivity not checked (no NVML on CPU)"
    r = exclusivity.Watch("cuda:0", lister=None)
    r.lister = None  # no GPU here: NVML does not answer (tests/unit/hardware/test_nvml_unavailable.py covers why)
    with r:
        pass
    assert not r.report.ok and r.report.message().startswith("GPU exclusivity cannot be checked: NVML unavailable (")


def test_foreign_process_is_named_with_memory():
    lister = lambda gpu: [(os.getpid(), 1 << 30), (1234, int(2.1 * 2**30))]  # noqa: E731
    r = exclusivity.check("cuda:0", lister, allowed={os.getpid()}, namer=names)
    assert r.checked and not r.ok
    assert r.message() == "GPU 0 shared with pid 1234 (python, 2.1 GiB): timings would be poisoned"
    assert exclusivity.check("cuda:1", lambda g: [(os.getpid(), None)], allowed={os.getpid()}).ok


def test_watch_catches_a_process_that_arrives_during_the_lane():
    state = {"procs": [(os.getpid(), None)]}
    w = exclusivity.Watch("cuda:0", lister=lambda g: list(state["procs"]), interval_s=0.01,
                          allowed=lambda: {os.getpid()}, namer=names)
    with w:
        assert w.report.ok  # clean before the lane
        state["procs"].append((1234, 2**30))
        time.sleep(0.1)
        state["procs"].pop()  # gone again before the lane ends: still caught
    assert not w.report.ok and "pid 1234 (python, 1.0 GiB)" in w.report.message()


def test_shared_gpu_turns_a_faster_lane_unstable():
    assert _judged().outcome.verdict == "FASTER"
    bad = exclusivity.ExclusivityReport(0, True, [exclusivity.Offender(1234, "python", None)])
    out = _judged(bad)
    assert out.outcome.verdict == "UNSTABLE" and "pid 1234 (python)" in out.outcome.reason
    assert out.outcome.cause == SHARED_DEVICE  # what core.decision reads, never the words
    good = _judged(exclusivity.ExclusivityReport(None, False, note="no NVML"))
    assert good.outcome.verdict == "FASTER" and good.outcome.cause is None
    assert good.comparison["exclusivity"] == "exclusivity not checked (no NVML)"


def test_a_group_lane_is_unstable_when_any_of_its_gpus_is_shared():
    """A two-GPU lane watches both GPUs: an intruder on the second one names that GPU."""
    procs = {0: [(os.getpid(), None)], 1: [(os.getpid(), None), (1234, 2**30)]}
    reports = [exclusivity.check(f"cuda:{g}", lambda i: procs[i], allowed={os.getpid()}, namer=names) for g in (0, 1)]
    combined = exclusivity.combine(reports)
    assert not combined.ok and combined.message().startswith("GPU 1 shared with pid 1234 (python")
    assert _judged(combined).outcome.verdict == "UNSTABLE"
    procs[1].pop()
    clean = [exclusivity.check(f"cuda:{g}", lambda i: procs[i], allowed={os.getpid()}) for g in (0, 1)]
    assert exclusivity.combine(clean).ok


def test_the_workers_of_a_kept_zygote_are_ours_though_not_the_judges_descendants():
    """Seen on an H200: a gated run that forked its workers from the zygote an earlier run kept
    called its own three workers intruders on the GPU (UNSTABLE), since they are that zygote's
    children, not the judge's. Whoever the zygote forked for this judge is this judge's."""
    import subprocess
    import sys

    # a process tree outside this process's: a "zygote" the launcher left behind (double fork) with one child
    launcher = ("import os, subprocess, sys, time\n"
                "if os.fork():\n    os._exit(0)\n"
                "os.setsid()\n"
                "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                "print(os.getpid(), c.pid, flush=True)\n"
                "time.sleep(60)\n")
    tree = subprocess.Popen([sys.executable, "-c", launcher], stdout=subprocess.PIPE, text=True)
    zygote, child = (int(p) for p in tree.stdout.readline().split())
    tree.wait()
    try:
        if int(open(f"/proc/{zygote}/stat").read().rsplit(")", 1)[1].split()[1]) == os.getpid():
            pytest.skip("this test process is a child subreaper: the orphan came back to it")
        lister = lambda _i: [(child, 2 << 30)]  # noqa: E731 - NVML's answer: the child holds the GPU
        foreign = exclusivity.check("cuda:0", lister=lister, allowed=exclusivity.own_pids())
        assert not foreign.ok and child in {o.pid for o in foreign.offenders}
        # what a lane's watch is given (loop.perf.lanes): the judge's tree and the zygote's
        ours = exclusivity.check("cuda:0", lister=lister, allowed=proctree.descendants([os.getpid(), zygote]))
        assert ours.ok, ours.message()
    finally:
        os.killpg(zygote, 9)


def test_the_watch_finds_its_gpu_without_torch_and_through_cuda_visible_devices(monkeypatch):
    """The judge's watch of `cuda` never imports torch (it once did, to ask torch for the current
    device: about 3 s of a run's two lanes on an H200, and CUDA initialized in the judge), and it asks NVML about the
    GPU the workers use: CUDA's numbering, after CUDA_VISIBLE_DEVICES, is not NVML's."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", (
        "import sys\n"
        "from pytest_ditar.hardware.exclusivity import gpu_index\n"
        "print(gpu_index('cuda'), gpu_index('cuda:3'), gpu_index('cpu'), 'torch' in sys.modules)")],
        capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "3", "None", "False"], out

    asked: list = []
    fake = SimpleNamespace(
        nvmlInit=lambda: None, NVMLError=Exception,
        nvmlDeviceGetHandleByIndex=lambda i: asked.append(("index", i)) or f"h{i}",
        nvmlDeviceGetHandleByUUID=lambda u: asked.append(("uuid", u)) or u,
        nvmlDeviceGetComputeRunningProcesses=lambda h: [SimpleNamespace(pid=4242, usedGpuMemory=1)],
        nvmlDeviceGetGraphicsRunningProcesses=lambda h: [])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    lister, why = exclusivity.nvml()
    assert lister is not None and why == ""
    for visible, index, want in ((None, 1, ("index", 1)), ("3,1", 0, ("index", 3)),
                                 ("GPU-aaaa,GPU-bbbb", 1, ("uuid", "GPU-bbbb"))):
        if visible is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        asked.clear()
        assert lister(index) == [(4242, 1)] and asked == [want], (visible, asked)

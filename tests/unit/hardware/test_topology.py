"""`dit-ar doctor` topology rows, from injected NVML data (no GPU here)."""
from types import SimpleNamespace

from pytest_ditar.hardware.topology import Link, Topology, collect, doctor_rows


class FakeNvml:
    """Two GPUs joined by 4 NVLinks, a third only through the host bridge."""
    NVML_P2P_CAPS_INDEX_READ = 0
    NVML_P2P_STATUS_OK = 0
    NVML_NVLINK_MAX_LINKS = 6
    buses = ["0000:01:00.0", "0000:02:00.0", "0000:81:00.0"]

    def nvmlDeviceGetCount(self):
        return 3

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA RTX A5500"

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self.buses[h].encode())

    def nvmlDeviceGetNvLinkState(self, h, link):
        return h in (0, 1) and link < 4

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        return SimpleNamespace(busId=self.buses[1 - h])

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return 30 if 2 in (a, b) else 10

    def nvmlDeviceGetP2PStatus(self, a, b, cap):
        return 1 if 2 in (a, b) else 0


def test_links_from_nvml():
    topo = collect(FakeNvml())
    assert len(topo.gpus) == 3
    by_pair = {(link.a, link.b): link for link in topo.links}
    assert by_pair[(0, 1)].describe() == "NVLink x4" and not by_pair[(0, 1)].slow
    assert by_pair[(0, 2)].describe() == "PCIe via PCIe host bridge, no P2P" and by_pair[(0, 2)].slow


def test_rows_warn_for_a_two_gpu_lane_over_a_slow_link():
    topo = Topology(["NVIDIA RTX A5500", "NVIDIA RTX A5500"], [Link(0, 1, 0, 50, False)])
    rows = doctor_rows(topo, {"latency_b1": 1, "cfg_split_b1": 2})
    assert rows[0] == ("gpus", "pass", "2: 0 NVIDIA RTX A5500, 1 NVIDIA RTX A5500")
    assert rows[1] == ("link 0-1", "warn", "PCIe via system (cross-socket), no P2P")
    assert rows[-1][0] == "2-gpu lanes" and rows[-1][1] == "warn" and "cfg_split_b1 would exchange" in rows[-1][2]
    fast = doctor_rows(Topology(["a", "b"], [Link(0, 1, 2, 0, True)]), {"cfg_split_b1": 2})
    assert [r[1] for r in fast] == ["pass", "pass"] and fast[1][2] == "NVLink x2"
    # no 2-GPU lane: a slow link is reported, not warned about
    assert doctor_rows(topo, {"latency_b1": 1})[1][1] == "pass"


def test_rows_on_cpu():
    rows = doctor_rows(Topology(note="n/a on CPU (no NVML)"), {"latency_b1": 1})
    assert rows == [("gpus", "pass", "0 (n/a on CPU (no NVML))"), ("links", "pass", "n/a on CPU")]
    assert doctor_rows(Topology(note="x"), {"split": 2})[-1][1] == "warn"

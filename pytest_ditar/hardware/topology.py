"""GPU topology for `dit-ar doctor`: how many GPUs, and what links each pair.

A 2-GPU lane exchanges noise predictions every step; over NVLink that is microseconds, over
PCIe through the host bridge or across sockets it can cost more than the split saves (the
seed's "topology-aware 2x A5500": A5500 pairs are bridged with NVLink or not at all). NVML
answers without touching CUDA contexts; its data is injectable so the formatting is tested
without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# NVML common-ancestor levels (nvmlGpuTopologyLevel_t) -> words, nearest first
LEVELS = {0: "same board", 10: "PCIe switch", 20: "PCIe switches", 30: "PCIe host bridge",
          40: "NUMA node (host)", 50: "system (cross-socket)"}
SLOW_LEVEL = 30  # through the host bridge or worse: no fast peer-to-peer path


@dataclass(frozen=True)
class Link:
    a: int
    b: int
    nvlinks: int  # active NVLink links between a and b
    level: int | None  # NVML topology level, None if unknown
    p2p: bool | None  # NVML P2P read capability

    @property
    def slow(self) -> bool:
        if self.nvlinks:
            return False
        if self.p2p is False:
            return True
        return self.level is None or self.level >= SLOW_LEVEL

    def describe(self) -> str:
        if self.nvlinks:
            return f"NVLink x{self.nvlinks}"
        where = LEVELS.get(self.level, "unknown path") if self.level is not None else "unknown path"
        p2p = {True: "P2P ok", False: "no P2P", None: "P2P unknown"}[self.p2p]
        return f"PCIe via {where}, {p2p}"


@dataclass
class Topology:
    gpus: list[str] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    note: str = ""  # why it is empty


def collect(nvml: Any = None) -> Topology:
    """Read the topology with pynvml (or an injected module with the same calls)."""
    if nvml is None:
        try:
            import pynvml

            nvml = pynvml
            nvml.nvmlInit()
        except Exception:  # noqa: BLE001
            return Topology(note="n/a on CPU (no NVML)")
    try:
        n = nvml.nvmlDeviceGetCount()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        names = [_s(nvml.nvmlDeviceGetName(h)) for h in handles]
        buses = [_s(nvml.nvmlDeviceGetPciInfo(h).busId).lower() for h in handles]
    except Exception as exc:  # noqa: BLE001
        return Topology(note=f"NVML query failed: {exc}")
    links = []
    for a in range(n):
        for b in range(a + 1, n):
            links.append(Link(a, b, _nvlinks(nvml, handles[a], buses[b]), _level(nvml, handles[a], handles[b]),
                              _p2p(nvml, handles[a], handles[b])))
    return Topology(names, links)


def _s(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _nvlinks(nvml: Any, h: Any, peer_bus: str) -> int:
    count = 0
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            if not nvml.nvmlDeviceGetNvLinkState(h, link):
                continue
            if _s(nvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId).lower() == peer_bus:
                count += 1
        except Exception:  # noqa: BLE001 - link not present / not supported
            continue
    return count


def _level(nvml: Any, a: Any, b: Any) -> int | None:
    try:
        return int(nvml.nvmlDeviceGetTopologyCommonAncestor(a, b))
    except Exception:  # noqa: BLE001
        return None


def _p2p(nvml: Any, a: Any, b: Any) -> bool | None:
    try:
        status = nvml.nvmlDeviceGetP2PStatus(a, b, nvml.NVML_P2P_CAPS_INDEX_READ)
        return status == getattr(nvml, "NVML_P2P_STATUS_OK", 0)
    except Exception:  # noqa: BLE001
        return None


def doctor_rows(topo: Topology, lanes_gpus: dict[str, int] | None = None) -> list[tuple[str, str, str]]:
    """(check, pass|warn, detail) rows: GPU count, each pair's link, slow-link warnings for 2-GPU lanes."""
    multi = {k: v for k, v in (lanes_gpus or {}).items() if v > 1}
    if not topo.gpus:
        detail = topo.note or "no GPU"
        rows = [("gpus", "pass" if not multi else "warn", f"0 ({detail})")]
        rows.append(("links", "pass", "n/a on CPU"))
        if multi:
            rows.append(("2-gpu lanes", "warn", f"{', '.join(sorted(multi))} need {max(multi.values())} GPUs; "
                                                "on CPU they run as gloo processes"))
        return rows
    rows = [("gpus", "pass", f"{len(topo.gpus)}: " + ", ".join(f"{i} {n}" for i, n in enumerate(topo.gpus)))]
    if not topo.links:
        rows.append(("links", "pass", "single GPU: no peer links"))
    for ln in topo.links:
        rows.append((f"link {ln.a}-{ln.b}", "warn" if ln.slow and multi else "pass", ln.describe()))
    if multi:
        if len(topo.gpus) < max(multi.values()):
            rows.append(("2-gpu lanes", "warn", f"{', '.join(sorted(multi))} need {max(multi.values())} GPUs, "
                                                f"this machine has {len(topo.gpus)}"))
        slow = [ln for ln in topo.links if ln.slow]
        if slow:
            rows.append(("2-gpu lanes", "warn",
                         f"{', '.join(sorted(multi))} would exchange every step over a slow "
                         f"link ({'; '.join(f'{link.a}-{link.b}: {link.describe()}' for link in slow)})"))
    return rows

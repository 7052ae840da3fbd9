"""A stored lane, typed: one record for a snapshot's lanes.json, the baseline's and a champion's alike.

One shape is written: a lane result's (`measurement`: runtime.lanes.LaneMeasurement's fields; a
champion's `outcome`, the core.decision.LaneOutcome it was kept on, with `champion_source`,
`min_effect`, `comparison`, `flops`, `achieved_tflops`), and what the baseline adds beside it: `noise`
(its A/A floor, core.effect), `host_flops` (the host's measured rate) and a lane kind's `figure`.
Baselines stored before this kept the measurement's fields at the top of each lane; `from_dict`
reads that shape too, so a tag started earlier goes on being judged.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# A lane result's own keys beside its measurement (runtime.lanes.LaneResult.to_dict)
_RESULT_KEYS = ("outcome", "champion_source", "min_effect", "comparison", "flops", "achieved_tflops")
_BASELINE_KEYS = ("noise", "host_flops", "figure")


@dataclass(frozen=True)
class LaneRecord:
    name: str
    measurement: dict[str, Any]
    outcome: dict[str, Any] | None = None  # a champion's: what it was kept on
    noise: dict[str, Any] | None = None  # the baseline's A/A floor
    flops: float | None = None  # per call, counted at the baseline (an exact change does the same work)
    host_flops: float | None = None  # the host's measured FLOP/s (a CPU baseline)
    figure: str | None = None  # a lane of another kind (loop.lanekinds): what it measured, in words
    result: dict[str, Any] = field(default_factory=dict)  # the rest of a lane result (champion_source, ...)

    @property
    def samples(self) -> list[float]:
        """The stored side's timed seconds per call (the candidate's when it was measured)."""
        return [float(x) for x in self.measurement.get("samples") or []]

    @property
    def anchor_samples(self) -> list[float]:
        """The anchor's seconds in the same rounds (core.anchor; empty in records from before it)."""
        return [float(x) for x in self.measurement.get("anchor_samples") or []]

    @property
    def host_s(self) -> list[float]:
        return [float(x) for x in self.measurement.get("host_s") or []]

    @property
    def peaks(self) -> dict[str, list[float | None]]:
        return dict(self.measurement.get("peaks") or {})

    @classmethod
    def from_dict(cls, name: str, data: Mapping[str, Any]) -> LaneRecord:
        """Either shape: a lane result's (`measurement` inside) or an older baseline's (its fields on top)."""
        if "measurement" in data:
            measurement = dict(data.get("measurement") or {})
        else:
            measurement = {k: v for k, v in data.items() if k not in (*_BASELINE_KEYS, "flops")}
        return cls(name, measurement, outcome=data.get("outcome"), noise=data.get("noise"),
                   flops=_number(data.get("flops")), host_flops=_number(data.get("host_flops")),
                   figure=data.get("figure"),
                   result={k: data[k] for k in _RESULT_KEYS if k in data and k not in ("outcome", "flops")})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"measurement": self.measurement, **self.result}
        extras = {"outcome": self.outcome, "noise": self.noise, "flops": self.flops, "host_flops": self.host_flops,
                  "figure": self.figure}
        return {**out, **{k: v for k, v in extras.items() if v is not None}}


def read_lanes(data: Mapping[str, Any] | None) -> dict[str, LaneRecord]:
    """A lanes.json document's records by lane name ({} for none)."""
    return {name: LaneRecord.from_dict(name, lane) for name, lane in (data or {}).items() if isinstance(lane, Mapping)}


def write_lanes(records: Mapping[str, LaneRecord]) -> dict[str, Any]:
    """The lanes.json document of `records`."""
    return {name: rec.to_dict() for name, rec in records.items()}


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None

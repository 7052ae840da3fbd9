"""Stored records, typed: a lane (`LaneRecord`), a ledger row (`LedgerRow`) and a run's summary.json
(`RunSummary`). Every reader of these files reads them through here; each has one read path that checks
`schema_version` (a record written by a newer release is refused, not misread).

LaneRecord is one record for a snapshot's lanes.json, the baseline's and a champion's alike, and for a
summary's lanes.

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

from pytest_ditar.core.vocabulary import SCHEMA_VERSION

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
    figure: str | None = None  # a lane of another kind (loop.perf.lanekinds): what it measured, in words
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


class RecordVersionError(ValueError):
    """A record written by a newer release (its `schema_version` above this one's)."""


def _version(data: Mapping[str, object], what: str) -> int:
    """The record's schema_version (0: written before the field); a newer one is refused."""
    v = data.get("schema_version", 0)
    if not isinstance(v, int) or isinstance(v, bool) or v > SCHEMA_VERSION:
        raise RecordVersionError(f"{what}: schema_version {v!r} is not one this release reads "
                                 f"(<= {SCHEMA_VERSION}): upgrade pytest-ditar")
    return v


Cell = str | int | float  # a ledger cell as stored: a JSON scalar, "" for none ("nan"/"inf" spelled out)


def _text(v: object) -> str:
    return v if isinstance(v, str) else "" if v is None else str(v)


def _cell(v: object) -> Cell:
    return v if isinstance(v, (str, int, float)) else "" if v is None else str(v)


def _run(v: object) -> int:
    try:
        return int(v) if isinstance(v, (int, float, str)) else 0
    except ValueError:
        return 0


@dataclass(frozen=True)
class LedgerRow:
    """One ledger.jsonl row (store.ledger.COLUMNS and the chain's keys), its cells as stored.

    Number cells keep the stored value ("" where none, a float or int otherwise), so what a reader
    prints or passes on is what the ledger holds. Rows from before a later column lack it: its
    default ("", and `judged` 1: a run from before the field judged its change)."""

    run: int
    time: str = ""
    commit: str = ""
    parent: str = ""
    cls: str = ""  # the "class" column: the class the commit claimed
    description: str = ""
    lane: str = ""
    metric: Cell = ""  # the objective lane's speedup
    ci_low: Cell = ""
    ci_high: Cell = ""
    quality_pass: Cell = ""
    quality_total: Cell = ""
    peak_vram_gib: Cell = ""
    status: str = ""
    reason: str = ""
    cumulative_class: str = ""
    device: str = ""
    off_target: Cell = ""
    sandbox: str = ""
    patch: str = ""
    judged: Cell = 1
    rerun_of: Cell = ""
    unjudged: str = ""
    net: Cell = ""  # the speedup net of the harness's round trip (core.roundtrip), where the run measured it
    schema_version: int = 0
    prev_hash: str = ""
    hash: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> LedgerRow:
        """The one read path of a ledger row (RecordVersionError for a newer release's)."""
        version = _version(data, f"ledger row {data.get('run')!r}")

        def text(key: str) -> str:
            return _text(data.get(key))

        def cell(key: str) -> Cell:
            return _cell(data.get(key))

        return cls(run=_run(data.get("run")), time=text("time"), commit=text("commit"), parent=text("parent"),
                   cls=text("class"), description=text("description"), lane=text("lane"), metric=cell("metric"),
                   ci_low=cell("ci_low"), ci_high=cell("ci_high"), quality_pass=cell("quality_pass"),
                   quality_total=cell("quality_total"), peak_vram_gib=cell("peak_vram_gib"), status=text("status"),
                   reason=text("reason"), cumulative_class=text("cumulative_class"), device=text("device"),
                   off_target=cell("off_target"), sandbox=text("sandbox"), patch=text("patch"),
                   judged=_cell(data.get("judged", 1)), rerun_of=cell("rerun_of"), unjudged=text("unjudged"),
                   net=cell("net"), schema_version=version, prev_hash=text("prev_hash"), hash=text("hash"))


@dataclass(frozen=True)
class RunSummary:
    """A decided run's summary.json (loop.judge.record._summary; schemas/summary.schema.json), read once.

    `quality`: item -> its result (passed, failures, metrics); `lanes`: the lanes it timed, as LaneRecords
    (a measurement and the outcome judged on it); `fingerprint`: the hardware it ran on, None where no
    worker could say."""

    commit: str | None
    decision: str
    cls: str = ""  # the "class" key: the class the commit claimed
    reason: str = ""
    quality: dict[str, dict[str, object]] = field(default_factory=dict)
    lanes: dict[str, LaneRecord] = field(default_factory=dict)
    fingerprint: dict[str, object] | None = None
    champion: str | None = None  # what the lanes were timed against (the champion's commit)
    schema_version: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> RunSummary:
        """The one read path of a summary.json (RecordVersionError for a newer release's)."""
        version = _version(data, "summary.json")
        quality = data.get("quality")
        lanes = data.get("lanes")
        fingerprint = data.get("fingerprint")
        commit, champion = data.get("commit"), data.get("champion")
        return cls(commit=None if commit is None else str(commit), decision=_text(data.get("decision")),
                   cls=_text(data.get("class")), reason=_text(data.get("reason")),
                   quality={str(k): dict(v) for k, v in quality.items() if isinstance(v, Mapping)}
                   if isinstance(quality, Mapping) else {},
                   lanes=read_lanes(lanes) if isinstance(lanes, Mapping) else {},
                   fingerprint=dict(fingerprint) if isinstance(fingerprint, Mapping) else None,
                   champion=None if champion is None else str(champion),
                   schema_version=version)

    def outcomes(self) -> dict[str, dict[str, Any]]:
        """lane name -> its outcome (verdict, speedup, ci_low, ci_high, objective, reason), lanes judged only."""
        return {name: rec.outcome for name, rec in self.lanes.items() if isinstance(rec.outcome, dict)}

"""Suites: model source, pipeline settings, the fixed corpus and the performance lanes."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from pytest_ditar.config.project import build_dataclass
from pytest_ditar.core.errors import ConfigError
from pytest_ditar.core.vocabulary import LANE_KINDS


@dataclass(frozen=True)
class ModelSource:
    source: str  # embedded-tiny | random-init | local
    arch: str = "tiny"  # for random-init: dit-xl-2-256
    weights_dir: str | None = None  # for local: a facebook/DiT-XL-2-256-style directory
    seed: int = 0  # random init seed


@dataclass(frozen=True)
class PipelineSettings:
    scheduler: str = "dpm-solver-multistep"
    steps: int = 25
    guidance: float = 4.0
    resolution: int = 256
    dtype_cpu: str = "float32"
    dtype_cuda: str = "float16"
    batch: int = 8  # items generated per call in the quality phase

    def dtype_for(self, device: str) -> str:
        return self.dtype_cuda if device.startswith("cuda") else self.dtype_cpu


@dataclass(frozen=True)
class CorpusItem:
    id: str
    label: int
    seed: int
    steps: int | None = None
    label_name: str | None = None


@dataclass(frozen=True)
class Lane:
    name: str
    batch: int
    repeats: int = 10
    warmup: int = 2
    steps: int | None = None
    gpus: int = 1
    kind: str = "time"  # what the lane measures (core.vocabulary.LANE_KINDS; loop.perf.lanekinds judges each)


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    model: ModelSource
    pipeline: PipelineSettings
    corpus: tuple[CorpusItem, ...]
    lanes: tuple[Lane, ...]
    content_hash: str

    def item(self, item_id: str) -> CorpusItem:
        for it in self.corpus:
            if it.id == item_id:
                return it
        raise KeyError(item_id)

    def lane(self, name: str) -> Lane:
        for ln in self.lanes:
            if ln.name == name:
                return ln
        raise ConfigError(f"{self.path}: no lane named '{name}' (lanes: {', '.join(ln.name for ln in self.lanes)})")

    def check_objective(self, name: str, config: Path) -> None:
        """Refuse an objective lane (config's `objective_lane`) of another kind than time: only time
        decides a KEEP (loop.perf.lanekinds). A name the suite lacks is left to the gate, which names it."""
        lane = next((ln for ln in self.lanes if ln.name == name), None)
        if lane is not None and lane.kind != "time":
            raise ConfigError(f"{config}: key 'objective_lane' names {lane.name}, a {lane.kind} lane of {self.path}: "
                              "the objective lane must be a timed lane (kind time)")

    def steps_for(self, item: CorpusItem) -> int:
        return item.steps or self.pipeline.steps


_TOP_KEYS = {"name", "model", "pipeline", "corpus", "lanes", "description"}


def load_suite(suite_dir: Path) -> Suite:
    path = suite_dir / "suite.yaml"
    raw = _read_suite_mapping(path)
    where = str(path)
    model = build_dataclass(ModelSource, raw["model"], where, prefix="model.")
    if model.source not in ("embedded-tiny", "random-init", "local"):
        raise ConfigError(f"{where}: key 'model.source' must be embedded-tiny, random-init or local, "
                          f"got '{model.source}'")
    pipeline = build_dataclass(PipelineSettings, raw["pipeline"], where, prefix="pipeline.")
    corpus = _corpus(raw["corpus"], where)
    lanes = _lanes(raw["lanes"], where)
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), default=str)
    return Suite(
        name=str(raw.get("name", suite_dir.name)),
        path=path,
        model=model,
        pipeline=pipeline,
        corpus=corpus,
        lanes=lanes,
        content_hash=hashlib.sha256(canonical.encode()).hexdigest(),
    )


def _read_suite_mapping(path: Path) -> dict[str, object]:
    """suite.yaml parsed, a mapping of the known top-level keys with every required one."""
    if not path.is_file():
        raise ConfigError(f"{path}: suite file not found "
                          "(check the config key 'suite' names a folder under suites/ with a suite.yaml)")
    text = path.read_text()
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: malformed suite: {getattr(exc, 'problem', exc)}") from None
    where = str(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a suite must be a mapping")
    for key in raw:
        if key not in _TOP_KEYS:
            raise ConfigError(f"{where}: unknown key '{key}' (known: {', '.join(sorted(_TOP_KEYS))})")
    for key in ("model", "pipeline", "corpus", "lanes"):
        if key not in raw:
            raise ConfigError(f"{where}: missing required key '{key}'")
    return raw


def _corpus(items: object, where: str) -> tuple[CorpusItem, ...]:
    """The corpus: a non-empty list of items, each with an id, a label and a seed, no id twice."""
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{where}: key 'corpus' must be a non-empty list of items")
    corpus = []
    for n, item in enumerate(items):
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: corpus item #{n} must be a mapping with id, label, seed")
        for req in ("id", "label", "seed"):
            if req not in item:
                name = item.get("id", f"#{n}")
                raise ConfigError(f"{where}: corpus item '{name}' has no '{req}' (every item needs id, label and seed)")
        corpus.append(build_dataclass(CorpusItem, item, where, prefix=f"corpus[{item['id']}]."))
    ids = [c.id for c in corpus]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ConfigError(f"{where}: duplicate corpus ids: {', '.join(sorted(dup))}")
    return tuple(corpus)


def _lanes(raw_lanes: object, where: str) -> tuple[Lane, ...]:
    """The lanes: a non-empty list, each of a known kind."""
    if not isinstance(raw_lanes, list) or not raw_lanes:
        raise ConfigError(f"{where}: key 'lanes' must be a non-empty list")
    lanes = tuple(build_dataclass(Lane, ln, where, prefix=f"lanes[{n}].") for n, ln in enumerate(raw_lanes))
    for n, ln in enumerate(lanes):
        if ln.kind not in LANE_KINDS:
            raise ConfigError(f"{where}: key 'lanes[{n}].kind' is {ln.kind!r}; valid: {', '.join(LANE_KINDS)}")
    return lanes


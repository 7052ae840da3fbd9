"""Project configuration (config/autoresearch.json, JSON or YAML) as frozen dataclasses.

Every problem is a ConfigError naming the file and the key, so a typo never silently
falls back to a default during an unattended session.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from pytest_ditar.core.errors import ConfigError

# Thresholds lives in core (its contracts check it) so core imports nothing above it; the names
# stay importable from here.
from pytest_ditar.core.thresholds import PAIRED_SCORES, Thresholds
from pytest_ditar.core.vocabulary import CLASSES, DEFAULT_CONFIG


@dataclass(frozen=True)
class PerfConfig:
    min_speedup: float = 0.01  # the user's "worth keeping": a KEEP must beat 1 + this
    noise_k: float = 2.0  # lanes judged on stored samples: min effect is k x the baseline's A/A noise
    alpha: float = 0.05  # false-KEEP rate of the objective lane, spent over its sequential looks
    max_cv: float = 0.20  # an UNDECIDED lane with a robust CV above this is UNSTABLE, not NOT_FASTER
    guard_tolerance: float = 0.05  # non-objective lanes may not regress beyond this
    n_boot: int = 2000
    interleave: bool = True  # time champion and candidate in the same process when possible
    pin_cpu: bool = False  # pin the launching thread to one core while a lane is timed
    # The in-run champion may differ from its stored samples by at most max(this, min effect)
    # before the lane is UNSTABLE (champion drift: interference, or a changed host).
    drift_tolerance: float = 0.05
    # Sequential objective lane (core.sequential): the suite's rounds first, then doubling up to
    # max_rounds while undecided, for at most lane_budget_s seconds of the lane.
    max_rounds: int = 384
    lane_budget_s: float = 60.0
    # Time a second build of the champion (its twin) in the objective lane's randomized rounds; a
    # KEEP must beat both (core.sequential: a burst that slows one reference cannot make a KEEP).
    twin: bool = True
    # `dit-ar baseline` refuses (unless --accept-noise) a baseline whose objective lane's A/A implies
    # a smallest resolvable win above 1 + this: every later verdict is judged on a floor that coarse.
    max_baseline_win: float = 0.25

    def __post_init__(self) -> None:
        checks = {"min_speedup": 0.0 <= self.min_speedup < 1.0, "alpha": 0.0 < self.alpha < 0.5,
                  "max_rounds": self.max_rounds >= 3, "lane_budget_s": self.lane_budget_s > 0.0,
                  "noise_k": self.noise_k >= 0.0, "max_cv": self.max_cv > 0.0,
                  "guard_tolerance": 0.0 <= self.guard_tolerance < 1.0, "drift_tolerance": self.drift_tolerance >= 0.0,
                  "max_baseline_win": self.max_baseline_win > 0.0}
        for key, ok in checks.items():
            if not ok:
                raise ConfigError(f"key 'perf.{key}' is out of range: {getattr(self, key)!r} "
                                  "(see README, configuration)")


@dataclass(frozen=True)
class SemanticConfig:
    clip_model: str | None = None  # open_clip architecture name, e.g. ViT-B-32
    clip_weights: str | None = None  # local path to the checkpoint (never downloaded)
    lpips_weights: str | None = None  # local directory/file for LPIPS (never downloaded)
    lpips_net: str = "alex"  # LPIPS trunk: alex, vgg or squeeze (must match lpips_weights)


@dataclass(frozen=True)
class HoldoutConfig:
    count: int = 2  # fresh seeds drawn per gated run
    steps: int | None = None  # None: the suite's steps


@dataclass(frozen=True)
class Config:
    path: Path
    root: Path
    suite: str
    suites_dir: str = "suites"
    objective_lane: str = "latency_b1"
    state_dir: str = ".autoresearch"
    branch_prefix: str = "autoresearch/"
    target: str = "a5500"
    mutable_paths: tuple[str, ...] = ("mutable/",)
    fixed_paths: tuple[str, ...] = ()
    knowledge_dir: str = "knowledge/handbook"
    candidate_dir: str = "mutable"
    item_timeout_s: float = 600.0  # one request (a batch, a timed call), counted from the end of the build
    build_timeout_s: float = 1800.0  # one worker's build(): a cold torch.compile/autotune pass fits in it
    vram_budget_gib: float | None = None  # None: the target's memory
    # "on": every worker runs in a sandbox (runtime.sandbox), and a gated run where none can be
    # made is refused; "off" (the project owner's choice, before the baseline: the config is pinned)
    # runs them unsandboxed, and every verdict line and ledger row says sandbox=off
    sandbox: str = "on"
    thresholds: Mapping[str, Thresholds] = field(default_factory=dict)
    perf: PerfConfig = PerfConfig()
    semantic: SemanticConfig = SemanticConfig()
    holdout: HoldoutConfig = HoldoutConfig()

    @property
    def state_path(self) -> Path:
        return self.root / self.state_dir

    @property
    def suite_dir(self) -> Path:
        return self.root / self.suites_dir / self.suite

    @property
    def candidate_path(self) -> Path:
        return self.root / self.candidate_dir

    @property
    def sandboxed(self) -> bool:
        return self.sandbox != "off"

    def thresholds_for(self, class_name: str) -> Thresholds:
        return self.thresholds[class_name]

    def content_hash(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    @property
    def own_root(self) -> Path:
        """The project this file lives in; `root` differs from it only through a `root` key."""
        return project_root_of(self.path)

    @property
    def repo_config(self) -> Path:
        """The repository's config file, the only one a gated run takes."""
        return self.root / DEFAULT_CONFIG

    def repo_config_sha256(self) -> str | None:
        """sha256 of the repository's config file (what a baseline pins); None when there is none."""
        f = self.repo_config
        return hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else None


def project_root_of(path: Path) -> Path:
    """The folder above `config/` for config/<file>, else the file's own folder."""
    return path.parent.parent if path.parent.name == "config" else path.parent


_SIMPLE = {f.name: f for f in dataclasses.fields(Config)}
_NESTED = {"perf": PerfConfig, "semantic": SemanticConfig, "holdout": HoldoutConfig}


# how a scalar's annotation starts -> whether a value is one, what it must be (the error's words), its
# value in the dataclass; first match wins ("str" never matches "tuple[str")
_SCALARS: tuple[tuple[str, Callable[[object], bool], str, Callable[[Any], object]], ...] = (
    ("tuple[str", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of strings", tuple),
    ("float", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number, got {value!r}", float),
    ("int", lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer, got {value!r}", lambda v: v),
    ("bool", lambda v: isinstance(v, bool), "true or false, got {value!r}", lambda v: v),
    ("str", lambda v: isinstance(v, str), "a string, got {value!r}", lambda v: v),
)


def _typecheck(where: str, key: str, value: object, annotation: str) -> object:
    """Check a scalar against the dataclass annotation string (we use `from __future__`)."""
    ann = annotation.replace(" ", "")
    if value is None:
        if "None" in ann:
            return None
        raise ConfigError(f"{where}: key '{key}' must not be null")
    for prefix, accepts, must_be, convert in _SCALARS:
        if ann.startswith(prefix):
            if not accepts(value):
                raise ConfigError(f"{where}: key '{key}' must be " + must_be.format(value=value))
            return convert(value)
    raise AssertionError(f"unhandled annotation {annotation}")


def build_dataclass(dataclass_type: type, raw: object, where: str, prefix: str = "", **extra: Any) -> Any:
    """Build a frozen dataclass from a mapping, rejecting unknown keys and wrong types."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: '{prefix.rstrip('.') or 'top level'}' must be a mapping")
    fields = {f.name: f for f in dataclasses.fields(dataclass_type) if f.name not in extra}
    kwargs: dict[str, Any] = dict(extra)
    for key, value in raw.items():
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"{where}: unknown key '{prefix}{key}' (known: {known})")
        kwargs[key] = _typecheck(where, prefix + key, value, str(fields[key].type))
    try:
        return dataclass_type(**kwargs)
    except ConfigError as exc:  # a range check in __post_init__: name the file too
        raise ConfigError(f"{where}: {exc}") from None


def load_config(path: str | Path) -> Config:
    """The config at `path`. A run asks for it more than once (the plugin's activation, then the
    session): the text is read each time and parsed only when it differs, so every reader sees
    the file as it is now, and a run parses it once."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found (pass --config/--ditar-config, or create {DEFAULT_CONFIG})")
    return _parse(path, path.read_text())


@functools.lru_cache(maxsize=16)
def _parse(path: Path, text: str) -> Config:
    """A pure function of the file's name and text (a frozen Config), hence cached."""
    raw = _read_mapping(path, text)
    where = str(path)
    nested = {k: raw.pop(k) for k in list(raw) if k in _NESTED}
    thresholds_raw = raw.pop("thresholds", None)
    if "suite" not in raw:
        raise ConfigError(f"{where}: missing required key 'suite' (the name of a folder under suites/)")
    kwargs = _top_level_values(raw, path)
    for key, value in nested.items():
        kwargs[key] = build_dataclass(_NESTED[key], value, where, prefix=f"{key}.")
    kwargs["thresholds"] = _load_thresholds(thresholds_raw, where)
    cfg = Config(**kwargs)
    if cfg.objective_lane == "":
        raise ConfigError(f"{where}: key 'objective_lane' must name a lane of the suite")
    if not cfg.build_timeout_s > 0:
        raise ConfigError(f"{where}: key 'build_timeout_s' must be a positive number of seconds, "
                          f"got {cfg.build_timeout_s!r}")
    return cfg


def _read_mapping(path: Path, text: str) -> dict[str, object]:
    """The config's text parsed (JSON by its own rules: YAML 1.1 reads 1e-2 as a string), a mapping."""
    if path.suffix.lower() == ".json":
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: malformed config at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    else:
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise ConfigError(f"{path}: malformed config{at}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the config must be a mapping of keys to values")
    return dict(raw)


def _top_level_values(raw: dict[str, object], path: Path) -> dict[str, Any]:
    """Config's keyword arguments from the config's top-level scalar keys, each checked."""
    where = str(path)
    cfg_fields = {n: f for n, f in _SIMPLE.items() if n not in ("path", "root", "thresholds", *_NESTED)}
    kwargs: dict[str, Any] = {"path": path, "root": project_root_of(path)}
    for key, value in raw.items():
        if key == "root":
            kwargs["root"] = (path.parent / str(_typecheck(where, key, value, "str"))).resolve()
            continue
        if key not in cfg_fields:
            known = ", ".join(sorted([*cfg_fields, "root", "thresholds", *_NESTED]))
            raise ConfigError(f"{where}: unknown key '{key}' (known: {known})")
        if key == "sandbox":
            kwargs[key] = _sandbox_mode(where, value)
            continue
        kwargs[key] = _typecheck(where, key, value, str(cfg_fields[key].type))
    return kwargs


def _sandbox_mode(where: str, value: object) -> str:
    """"on" or "off"; YAML's bare `sandbox: off` arrives as False, JSON's may be a boolean too."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str) and value in ("on", "off"):
        return value
    raise ConfigError(f"{where}: key 'sandbox' must be \"on\" or \"off\", got {value!r}")


def _load_thresholds(raw: object, where: str) -> Mapping[str, Thresholds]:
    merged = {c: dict(DEFAULT_THRESHOLDS[c]) for c in CLASSES}
    if raw is not None:
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: key 'thresholds' must map class names to floors")
        for cls, values in raw.items():
            if cls not in CLASSES:
                raise ConfigError(f"{where}: unknown key 'thresholds.{cls}' (classes: {', '.join(CLASSES)})")
            if not isinstance(values, dict):
                raise ConfigError(f"{where}: key 'thresholds.{cls}' must be a mapping")
            merged[cls].update(values)
    out = {c: build_dataclass(Thresholds, merged[c], where, prefix=f"thresholds.{c}.") for c in CLASSES}
    for c, t in out.items():
        for name in t.required_scores:
            if name not in PAIRED_SCORES:
                raise ConfigError(f"{where}: key 'thresholds.{c}.required_scores': unknown score '{name}' "
                                  f"(paired scores: {', '.join(PAIRED_SCORES)})")
    return out


# Defaults; config/autoresearch.json states them explicitly so they are a fixed path.
DEFAULT_THRESHOLDS: dict[str, dict[str, Any]] = {
    "exact": {"latent_rel_l2_max": 1e-2, "psnr_min": 38.0, "ssim_min": 0.98},
    "numerical": {"latent_rel_l2_max": 5e-2, "psnr_min": 30.0, "ssim_min": 0.95},
    "approximate": {"psnr_min": 18.0, "ssim_min": 0.6, "lpips_max": 0.3, "clip_drop_max": 0.02,
                    "semantic_required": True},
    "quantization": {"psnr_min": 25.0, "ssim_min": 0.85, "lpips_max": 0.15, "clip_drop_max": 0.01,
                     "semantic_required": True, "zero_regression": True, "required_scores": ["clip_score"]},
}


"""The semantic evaluators' configuration: whether a class needs them, whether they are set, and a
one-line error naming the key when a configured file is not there. No torch here: the gate, doctor
and status answer "can this session judge class X?" without loading a model (runtime.semantic does).
"""
from __future__ import annotations

import os
from pathlib import Path

from pytest_ditar.config.project import Config, Thresholds
from pytest_ditar.core.errors import ConfigError
from pytest_ditar.core.vocabulary import CLASSES

LPIPS_NETS = ("alex", "vgg", "squeeze")
# The agent may not touch the config during a session (it is a fixed path), so a refusal names who
# can, and when, and never tells the agent to do it.
OWNER = "the project owner sets `semantic.*` before the baseline, never during a session"


def needed(t: Thresholds) -> bool:
    """Whether a class's contract uses the semantic scores."""
    return bool(t.semantic_required or t.zero_regression or t.required_scores)


def configured(cfg: Config) -> bool:
    sem = cfg.semantic
    return bool(sem.clip_model and sem.clip_weights and sem.lpips_weights)


def unavailable(cfg: Config, class_name: str) -> str | None:
    """Why this session cannot judge `class_name`, in a few words, or None when it can."""
    if not needed(cfg.thresholds_for(class_name)):
        return None
    if not configured(cfg):
        return "no CLIP/LPIPS evaluators configured"
    try:
        check_config(cfg)  # a configured file that is not there fails before any candidate runs
    except ConfigError as exc:
        return f"its CLIP/LPIPS evaluators do not load ({exc})"
    return None


def class_refusal(cfg: Config, judged_class: str) -> str | None:
    """The class gate's reason, or None: word for word the same in a gated run and in a smoke check
    (`pytest -m quality --ditar-class CLASS`). It names who fixes it, never the agent."""
    why = unavailable(cfg, judged_class)
    if why is None:
        return None
    usable = [c for c in CLASSES if unavailable(cfg, c) is None]
    other = f"choose a class this session can judge ({', '.join(usable)})" if usable else "choose another class"
    return (f"class '{judged_class}' cannot be judged in this session: {why} (semantic.clip_model, "
            f"semantic.clip_weights and semantic.lpips_weights); {OWNER}: {other} or stop")


def availability(cfg: Config) -> list[tuple[str, str | None]]:
    """Every class, tightest first, with why this session cannot judge it (None: it can)."""
    return [(cls, unavailable(cfg, cls)) for cls in CLASSES]


def resolve(cfg: Config, key: str, value: str) -> Path:
    path = Path(value).expanduser()
    path = path if path.is_absolute() else (cfg.root / path)
    if not path.is_file():
        raise ConfigError(f"{cfg.path}: key 'semantic.{key}': {path} is not a local file "
                          "(weights are never downloaded)")
    return path.resolve()


def setting(cfg: Config, key: str) -> str:
    """`semantic.<key>` (clip_model, clip_weights or lpips_weights); a one-line ConfigError when unset."""
    value: str | None = getattr(cfg.semantic, key)
    if not value:
        raise ConfigError(f"{cfg.path}: key 'semantic.{key}' is not set "
                          "(the semantic evaluators load local files only)")
    return value


def check_config(cfg: Config) -> None:
    """Raise a one-line ConfigError naming the key when an evaluator cannot be loaded locally."""
    sem = cfg.semantic
    clip_model, clip_weights, lpips_weights = [setting(cfg, key)
                                               for key in ("clip_model", "clip_weights", "lpips_weights")]
    if is_path(clip_model):
        if not clip_model.endswith(".json"):
            raise ConfigError(f"{cfg.path}: key 'semantic.clip_model': '{clip_model}' must be an open_clip "
                              "architecture name (e.g. ViT-B-32) or a local open_clip model-config .json file")
        resolve(cfg, "clip_model", clip_model)
    elif ":" in clip_model:
        raise ConfigError(f"{cfg.path}: key 'semantic.clip_model': '{clip_model}' names a remote source; "
                          "use an open_clip architecture name (e.g. ViT-B-32) or a local model-config .json")
    resolve(cfg, "clip_weights", clip_weights)
    resolve(cfg, "lpips_weights", lpips_weights)
    import importlib.util

    missing = [m for m in ("open_clip", "lpips") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"{cfg.path}: key 'semantic' is set but {', '.join(missing)} is not installed "
                          "(pip install 'pytest-ditar[clip]')")
    if sem.lpips_net not in LPIPS_NETS:
        raise ConfigError(f"{cfg.path}: key 'semantic.lpips_net' must be one of {', '.join(LPIPS_NETS)}, "
                          f"got '{sem.lpips_net}'")


def is_path(value: str) -> bool:
    return value.endswith(".json") or "/" in value or os.sep in value

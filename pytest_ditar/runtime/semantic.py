"""Semantic evaluators: CLIP score and LPIPS, loaded only from local files named in the config.

- CLIP score (open-clip-torch): cosine similarity of the image embedding with the embedding of
  "a photo of a {label name}", label names being the ImageNet-1k class names DiT conditions on.
  It is reference-free, so candidate and baseline each get one per item (a paired score).
- LPIPS (lpips): perceptual distance of the candidate image to the baseline image.

Nothing is downloaded: the CLIP checkpoint is a local file passed to `open_clip.create_model`
as `pretrained=<path>` (a path is never a hub tag) with the towers' own default downloads off;
LPIPS gets its trunk from a local file too (`pnet_rand=True` so torchvision never fetches one).
Real LPIPS needs BOTH its linear layers and the ImageNet trunk weights: `lpips_weights` is
either a full LPIPS state dict (keys `net.*` + `lin*`), or a torchvision trunk checkpoint
(keys `features.*`, e.g. alexnet's) combined with the linear layers bundled in the lpips
package. Built once per session, run batched.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Protocol, Sequence

import numpy as np

from pytest_ditar.config.project import Config
from pytest_ditar.config.semantic import check_config, configured, is_path, needed, resolve, setting
from pytest_ditar.config.suite import CorpusItem, Suite
from pytest_ditar.core.errors import ConfigError
from pytest_ditar.core.outputs import ItemOutput

LPIPS_MIN_SIDE = 64  # the trunks' pooling pyramid collapses below this; smaller images are upsampled
CHUNK = 32  # images per evaluator forward


class Judged(Protocol):
    """What deciding whether a run scores needs: its config and the class it is judged under."""

    @property
    def cfg(self) -> Config: ...

    @property
    def judged_class(self) -> str: ...


class Stored(Protocol):
    """The baseline's stored outputs (store.snapshot.Snapshot: runtime does not read the state dir)."""

    def output(self, item_id: str) -> ItemOutput: ...


class Scoring(Judged, Protocol):
    """What scoring needs of a session (loop.run.session.DitarSession): its evaluators' cache, the
    device they load on, the suite and the baseline's stored outputs."""

    @property
    def suite(self) -> Suite: ...

    @property
    def semantic(self) -> "SessionScores": ...

    def resolved_device(self) -> str: ...

    def baseline(self) -> Stored: ...


def wanted(sess: Judged) -> bool:
    """Whether this run scores with the evaluators: its class needs them and they are configured."""
    return needed(sess.cfg.thresholds_for(sess.judged_class)) and configured(sess.cfg)


def label_names() -> tuple[str, ...]:
    """The 1000 ImageNet class names, from open_clip's zero-shot metadata (a data source)."""
    try:
        from open_clip import IMAGENET_CLASSNAMES

        return tuple(IMAGENET_CLASSNAMES)
    except ImportError:
        return ()


def prompt(label: int, name: str | None = None, names: Sequence[str] = ()) -> str:
    text = name or (names[label] if 0 <= label < len(names) else f"class {label}")
    return f"a photo of a {text}"


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """Belt and braces: any hub access while building fails instead of downloading."""
    keys = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    old = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: "1" for k in keys})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _to_float(images: Sequence[np.ndarray], device: str):
    import torch

    x = torch.from_numpy(np.stack([np.asarray(im) for im in images])).to(device)
    return x.permute(0, 3, 1, 2).float() / 255.0  # NCHW in [0, 1]


class Evaluators:
    """A CLIP model + tokenizer and an LPIPS model on one device, in eval mode."""

    def __init__(self, clip: Any, tokenizer: Any, lpips_model: Any, device: str):
        self.clip, self.tokenizer, self.lpips_model, self.device = clip, tokenizer, lpips_model, device
        pre = getattr(clip.visual, "preprocess_cfg", {}) or {}
        size = pre.get("size", getattr(clip.visual, "image_size", 224))
        self.size = tuple(size) if isinstance(size, (tuple, list)) else (size, size)
        self.mean = tuple(pre.get("mean", (0.48145466, 0.4578275, 0.40821073)))
        self.std = tuple(pre.get("std", (0.26862954, 0.26130258, 0.27577711)))
        self.names = label_names()
        self._text: dict[str, Any] = {}

    @classmethod
    def load(cls, cfg: Config, device: str) -> "Evaluators":
        check_config(cfg)
        try:
            import lpips  # noqa: F401
            import open_clip  # noqa: F401
        except ImportError as exc:
            raise ConfigError(f"{cfg.path}: the semantic evaluators need the 'clip' extra "
                              f"(pip install 'pytest-ditar[clip]'): {exc}") from None
        with _offline():
            clip, tokenizer = _load_clip(cfg)
            lp = _load_lpips(cfg)
        return cls(clip.to(device).eval(), tokenizer, lp.to(device).eval(), device)

    def _text_features(self, prompts: Sequence[str]):
        import torch

        missing = [p for p in dict.fromkeys(prompts) if p not in self._text]
        if missing:
            with torch.no_grad():
                feats = self.clip.encode_text(self.tokenizer(missing).to(self.device)).float()
                feats = feats / feats.norm(dim=-1, keepdim=True)
            self._text.update(zip(missing, feats))
        return torch.stack([self._text[p] for p in prompts])

    def _clip_input(self, images: Sequence[np.ndarray]):
        import torch
        import torch.nn.functional as F

        x = _to_float(images, self.device)
        h, w = x.shape[-2:]
        th, tw = self.size
        scale = max(th / h, tw / w)  # resize the shortest side, then center crop (CLIP's eval transform)
        nh, nw = max(th, round(h * scale)), max(tw, round(w * scale))
        x = F.interpolate(x, size=(nh, nw), mode="bicubic", align_corners=False, antialias=True).clamp(0, 1)
        top, left = (nh - th) // 2, (nw - tw) // 2
        x = x[..., top:top + th, left:left + tw]
        mean = torch.tensor(self.mean, device=self.device).view(1, 3, 1, 1)
        std = torch.tensor(self.std, device=self.device).view(1, 3, 1, 1)
        return (x - mean) / std

    def clip_scores(self, images: Sequence[np.ndarray], labels: Sequence[int],
                    names: Sequence[str | None] | None = None) -> np.ndarray:
        """Cosine similarity of each image with its class prompt, batched."""
        import torch

        prompts = [prompt(int(label), n, self.names) for label, n in zip(labels, names or [None] * len(labels))]
        out: list[np.ndarray] = []
        with torch.no_grad():
            for i in range(0, len(images), CHUNK):
                img = self.clip.encode_image(self._clip_input(images[i:i + CHUNK])).float()
                img = img / img.norm(dim=-1, keepdim=True)
                out.append((img * self._text_features(prompts[i:i + CHUNK])).sum(-1).cpu().numpy())
        return np.concatenate(out).astype(np.float64) if out else np.zeros(0)

    def lpips(self, a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> np.ndarray:
        """LPIPS distance per pair (inputs scaled to [-1, 1]; tiny images upsampled first)."""
        import torch
        import torch.nn.functional as F

        out: list[np.ndarray] = []
        with torch.no_grad():
            for i in range(0, len(a), CHUNK):
                x, y = _to_float(a[i:i + CHUNK], self.device), _to_float(b[i:i + CHUNK], self.device)
                side = min(x.shape[-2:])
                if side < LPIPS_MIN_SIDE:
                    size = tuple(int(round(s * LPIPS_MIN_SIDE / side)) for s in x.shape[-2:])
                    x, y = (F.interpolate(t, size=size, mode="bilinear", align_corners=False) for t in (x, y))
                d = self.lpips_model(x * 2 - 1, y * 2 - 1)
                out.append(d.reshape(len(x)).float().cpu().numpy())
        return np.concatenate(out).astype(np.float64) if out else np.zeros(0)


def _load_clip(cfg: Config) -> tuple[Any, Any]:
    import open_clip

    name = setting(cfg, "clip_model")  # Evaluators.load checked the config: set
    if is_path(name):  # a local architecture config (open_clip's model-config format)
        path = resolve(cfg, "clip_model", name)
        open_clip.add_model_config(path)
        name = path.stem
    arch = open_clip.get_model_config(name)
    if arch is None:
        raise ConfigError(f"{cfg.path}: key 'semantic.clip_model': unknown open_clip architecture '{name}'")
    text = arch.get("text_cfg", {})
    if text.get("hf_model_name") or text.get("hf_tokenizer_name"):
        raise ConfigError(f"{cfg.path}: key 'semantic.clip_model': '{name}' uses a Hugging Face text tower or "
                          "tokenizer, which would be fetched from the hub; "
                          "pick an architecture with open_clip's own text tower")
    weights = resolve(cfg, "clip_weights", setting(cfg, "clip_weights"))
    try:
        model = open_clip.create_model(name, pretrained=str(weights), pretrained_image=False, pretrained_text=False,
                                       require_pretrained=True)
    except Exception as exc:  # noqa: BLE001 - a wrong file is a config problem, said in one line
        raise ConfigError(f"{cfg.path}: key 'semantic.clip_weights': {weights} does not load into '{name}': "
                          f"{str(exc).splitlines()[0][:200]}") from None
    return model, open_clip.get_tokenizer(name)


def _load_lpips(cfg: Config) -> Any:
    import lpips
    import torch

    path = resolve(cfg, "lpips_weights", setting(cfg, "lpips_weights"))
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"{cfg.path}: key 'semantic.lpips_weights': {path} is not a torch state dict "
                          f"({exc})") from None
    state = state.get("state_dict", state) if isinstance(state, Mapping) else state
    net = cfg.semantic.lpips_net
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torchvision's 'pretrained' deprecation notice
        if any(k.startswith("net.") for k in state):
            # A complete LPIPS module: trunk + linear layers from the file, nothing else loaded.
            model = lpips.LPIPS(pretrained=False, net=net, pnet_rand=True, verbose=False)
            _load_strict(cfg, path, model, state)
            return model
        # A torchvision trunk (features.N.*) + the linear layers the lpips package ships.
        model = lpips.LPIPS(pretrained=True, net=net, pnet_rand=True, verbose=False)
    mapped = dict(model.state_dict())
    trunk = [k for k in mapped if k.startswith("net.")]
    for key in trunk:
        _, _slice, idx, param = key.split(".", 3)
        src = f"features.{idx}.{param}"
        if src not in state:
            raise ConfigError(f"{cfg.path}: key 'semantic.lpips_weights': {path} has neither LPIPS keys (net.*) nor "
                              f"the {net} trunk key '{src}'")
        mapped[key] = state[src]
    _load_strict(cfg, path, model, mapped)
    return model


def _load_strict(cfg: Config, path: Path, model: Any, state: Mapping[str, Any]) -> None:
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ConfigError(f"{cfg.path}: key 'semantic.lpips_weights': {path} does not match LPIPS net "
                          f"'{cfg.semantic.lpips_net}': {str(exc).splitlines()[0][:200]}") from None


@dataclass
class SessionScores:
    """Per-session cache: evaluators (built on first use), baseline CLIP scores, candidate scores."""

    evaluators: Evaluators | None = None
    baseline_clip: dict[str, float] = field(default_factory=dict)
    scores: dict[str, dict[str, float]] = field(default_factory=dict)

    def loaded(self, cfg: Config, device: str) -> Evaluators:
        if self.evaluators is None:
            self.evaluators = Evaluators.load(cfg, device)
        return self.evaluators


def session_scores(sess: Scoring, outputs: Mapping[str, ItemOutput], item: CorpusItem, cand: ItemOutput,
                   base: ItemOutput) -> dict[str, float | None] | None:
    """clip_score, clip_score_baseline and lpips for `item`; None when the class needs no
    semantic scores or no evaluators are configured (the contract then fails closed itself).

    The first call scores the whole baseline corpus (stored images); every call scores all
    candidate `outputs` generated so far that lack scores, so work runs in batches."""
    ev = evaluators_for(sess)
    if ev is None:
        return None
    cache: SessionScores = sess.semantic
    snap = sess.baseline()
    if not cache.baseline_clip:
        corpus = list(sess.suite.corpus)
        imgs = [snap.output(it.id).image for it in corpus]
        vals = ev.clip_scores(imgs, [it.label for it in corpus], [it.label_name for it in corpus])
        cache.baseline_clip.update({it.id: float(v) for it, v in zip(corpus, vals)})
    pending = [it for it in sess.suite.corpus if it.id in outputs and it.id not in cache.scores]
    if item.id not in cache.scores and all(it.id != item.id for it in pending):
        pending.append(item)
    if pending:
        outs = {it.id: (cand if it.id == item.id else outputs[it.id]) for it in pending}
        bases = {it.id: (base if it.id == item.id else snap.output(it.id)) for it in pending}
        ok = [it for it in pending if _scorable(outs[it.id].image, bases[it.id].image)]
        clip = ev.clip_scores([outs[it.id].image for it in ok], [it.label for it in ok], [it.label_name for it in ok])
        dist = ev.lpips([outs[it.id].image for it in ok], [bases[it.id].image for it in ok])
        for it, c, d in zip(ok, clip, dist):
            cache.scores[it.id] = {"clip_score": float(c), "lpips": float(d)}
    got = cache.scores.get(item.id)
    if got is None:
        return None  # shape or type mismatch: the pixel contract already reports it
    return {**got, "clip_score_baseline": cache.baseline_clip.get(item.id)}


def _scorable(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.ndim == 3 and a.shape[-1] == 3 and a.dtype == np.uint8


def pair_scores(ev: Evaluators, items: Sequence[Any], cand_images: Sequence[np.ndarray],
                base_images: Sequence[np.ndarray]) -> list[dict[str, float] | None]:
    """Semantic scores for fresh items (the holdout): both sides computed now."""
    ok = [i for i, (a, b) in enumerate(zip(cand_images, base_images)) if _scorable(a, b)]
    labels = [items[i].label for i in ok]
    names = [items[i].label_name for i in ok]
    c = ev.clip_scores([cand_images[i] for i in ok], labels, names)
    b = ev.clip_scores([base_images[i] for i in ok], labels, names)
    d = ev.lpips([cand_images[i] for i in ok], [base_images[i] for i in ok])
    out: list[dict[str, float] | None] = [None] * len(items)
    for j, i in enumerate(ok):
        out[i] = {"clip_score": float(c[j]), "clip_score_baseline": float(b[j]), "lpips": float(d[j])}
    return out


def evaluators_for(sess: Scoring) -> Evaluators | None:
    """The session's evaluators (built on first use) when its class needs them and they are
    configured, else None."""
    return sess.semantic.loaded(sess.cfg, sess.resolved_device()) if wanted(sess) else None

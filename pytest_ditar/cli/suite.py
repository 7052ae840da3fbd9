"""`dit-ar suite`: the active suite as the candidate meets it (model, pipeline settings, dtypes,
corpus, lanes, the contract types), the class floors, the classes this session can judge, and what
the suite can and cannot tell apart. Reads the config and the suite only: no torch, and the model's
directory is named, never built."""
from __future__ import annotations

import argparse
import os
from typing import Any

from pytest_ditar import interface
from pytest_ditar.cli.command import Command, light_session, print_document
from pytest_ditar.config import suite as suites
from pytest_ditar.config.project import Config
from pytest_ditar.config.semantic import OWNER, availability
from pytest_ditar.core.documents import SUITE_NEXT
from pytest_ditar.core.errors import ConfigError
from pytest_ditar.core.vocabulary import CLASSES, ENV_CPU_THREADS, SCHEMA_VERSION
from pytest_ditar.runtime.models import model_location
from pytest_ditar.runtime.worker_process import BUILDS_AT_ONCE, worker_threads


class Suite(Command):
    name = "suite"
    help = "the active suite: model, steps, dtypes, corpus, lanes, contract types, what it can judge"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true",
                            help="the same as one JSON document on stdout (pytest_ditar/schemas/suite.schema.json)")

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        cfg, suite, _ = light_session(args)
        if getattr(args, "json", False):
            return print_document(lambda: (document(cfg, suite), 0))
        for line in describe(cfg, suite):
            print(line)
        return 0


# What the candidate's types are for, one sentence each (their fields come from the dataclasses).
TYPES = {
    "PipelineSpec": "what build(spec) gets, once per worker process",
    "Request": "one generate(request) call: a batch of images",
    "Generated": "what generate() returns",
}

# Measured on the embedded tiny suite (CPU, fp32, 10 DPM-Solver steps, all 12 items, against the stock
# pipeline): each change's class, its worst latent rel-L2, lowest PSNR (dB) and lowest SSIM.
TINY_MEASURED = (("a bf16 transformer", "numerical", 0.0089, 53.3, 0.9999),
                 ("no guidance in the last 30% of steps", "approximate", 0.0081, 55.7, 0.9999),
                 ("one step fewer", "approximate", 0.032, 44.7, 0.999))
# Measured the same way: another scheduler (DDIM), labels shifted by one, or guidance 1 move the latents
# by rel-L2 0.36-1.3 (PSNR 12-26 dB).
TINY_DIFFERENT = 0.36

def model_where(suite: suites.Suite) -> str:
    """The directory PipelineSpec.model_dir will name, and whether it is there yet."""
    try:
        path = model_location(suite)
    except ConfigError as exc:
        return f"not found ({exc})"
    return f"{path}" + ("" if (path / "model_index.json").is_file() else " (built there on first use)")


def cpu_threads() -> str:
    """A worker's torch intra-op threads, as `dit-ar suite` and `doctor` say it."""
    setting = os.environ.get(ENV_CPU_THREADS)
    try:
        cpu, gpu = (worker_threads(d, len(os.sched_getaffinity(0)), setting) for d in ("cpu", "cuda"))
    except ValueError as exc:
        return f"none: {exc}"
    how = f"{ENV_CPU_THREADS}" if setting else f"{ENV_CPU_THREADS} unset: the host's cores / {BUILDS_AT_ONCE}"
    return f"{cpu} on CPU, {gpu} on a GPU ({how})"


def describe(cfg: Config, suite: suites.Suite) -> list[str]:
    p, m = suite.pipeline, suite.model
    items = suite.corpus
    where = suite.path.relative_to(cfg.root) if suite.path.is_relative_to(cfg.root) else suite.path
    weights = f", weights {m.weights_dir}" if m.weights_dir else ""
    lines = [f"suite     {suite.name} ({where})",
             f"model     {m.source}, arch {m.arch}, seed {m.seed}{weights}: {model_where(suite)}",
             f"worker    torch intra-op threads: {cpu_threads()}; one GPU per worker on CUDA",
             (f"pipeline  {p.scheduler}, {p.steps} steps, guidance {p.guidance:g}, {p.resolution} px, "
              f"quality batch {p.batch}"),
             f"dtype     cpu {p.dtype_cpu}, cuda {p.dtype_cuda} (PipelineSpec.dtype on that device)",
             (f"corpus    {len(items)} items: labels {_span(i.label for i in items)}, "
              f"seeds {_span(i.seed for i in items)}; plus {cfg.holdout.count} fresh holdout seed(s) per gated run"),
             "lanes     " + "; ".join(
                 f"{ln.name}{' (objective)' if ln.name == cfg.objective_lane else ''}: batch {ln.batch}, "
                 f"{ln.repeats} rounds, {ln.warmup} warm-up" + (f", {ln.steps} steps" if ln.steps else "")
                 + (f", {ln.gpus} GPUs" if ln.gpus > 1 else "") for ln in suite.lanes)]
    lines.append("contract  pytest_ditar/interface.py: mutable/pipeline.py's build(spec) returns an object whose "
                 "generate(request) returns Generated")
    lines += [f"  {name}({', '.join(f.name for f in fields)}): {TYPES[name]}" for name, fields in _types()]
    lines += [f"    {k}: {v}" for k, v in _values(suite).items()]
    lines.append("classes   quality floors against the ORIGINAL baseline (config `thresholds`):")
    for cls, why in availability(cfg):
        state = "can judge" if why is None else f"CANNOT judge here: {why}; {OWNER}"
        lines.append(f"  {cls:<12}  {_floors(cfg.thresholds_for(cls))}  [{state}]")
    lines += [f"resolves  {line}" for line in resolution(cfg, suite)]
    return lines


def document(cfg: Config, suite: suites.Suite) -> dict[str, object]:
    """`dit-ar suite --json`: describe()'s facts as values (its sentences where they are prose)."""
    p, m = suite.pipeline, suite.model
    where = suite.path.relative_to(cfg.root) if suite.path.is_relative_to(cfg.root) else suite.path
    return {
        "schema_version": SCHEMA_VERSION, "kind": "suite", "name": suite.name, "path": str(where),
        "model": {"source": m.source, "arch": m.arch, "seed": m.seed, "weights_dir": m.weights_dir,
                  "where": model_where(suite)},
        "worker_threads": cpu_threads(),
        "pipeline": {"scheduler": p.scheduler, "steps": p.steps, "guidance": p.guidance, "resolution": p.resolution,
                     "batch": p.batch, "dtype_cpu": p.dtype_cpu, "dtype_cuda": p.dtype_cuda},
        "corpus": {"items": len(suite.corpus), "labels": [i.label for i in suite.corpus],
                   "seeds": [i.seed for i in suite.corpus], "holdout_seeds": cfg.holdout.count},
        "objective_lane": cfg.objective_lane,
        "lanes": [{"name": ln.name, "objective": ln.name == cfg.objective_lane, "batch": ln.batch,
                   "repeats": ln.repeats, "warmup": ln.warmup, "steps": ln.steps, "gpus": ln.gpus}
                  for ln in suite.lanes],
        "contract": {name: {"fields": [f.name for f in fields], "what": TYPES[name]} for name, fields in _types()},
        "classes": {cls: {"available": why is None, "why": why, "floors": _floors(cfg.thresholds_for(cls))}
                    for cls, why in availability(cfg)},
        "resolves": resolution(cfg, suite),
        "next": SUITE_NEXT,
    }


def _types() -> list[tuple[str, tuple]]:
    import dataclasses

    return [(name, dataclasses.fields(getattr(interface, name))) for name in TYPES]


def _values(suite: suites.Suite) -> dict[str, str]:
    p = suite.pipeline
    return {"PipelineSpec.model_dir": "a diffusers DiTPipeline directory; load it with local_files_only=True",
            "PipelineSpec.device / dtype": f"'cpu' or 'cuda[:n]'; {p.dtype_cpu} on cpu, {p.dtype_cuda} on cuda",
            "PipelineSpec.scheduler / guidance / resolution": f"{p.scheduler} / {p.guidance:g} / {p.resolution}",
            "Request.labels / seeds": "one ImageNet class id and one seed per image; an image's initial noise comes "
                                      "from its own CPU generator, so it does not depend on its batch mates",
            "Request.steps": f"{p.steps} (a lane or an item may set its own)",
            "Generated.latents / images": "final latents [B, C, h, w] (the VAE decoder's input) and uint8 images "
                                          "[B, H, W, 3]"}


def resolution(cfg: Config, suite: suites.Suite) -> list[str]:
    """What this suite's floors can and cannot tell apart, said plainly."""
    broken = "broken output (NaN, blank images, latents out of range) fails every class"
    if suite.model.source == "embedded-tiny":
        out = [(f"a different computation (another scheduler, wrong labels, no guidance: latent rel-L2 >= "
                f"{TINY_DIFFERENT:g}) fails the exact and numerical floors; {broken}"),
               "random weights: images show nothing, so CLIP/LPIPS scores say nothing about content"]
        missed = []
        for what, cls, rel, psnr, ssim in TINY_MEASURED:
            passes = next((c for c in CLASSES[:CLASSES.index(cls)] if _within(cfg.thresholds_for(c), rel, psnr, ssim)),
                          None)
            if passes:
                missed.append(f"{what} ({cls}; latent rel-L2 <= {rel:g}, PSNR >= {psnr:g} dB) passes as '{passes}'")
        if missed:
            out += [f"CANNOT catch a mislabelled class: measured here, {'; '.join(missed)}",
                    ("use this suite to learn the loop and to check exact refactorings, not to judge numerics or "
                     "approximations")]
        return out
    if suite.model.source == "random-init":
        return [broken, ("real DiT-XL/2 shapes and FLOPs, so timings mean something; random weights: images show "
                         "nothing, so CLIP/LPIPS scores say nothing about content"),
                ("how far a numerical or approximate change moves these outputs is not measured: whether the floors "
                 "catch a mislabelled class here is unknown")]
    return [broken, "real weights: the floors judge real images, and CLIP/LPIPS (when configured) their content"]


def _within(t: Any, rel: float, psnr: float, ssim: float) -> bool:
    return (t.latent_rel_l2_max is None or rel <= t.latent_rel_l2_max) and (t.psnr_min is None or psnr >= t.psnr_min) \
        and (t.ssim_min is None or ssim >= t.ssim_min) and not t.semantic_required


def _floors(t: Any) -> str:
    parts = []
    for key, label, op, unit in (("latent_rel_l2_max", "latent rel-L2", "<=", ""),
                                 ("latent_max_abs_max", "latent max abs", "<=", ""), ("psnr_min", "PSNR", ">=", " dB"),
                                 ("ssim_min", "SSIM", ">=", ""), ("lpips_max", "LPIPS", "<=", ""),
                                 ("clip_drop_max", "CLIP drop", "<=", "")):
        v = getattr(t, key)
        if v is not None:
            parts.append(f"{label} {op} {v:g}{unit}")
    if t.zero_regression:
        parts.append("no regression of " + ", ".join(t.required_scores or ("any required score",)))
    return ", ".join(parts)


def _span(values: Any) -> str:
    vs = list(values)
    return f"{min(vs)}..{max(vs)}" if vs else "-"

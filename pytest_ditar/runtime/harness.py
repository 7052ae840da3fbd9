"""Candidate code on both sides of the worker boundary.

Worker side (`worker_main` calls these; candidate code runs here): import the candidate package,
build it, keep library noise down. Judge side: specs, fixed batching, one batch through a worker
with its outputs checked. Nothing here times a lane (`runtime.lanes`) or talks to pytest.
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib
import importlib.util
import os
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence, cast

import numpy as np

from pytest_ditar.config.suite import CorpusItem, Suite
from pytest_ditar.core.errors import CandidateError, ConfigError
from pytest_ditar.core.outputs import ItemOutput
from pytest_ditar.hardware.fingerprint import cuda_device_count
from pytest_ditar.interface import PipelineSpec, Request

if TYPE_CHECKING:
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec


def pick_device(requested: str | None = None) -> str:
    if requested:
        return requested
    return "cuda" if cuda_device_count() else "cpu"


def make_spec(suite: Suite, model_dir: Path, device: str) -> PipelineSpec:
    p = suite.pipeline
    return PipelineSpec(model_dir=model_dir, device=device, dtype=p.dtype_for(device), scheduler=p.scheduler,
                        guidance=p.guidance, resolution=p.resolution)


def classify_exception(exc: BaseException) -> CandidateError:
    if isinstance(exc, CandidateError):
        return exc
    name = type(exc).__name__
    text = str(exc).splitlines()[0] if str(exc) else ""
    if "OutOfMemory" in name or "out of memory" in text.lower():
        return CandidateError("oom", text[:200])
    return CandidateError("exception", f"{name}: {text[:300]}")


WHERE_MAX = 300  # characters of a frame's text that travel to the judge (one line of the reason)


def candidate_frames(exc: BaseException | None, candidate_dir: Path | None) -> list[str]:
    """The candidate's own frames in `exc`'s traceback, outermost first, each as
    "mutable/pipeline.py:57 in generate": relative to the candidate package's parent (the project
    root, or a champion's worktree), which is where its author looks. Where `exc` holds none (a
    wrapped error: build_candidate re-raises as a CandidateError), its cause, then its context,
    is searched. A SyntaxError in a candidate file has no frame there, only its line: that is named."""
    if candidate_dir is None:
        return []
    root = Path(candidate_dir).resolve()
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        frames = [f"{rel}:{fs.lineno} in {fs.name}" for fs in traceback.extract_tb(exc.__traceback__)
                  if (rel := _under(fs.filename, root))]
        if isinstance(exc, SyntaxError) and exc.filename and (rel := _under(exc.filename, root)):
            frames.append(f"{rel}:{exc.lineno}")
        if frames:
            return [f[:WHERE_MAX] for f in frames]
        exc = exc.__cause__ or exc.__context__
    return []


def frame_text(text: Any) -> str | None:
    """Judge side: a worker's `where` as the reason may carry it: one line of at most WHERE_MAX
    characters, or None. The worker runs candidate code, so the field may hold anything."""
    if not isinstance(text, str) or not text.strip():
        return None
    return " ".join(text.split())[:WHERE_MAX]


def _under(filename: str, root: Path) -> str | None:
    """`filename` as "<package>/<path inside it>" when it lies in the package `root`, else None."""
    try:
        return (Path(root.name) / Path(filename).resolve().relative_to(root)).as_posix()
    except (ValueError, OSError):
        return None


def require_pipeline(candidate_dir: Path) -> Path:
    """The resolved candidate directory, or a one-line ConfigError when it holds no pipeline.py."""
    candidate_dir = Path(candidate_dir).resolve()
    if not (candidate_dir / "pipeline.py").is_file():
        raise ConfigError(f"{candidate_dir}: no pipeline.py (the candidate package must define pipeline.build(spec))")
    return candidate_dir


def load_candidate_module(candidate_dir: Path):
    """Import `<candidate_dir>/pipeline.py` as a package under a unique name.

    A unique name per directory keeps the candidate's modules apart from anything else named
    `pipeline` on the worker's path.
    """
    candidate_dir = require_pipeline(candidate_dir)
    init = candidate_dir / "__init__.py"
    name = "ditar_candidate_" + hashlib.sha1(str(candidate_dir).encode()).hexdigest()[:10]
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]  # always import fresh: the code on disk is what is judged
    # a .py file's location: always a spec, with a source loader
    spec = cast("ModuleSpec", importlib.util.spec_from_file_location(
        name, init if init.is_file() else candidate_dir / "pipeline.py",
        submodule_search_locations=[str(candidate_dir)]))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    cast("Loader", spec.loader).exec_module(module)
    return importlib.import_module(name + ".pipeline")


def build_candidate(candidate_dir: Path, spec: PipelineSpec) -> Any:
    """Worker side: import the candidate package and build it (the judge enforces the timeout)."""
    quiet_libraries()
    try:
        module = load_candidate_module(candidate_dir)
        if not hasattr(module, "build"):
            raise CandidateError("exception", f"{candidate_dir}/pipeline.py defines no build(spec)")
        return module.build(spec)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - every candidate failure is a verdict, not a traceback
        raise classify_exception(exc) from exc


def quiet_libraries() -> None:
    """Keep diffusers' info logs and progress bars out of output that an agent has to read."""
    import warnings

    from diffusers.utils import logging as dlog

    dlog.set_verbosity_error()
    dlog.disable_progress_bar()
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"diffusers\..*")
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"diffusers\..*")


def batches(items: Sequence[CorpusItem], suite: Suite, batch: int) -> list[list[CorpusItem]]:
    """Fixed batching by corpus order and step count, so an item's batch mates never depend on selection."""
    groups: dict[int, list[CorpusItem]] = {}
    for it in items:
        groups.setdefault(suite.steps_for(it), []).append(it)
    out: list[list[CorpusItem]] = []
    for group in groups.values():
        out.extend(group[i:i + batch] for i in range(0, len(group), batch))
    return out


def run_batch(worker: Any, items: Sequence[CorpusItem], suite: Suite, timeout_s: float | None) -> list[ItemOutput]:
    """Judge side: one fixed batch through a worker (runtime.worker.CandidateWorker), outputs checked."""
    req = Request(labels=tuple(it.label for it in items), seeds=tuple(it.seed for it in items),
                  steps=suite.steps_for(items[0]))
    out = worker.generate(req, timeout_s)
    _check_shapes(out.latents, out.images, len(items))
    return [ItemOutput(it.id, out.latents[i], out.images[i], out.seconds / len(items)) for i, it in enumerate(items)]


def _check_shapes(latents: np.ndarray, images: np.ndarray, n: int) -> None:
    if latents.ndim != 4 or latents.shape[0] != n:
        raise CandidateError("exception",
                             f"candidate returned latents of shape {latents.shape}, expected [{n}, C, h, w]")
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[0] != n or images.shape[-1] != 3:
        raise CandidateError("exception", f"candidate returned images {images.dtype}{list(images.shape)}, "
                                          f"expected uint8 [{n}, H, W, 3]")


def pin_to_current_cpu() -> set[int] | None:
    """Fix this thread to the core it is on (no migration between kernel launches); returns the
    old mask to restore, or None where pinning is not possible."""
    cpu = _current_cpu()
    return None if cpu is None else pin_to_cpu(cpu)


def pin_to_cpu(cpu: int) -> set[int] | None:
    """Fix this thread to `cpu`; returns the old mask to restore, or None where it cannot."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    try:
        old = os.sched_getaffinity(0)
        if cpu not in old:
            return None
        os.sched_setaffinity(0, {cpu})
        return old
    except OSError:
        return None


def quietest_cpu(sample_s: float = 0.05) -> int | None:
    """The core of this process's affinity set that was idle the most over a short sample of
    /proc/stat: where a CPU lane puts both of its sides, so neither gets a core of its own that
    a neighbour's load happens to share (on a busy 2-core box that placement alone ran one side
    2x slower for runs of rounds)."""
    import time

    def idle() -> dict[int, int]:
        out = {}
        for line in Path("/proc/stat").read_text().splitlines():
            name, *vals = line.split()
            if name.startswith("cpu") and name[3:].isdigit():
                out[int(name[3:])] = int(vals[3]) + int(vals[4])  # idle + iowait
        return out

    try:
        allowed = os.sched_getaffinity(0)
        a = idle()
        time.sleep(sample_s)
        b = idle()
    except (OSError, AttributeError, ValueError, IndexError):
        return None
    cands = [c for c in allowed if c in a and c in b]
    return max(cands, key=lambda c: (b[c] - a[c], -c)) if cands else None


def _current_cpu() -> int | None:
    try:  # field 39 of /proc/thread-self/stat: the CPU this thread last ran on
        return int(Path("/proc/thread-self/stat").read_text().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """No garbage-collector pause inside a timed round (the judge's side of a steady lane)."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()

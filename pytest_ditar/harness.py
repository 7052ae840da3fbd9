"""Runs a candidate pipeline: loading, per-item outputs, timeouts, device timing, peak memory."""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .errors import CandidateError, ConfigError
from .interface import PipelineSpec, Request
from .suite import CorpusItem, Suite


@dataclass
class ItemOutput:
    item_id: str
    latents: np.ndarray  # float32 [C, h, w]
    image: np.ndarray  # uint8 [H, W, 3]
    seconds: float = 0.0  # share of its batch's wall time


def pick_device(requested: str | None = None) -> str:
    if requested:
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def make_spec(suite: Suite, model_dir: Path, device: str) -> PipelineSpec:
    p = suite.pipeline
    return PipelineSpec(model_dir=model_dir, device=device, dtype=p.dtype_for(device), scheduler=p.scheduler,
                        guidance=p.guidance, resolution=p.resolution)


class _Timeout(BaseException):
    """BaseException so a candidate's broad `except Exception` cannot swallow the deadline."""


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Interrupt the candidate after `seconds` (main thread only; elsewhere no limit)."""
    import threading

    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum, frame):
        raise _Timeout()

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _Timeout:
        raise CandidateError("timeout", "", seconds=seconds) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def classify_exception(exc: BaseException) -> CandidateError:
    if isinstance(exc, CandidateError):
        return exc
    name = type(exc).__name__
    text = str(exc).splitlines()[0] if str(exc) else ""
    if "OutOfMemory" in name or "out of memory" in text.lower():
        return CandidateError("oom", text[:200])
    return CandidateError("exception", f"{name}: {text[:300]}")


def load_candidate_module(candidate_dir: Path):
    """Import `<candidate_dir>/pipeline.py` as a package under a unique name.

    A unique name per directory lets the champion (from a git worktree) and the candidate live
    in one process for interleaved timing.
    """
    candidate_dir = candidate_dir.resolve()
    init = candidate_dir / "__init__.py"
    if not (candidate_dir / "pipeline.py").is_file():
        raise ConfigError(f"{candidate_dir}: no pipeline.py (the candidate package must define pipeline.build(spec))")
    name = "ditar_candidate_" + hashlib.sha1(str(candidate_dir).encode()).hexdigest()[:10]
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]  # always import fresh: the code on disk is what is judged
    spec = importlib.util.spec_from_file_location(name, init if init.is_file() else candidate_dir / "pipeline.py",
                                                  submodule_search_locations=[str(candidate_dir)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return importlib.import_module(name + ".pipeline")


def build_candidate(candidate_dir: Path, spec: PipelineSpec, timeout_s: float | None = None) -> Any:
    quiet_libraries()
    try:
        with deadline(timeout_s):
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
    out = []
    for group in groups.values():
        out.extend(group[i:i + batch] for i in range(0, len(group), batch))
    return out


def run_batch(candidate: Any, items: Sequence[CorpusItem], suite: Suite, timeout_s: float | None) -> list[ItemOutput]:
    req = Request(labels=tuple(it.label for it in items), seeds=tuple(it.seed for it in items),
                  steps=suite.steps_for(items[0]))
    t0 = time.perf_counter()
    try:
        with deadline(timeout_s):
            gen = candidate.generate(req)
            latents = _to_numpy(gen.latents).astype(np.float32)
            images = np.asarray(gen.images)
    except Exception as exc:  # noqa: BLE001
        raise classify_exception(exc) from exc
    dt = time.perf_counter() - t0
    _check_shapes(latents, images, len(items))
    return [ItemOutput(it.id, latents[i], images[i], dt / len(items)) for i, it in enumerate(items)]


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        return x.detach().float().cpu().numpy()
    return np.asarray(x)


def _check_shapes(latents: np.ndarray, images: np.ndarray, n: int) -> None:
    if latents.ndim != 4 or latents.shape[0] != n:
        raise CandidateError("exception", f"candidate returned latents of shape {latents.shape}, expected [{n}, C, h, w]")
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[0] != n or images.shape[-1] != 3:
        raise CandidateError("exception", f"candidate returned images {images.dtype}{list(images.shape)}, expected uint8 [{n}, H, W, 3]")


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def device_timer(device: str) -> Callable[[], float]:
    """A clock that waits for queued device work first, so a lap measures work, not launches."""
    def clock() -> float:
        synchronize(device)
        return time.perf_counter()

    return clock


def _current_cpu() -> int | None:
    try:  # field 39 of /proc/thread-self/stat: the CPU this thread last ran on
        return int(Path("/proc/thread-self/stat").read_text().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def steady_host(pin_cpu: bool = False) -> Iterator[None]:
    """Quiet the host side of a timed lane: no garbage-collector pauses inside a round and,
    with `pin_cpu`, the launching thread fixed to the core it is on (no migrations between
    kernel launches). Both are restored afterwards."""
    import gc

    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    old_mask = None
    if pin_cpu and hasattr(os, "sched_setaffinity"):
        cpu = _current_cpu()
        try:
            old_mask = os.sched_getaffinity(0)
            if cpu is not None and cpu in old_mask:
                os.sched_setaffinity(0, {cpu})
            else:
                old_mask = None
        except OSError:
            old_mask = None
    try:
        yield
    finally:
        if old_mask is not None:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, old_mask)
        if was_enabled:
            gc.enable()


@dataclass
class MemoryPeak:
    allocated_gib: float | None
    reserved_gib: float | None


@contextlib.contextmanager
def track_peak_memory(device: str) -> Iterator[MemoryPeak]:
    peak = MemoryPeak(None, None)
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    try:
        yield peak
    finally:
        if device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(device)
            peak.allocated_gib = torch.cuda.max_memory_allocated(device) / 2**30
            peak.reserved_gib = torch.cuda.max_memory_reserved(device) / 2**30


_FLAG_PATHS = ("backends.cuda.matmul.allow_tf32", "backends.cudnn.allow_tf32", "backends.cudnn.benchmark",
               "backends.cudnn.deterministic", "backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
               "backends.cuda.matmul.allow_bf16_reduced_precision_reduction")


class Isolated:
    """Wraps a candidate with the torch global flags it set while building, re-applied before
    each call, so champion and candidate can share one process without sharing TF32 & co."""

    def __init__(self, candidate: Any):
        import torch

        self.candidate = candidate
        self.flags = {p: _get(torch, p) for p in _FLAG_PATHS}
        self.precision = torch.get_float32_matmul_precision()

    def apply(self) -> None:
        import torch

        for p, v in self.flags.items():
            _set(torch, p, v)
        torch.set_float32_matmul_precision(self.precision)

    def generate(self, request: Request) -> Any:
        self.apply()
        return self.candidate.generate(request)


def _get(root: Any, path: str) -> Any:
    for part in path.split("."):
        root = getattr(root, part)
    return root


def _set(root: Any, path: str, value: Any) -> None:
    *head, last = path.split(".")
    for part in head:
        root = getattr(root, part)
    setattr(root, last, value)


def default_torch_flags() -> None:
    """Reset the flags a candidate may have changed to torch's defaults before building the next."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = False
    torch.set_float32_matmul_precision("highest")

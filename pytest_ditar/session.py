"""One run's state: config, suite, device, tag, the candidate and everything it produced."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import gitops
from .config import Config, load_config
from .errors import CandidateError
from .harness import (Isolated, ItemOutput, batches, build_candidate, default_torch_flags, make_spec, pick_device,
                      run_batch)
from .quality import ContractResult
from .suite import CorpusItem, Suite, load_suite
from .timings import PhaseClock


def resolve_tag(cfg: Config, explicit: str | None = None) -> str:
    """The session tag: explicit > DITAR_TAG > research branch suffix > sanitized branch name."""
    tag = explicit or os.environ.get("DITAR_TAG")
    if not tag:
        branch = gitops.state(cfg.root).branch or "default"
        tag = branch[len(cfg.branch_prefix):] if branch.startswith(cfg.branch_prefix) else branch
    return re.sub(r"[^A-Za-z0-9._-]", "_", tag)


@dataclass
class DitarSession:
    cfg: Config
    suite: Suite
    tag: str
    device: str
    cls: str = "exact"  # the class this run is judged under (cumulative for gated runs)
    candidate: Any = None
    candidate_error: CandidateError | None = None
    outputs: dict[str, ItemOutput] = field(default_factory=dict)
    quality: dict[str, ContractResult] = field(default_factory=dict)
    lanes: dict[str, Any] = field(default_factory=dict)
    errors: list[CandidateError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _model_dir: Path | None = None
    _baseline: Any = None
    _run_dir: Path | None = None
    _threads_set: bool = False
    _fingerprint: Any = None
    _built: dict = field(default_factory=dict)
    _semantic: Any = None  # semantic.SessionScores: evaluators built once per session + score cache
    clock: PhaseClock = field(default_factory=PhaseClock)  # where this run's wall time goes

    @classmethod
    def open(cls, config_path: str | Path, tag: str | None = None, device: str | None = None) -> "DitarSession":
        cfg = load_config(config_path)
        suite = load_suite(cfg.suite_dir)
        return cls(cfg=cfg, suite=suite, tag=resolve_tag(cfg, tag), device=device or "auto")

    @property
    def state_dir(self) -> Path:
        return self.cfg.state_path / self.tag

    @property
    def baseline_dir(self) -> Path:
        return self.state_dir / "baseline"

    @property
    def champion_dir(self) -> Path:
        return self.state_dir / "champion"

    def run_dir(self) -> Path:
        """This run's log directory; kept on DISCARD/CRASH (state dirs are git-ignored)."""
        if self._run_dir is None:
            import time

            head = (gitops.state(self.cfg.root).head or "nohead")[:7]
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            d = self.state_dir / "runs" / f"{stamp}-{head}"
            n = 1
            while d.exists():
                n += 1
                d = self.state_dir / "runs" / f"{stamp}-{head}-{n}"
            d.mkdir(parents=True)
            self._run_dir = d
        return self._run_dir

    def resolved_device(self) -> str:
        if self.device == "auto":
            from .worktrees import bound_device

            # a tag bound with `dit-ar init --gpu N` runs on cuda:N (when CUDA is there)
            self.device = bound_device(self.state_dir) or pick_device(None)
        if self.device == "cpu" and not self._threads_set:
            self._threads_set = True
            import torch

            # One intra-op thread on CPU: toy-sized ops gain nothing from a pool, and a pool
            # that spin-waits against other processes turns timing noise into 100x outliers.
            torch.set_num_threads(int(os.environ.get("DITAR_CPU_THREADS", "1")))
        return self.device

    def fingerprint(self):
        """The device's hardware fingerprint, collected once per session (NVML and torch queries)."""
        if self._fingerprint is None:
            from .hardware import collect

            self._fingerprint = collect(self.resolved_device())
        return self._fingerprint

    def model_dir(self) -> Path:
        if self._model_dir is None:
            from .models import resolve_model_dir

            self._model_dir = resolve_model_dir(self.suite)
        return self._model_dir

    def baseline(self):
        if self._baseline is None:
            from .snapshot import load_snapshot

            self._baseline = load_snapshot(self.baseline_dir, "baseline")
        return self._baseline

    def get_candidate(self) -> Any:
        """Build the candidate once per session; a failure is remembered, not retried."""
        if self.candidate_error is not None:
            raise self.candidate_error
        if self.candidate is None:
            spec = make_spec(self.suite, self.model_dir(), self.resolved_device())
            try:
                default_torch_flags()
                with self.clock.span("build.candidate"):
                    self.candidate = Isolated(build_candidate(self.cfg.candidate_path, spec, self.cfg.item_timeout_s))
            except CandidateError as exc:
                self.candidate_error = exc
                self.errors.append(exc)
                raise
        return self.candidate

    def output_for(self, item: CorpusItem) -> ItemOutput:
        """Generate the fixed batch that holds `item` (once), then serve it from the cache."""
        if item.id not in self.outputs:
            candidate = self.get_candidate()
            group = next(b for b in batches(self.suite.corpus, self.suite, self.suite.pipeline.batch)
                         if any(it.id == item.id for it in b))
            try:
                with self.clock.span("quality.generate"):
                    outs = run_batch(candidate, group, self.suite, self.cfg.item_timeout_s)
                for out in outs:
                    self.outputs[out.item_id] = out
            except CandidateError as exc:
                self.errors.append(exc)
                if exc.kind == "timeout":
                    self.candidate_error = exc  # a hung candidate is not run again this session
                raise
        return self.outputs[item.id]

    def semantic_scores(self, item: CorpusItem, cand: ItemOutput, base: ItemOutput) -> dict[str, float] | None:
        """CLIP/LPIPS scores for the quality contract when this run's class needs them (batched)."""
        from .semantic import session_scores, wanted

        if not wanted(self):
            return None
        with self.clock.span("semantic"):  # only runs that score book firewall time (loading included)
            return session_scores(self, item, cand, base)

    def build_at_commit(self, commit: str, phase: str = "build.worktree") -> Any:
        """Build the candidate package of `commit` from a worktree under the state dir."""
        wt = self.state_dir / "worktrees" / commit[:12]
        with self.clock.span(phase):  # the checkout counts too; build_from books the build itself
            if not (wt / self.cfg.candidate_dir).is_dir():
                wt.parent.mkdir(parents=True, exist_ok=True)
                gitops.add_worktree(self.cfg.root, wt, commit)
        return self.build_from(wt / self.cfg.candidate_dir, phase)

    def build_from(self, candidate_dir: Path, phase: str = "build.worktree") -> Any:
        """Build another pipeline (the champion or the baseline, from a git worktree) in this process.

        A worktree is pinned to one commit, so one build per directory serves both the perf
        lanes' champion and the holdout's baseline when they are the same commit.
        """
        key = Path(candidate_dir).resolve()
        if key not in self._built:
            spec = make_spec(self.suite, self.model_dir(), self.resolved_device())
            default_torch_flags()
            with self.clock.span(phase):  # booked to the phase that needed it (perf, holdout)
                self._built[key] = Isolated(build_candidate(candidate_dir, spec, self.cfg.item_timeout_s))
            default_torch_flags()
        return self._built[key]

"""One run's state: config, suite, device, tag, the candidate and everything it produced."""
from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_ditar.config.project import Config, load_config
from pytest_ditar.config.suite import CorpusItem, Suite, load_suite
from pytest_ditar.core.errors import CandidateError, ConfigError
from pytest_ditar.core.outputs import ItemOutput
from pytest_ditar.core.quality import ContractResult
from pytest_ditar.core.timings import PhaseClock
from pytest_ditar.core.vocabulary import ENV_CONFIG, ENV_CPU_THREADS, ENV_TAG
from pytest_ditar.loop.tags import resolve_tag
from pytest_ditar.runtime.harness import batches, make_spec, pick_device, require_pipeline, run_batch
from pytest_ditar.runtime.lanes import LaneResult
from pytest_ditar.runtime.worker import CandidateWorker
from pytest_ditar.store import shards
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.vcs import repo as gitops

if TYPE_CHECKING:
    from pytest_ditar.hardware.fingerprint import Fingerprint
    from pytest_ditar.runtime.semantic import SessionScores
    from pytest_ditar.store.snapshot import Snapshot


@dataclass
class DitarSession:
    cfg: Config
    suite: Suite
    tag: str
    device: str
    cls: str = "exact"  # the class this run is judged under (cumulative for gated runs)
    candidate: CandidateWorker | None = None
    candidate_error: CandidateError | None = None
    outputs: dict[str, ItemOutput] = field(default_factory=dict)
    quality: dict[str, ContractResult] = field(default_factory=dict)
    lanes: dict[str, LaneResult] = field(default_factory=dict)
    errors: list[CandidateError] = field(default_factory=list)
    _model_dir: Path | None = None
    _baseline: Snapshot | None = None
    _run_dir: Path | None = None
    _fingerprint: Fingerprint | None = None
    # (candidate dir, name) -> its worker (one process each)
    _workers: dict[tuple[Path, str], CandidateWorker] = field(default_factory=dict)
    _worker_logs: Path | None = None
    _scratch: Path | None = None  # the workers' working directories: private, outside the project
    # worktree -> its file stamps when checked against its commit
    _worktrees: dict[Path, dict[str, tuple[int, int]]] = field(default_factory=dict)
    worktree_root: Path | None = None  # where commits are checked out; None: the state dir's worktrees/
    beside_champion: bool = False  # a guard: the working tree is timed beside the champion's build, HEAD or not
    memory_budget_gib: float | None = None  # set by a gated run: each worker's allocator is capped at it
    _semantic: SessionScores | None = None  # evaluators built once per session + score cache
    clock: PhaseClock = field(default_factory=PhaseClock)  # where this run's wall time goes
    holdout_reference: Any = None  # loop.holdout.Reference: the baseline's fresh outputs, made early
    # set once the candidate is recorded as the champion (a KEEP, a baseline): close() adds what it
    # compiled to the tag's compile cache (runtime.compiled); the line saying so, once added
    keep_compiled: bool = False
    compiled_note: str | None = None
    # Keys the stream of timed requests (core.requests); made when the run starts, recorded in
    # the run's summary only after the candidate has finished.
    request_secret: str = field(default_factory=lambda: secrets.token_hex(32))

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
        return TagPaths(self.state_dir).baseline

    def run_dir(self) -> Path:
        """This run's log directory; kept on DISCARD/CRASH (state dirs are git-ignored)."""
        if self._run_dir is None:
            self._run_dir = TagPaths(self.state_dir).new_run_dir(gitops.state(self.cfg.root).head)
        return self._run_dir

    def use_run_dir(self, path: Path) -> None:
        """Log into a run directory another process made (the xdist controller's, phase 1's)."""
        self._run_dir = Path(path)

    def absorb(self, payload: dict[str, Any]) -> None:
        """Fold in what another process produced (an xdist worker's shard, phase 1's record)."""
        shards.merge(self, [payload])
        if payload.get("clock"):
            self.clock.absorb(payload["clock"])  # the run's time line covers every worker

    def resolved_device(self) -> str:
        if self.device == "auto":
            from pytest_ditar.loop.worktrees import bound_device

            # a tag bound with `dit-ar init --gpu N` runs on cuda:N (when CUDA is there)
            self.device = bound_device(self.state_dir) or pick_device(None)
        return self.device

    def fingerprint(self):
        """The device's hardware fingerprint, collected once per session.

        It comes from the candidate's worker (started, not yet built): the judge itself never
        imports torch nor opens a CUDA context, so nothing of it sits on the GPU it times."""
        if self._fingerprint is None:
            from pytest_ditar.core.errors import ConfigError
            from pytest_ditar.hardware.fingerprint import Fingerprint, collect

            try:
                info = self.worker(self.cfg.candidate_path, "candidate").hello()
                self._fingerprint = Fingerprint.from_dict(info["fingerprint"])
            except ConfigError:  # no candidate package to start a worker for: ask here
                self._fingerprint = collect(self.resolved_device())
        return self._fingerprint

    def model_dir(self) -> Path:
        if self._model_dir is None:
            from pytest_ditar.runtime.models import resolve_model_dir

            self._model_dir = resolve_model_dir(self.suite)
        return self._model_dir

    def baseline(self):
        if self._baseline is None:
            from pytest_ditar.store.snapshot import load_snapshot

            self._baseline = load_snapshot(self.baseline_dir, "baseline")
        return self._baseline

    def worker(self, candidate_dir: Path, name: str, ranks: int = 1) -> CandidateWorker:
        """The (started) worker process for the pipeline in `candidate_dir`, one per directory and
        name per session (a second name on one directory is a second build: the champion's twin);
        `ranks` > 1: a group of that many ranks (runtime.group), for a multi-GPU lane."""
        if ranks > 1:
            name = f"{name}-{ranks}ranks"
        key = (Path(candidate_dir).resolve(), name)
        if key not in self._workers:
            require_pipeline(key[0])  # a missing package is a usage error, before any process starts
            import tempfile

            if self._worker_logs is None:
                self._worker_logs = Path(tempfile.mkdtemp(prefix="ditar-workers-"))
                self._scratch = Path(tempfile.mkdtemp(prefix="ditar-scratch-"))
            cwd = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self._scratch))
            spec = make_spec(self.suite, self.model_dir(), self.resolved_device())
            # The candidate compiles into a cache of its own: the champion's, seen through an
            # overlay whose writes stay in its sandbox; the champion's side (its worktree's
            # workers: champion, twin, holdout baseline) writes the champion's cache itself.
            champion_side = key[0] != self.cfg.candidate_path.resolve()
            kind: Any = CandidateWorker
            if ranks > 1:
                from functools import partial

                from pytest_ditar.runtime.group import GroupWorker

                kind = partial(GroupWorker, ranks=ranks)
            w = kind(name, key[0], spec, log_path=self._worker_logs / f"{name}.log",
                     memory_budget_gib=self.memory_budget_gib, cwd=cwd, env=self.worker_env(cwd),
                     cpu_threads=self.worker_threads(spec.device),
                     build_timeout_s=self.cfg.build_timeout_s, sandboxed=self.cfg.sandboxed,
                     compile_cache=self.compile_cache(), compile_cache_writable=champion_side,
                     keep_compile_writes=not champion_side)
            self._workers[key] = w.start(fingerprint=True)
        return self._workers[key]

    @staticmethod
    def worker_threads(device: str) -> int:
        """Each worker's torch intra-op threads on `device` (runtime.worker.worker_threads)."""
        from pytest_ditar.runtime.worker import worker_threads

        try:
            return worker_threads(device, len(os.sched_getaffinity(0)), os.environ.get(ENV_CPU_THREADS))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def worker_env(self, cwd: Path) -> dict[str, str]:
        """The judge's environment less what names the state directory or the judge's own settings,
        plus the compile cache's variables. Only a courtesy: the candidate's package lies in the
        project, beside the state directory."""
        state = str(self.cfg.state_path.resolve())
        env = {k: v for k, v in os.environ.items() if state not in v and k not in (ENV_CONFIG, ENV_TAG, "OLDPWD")}
        env["PWD"] = str(cwd)
        if env.get("PYTHONPATH"):  # the worker starts elsewhere: relative entries must keep their meaning
            env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) if p else p
                                                for p in env["PYTHONPATH"].split(os.pathsep))
        # torch.compile's caches, one folder per tag and device stack: the champion's side (the
        # champion, its twin, the holdout's baseline) writes it, the candidate reads it through an
        # overlay of its own sandbox (worker(); runtime.sandbox), so a rebuilt champion compiles
        # once per machine and the candidate starts from what the champion compiled. Added after the
        # filter on purpose: this names the state directory, which the sandbox shows read-only.
        cache = self.compile_cache()
        env.update(TORCHINDUCTOR_CACHE_DIR=str(cache), TRITON_CACHE_DIR=str(cache / "triton"),
                   TORCHINDUCTOR_FX_GRAPH_CACHE="1", TORCHINDUCTOR_AUTOGRAD_CACHE="1")
        return env

    def compile_cache(self) -> Path:
        """torch.compile's cache of this tag and device stack: the champion's (loop.session.worker)."""
        from pytest_ditar.hardware.cachekey import device_key

        return TagPaths(self.state_dir.resolve()).compile_cache(device_key(self.resolved_device()))

    def sandbox_refusal(self) -> str | None:
        """Why a gated run cannot sandbox its workers here (runtime.sandbox.check), or None; always
        None when the project owner turned the sandbox off."""
        if not self.cfg.sandboxed:
            return None
        from pytest_ditar.runtime.sandbox import check

        return check()

    def start_candidate(self, ranks: int = 1) -> None:
        """Send the candidate's build without waiting: it builds while the judge does other work
        (`ranks` > 1: its group for a multi-GPU lane)."""
        if ranks > 1 or (self.candidate is None and self.candidate_error is None):
            w = self.worker(self.cfg.candidate_path, "candidate", ranks)
            w.memory_budget_gib = self.memory_budget_gib
            w.request_build()

    def get_candidate(self, ranks: int = 1) -> CandidateWorker:
        """The candidate's worker, built once per session; a failure is remembered, not retried.
        `ranks` > 1: the candidate's group for a multi-GPU lane (its own build, once per session)."""
        if ranks > 1:
            w = self.worker(self.cfg.candidate_path, "candidate", ranks)
            w.memory_budget_gib = self.memory_budget_gib
            with self.clock.span("build.candidate"):
                w.built(self.cfg.build_timeout_s)
            self.clock.built(w.name, w.build_s, w.build_detail)
            return w
        if self.candidate_error is not None:
            raise self.candidate_error
        if self.candidate is None:
            try:
                w = self.worker(self.cfg.candidate_path, "candidate")
                w.memory_budget_gib = self.memory_budget_gib
                with self.clock.span("build.candidate"):
                    self.candidate = w.built(self.cfg.build_timeout_s)
                self.clock.built(w.name, w.build_s, w.build_detail)
                from pytest_ditar.runtime import zygote

                self.clock.imports_s = float(zygote.imports_s() or 0.0)  # most of a CPU build's wait
                self.clock.zygote = zygote.state()
            except CandidateError as exc:
                self.candidate_error = exc
                self.errors.append(exc)
                raise
        return self.candidate

    def close(self) -> None:
        """Stop every worker (and whatever they started); keep their logs beside the run's when the
        run has a log directory."""
        for w in self._workers.values():  # all at once: each tears down its CUDA context in parallel
            w.ask_to_quit()
        if self.holdout_reference is not None:  # its worker, if still busy, was killed just now
            self.holdout_reference.join(10.0)
        for w in self._workers.values():
            w.close()
        self._add_compiled()
        if self._scratch is not None:
            import shutil

            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
        if self.worktree_root is not None:  # a guard's checkouts, outside the state dir: gone with the run
            import shutil

            from pytest_ditar.loop import worktrees

            worktrees.drop(self.cfg.root, list(self._worktrees))
            self._worktrees.clear()
            shutil.rmtree(self.worktree_root, ignore_errors=True)
        if self._worker_logs is not None:
            import shutil

            if self._run_dir is not None and any(self._worker_logs.iterdir()):
                # one folder per judge process: xdist workers and the decide phase share a run dir
                who = os.environ.get("PYTEST_XDIST_WORKER") or f"judge-{os.getpid()}"
                from pytest_ditar.runtime import logs

                logs.keep_all(self._worker_logs, self._run_dir / "workers" / who)  # each capped (runtime.logs)
            shutil.rmtree(self._worker_logs, ignore_errors=True)
            self._worker_logs = None

    def _add_compiled(self) -> None:
        """After its processes have ended: what a kept candidate compiled goes into the tag's compile
        cache (only names still free there), so the new champion's next build finds it; a discarded
        candidate's writes are dropped. A cache, never state: a failure is a note, not the run's."""
        from pytest_ditar.runtime import compiled

        writes = [(w, w.compile_writes) for w in self._workers.values() if w.compile_writes is not None]
        if self.keep_compiled and writes:
            cache = self.compile_cache()
            done, room = compiled.Promoted(), compiled.MAX_BYTES - compiled.size_of(cache)
            for _w, folder in writes:
                try:
                    done += compiled.promote(folder / "upper", cache, room - done.bytes)
                except OSError as exc:
                    self.compiled_note = f"ditar: compile cache: the kept candidate's compilations not added ({exc})"
            self.compiled_note = done.note(cache) or self.compiled_note
        for w, _folder in writes:
            self._drop_compile_writes(w)

    @staticmethod
    def _drop_compile_writes(w: CandidateWorker) -> None:
        """Delete what a worker's read-only compile cache took in (runtime.compiled), once it has ended."""
        if w.compile_writes is not None:
            from pytest_ditar.runtime import compiled

            compiled.remove(w.compile_writes)
            w.compile_writes = None

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

    def semantic_scores(self, item: CorpusItem, cand: ItemOutput,
                        base: ItemOutput) -> dict[str, float | None] | None:
        """CLIP/LPIPS scores for the quality contract when this run's class needs them (batched)."""
        from pytest_ditar.runtime.semantic import session_scores, wanted

        if not wanted(self):
            return None
        with self.clock.span("semantic"):  # only runs that score book firewall time (loading included)
            return session_scores(self, item, cand, base)

    def build_at_commit(self, commit: str, phase: str = "build.worktree", start_only: bool = False,
                        ranks: int = 1) -> CandidateWorker:
        """The candidate package of `commit`, from a worktree under the state dir, built in its worker.

        A worktree is pinned to one commit, so one worker serves both the perf lanes' champion and
        the holdout's baseline when they are the same commit. `start_only` sends the build and
        returns at once, so it overlaps the candidate's.

        The candidate runs beside it and could edit that worktree before its worker imports it, so
        the worktree is checked to be its commit first, and unchanged once the build is done."""
        return self._build_in_worktree(commit, f"commit-{commit[:7]}", phase, start_only, ranks)

    def build_twin(self, commit: str, phase: str = "perf.build_twin", start_only: bool = False,
                   ranks: int = 1) -> CandidateWorker:
        """A second, independent build of `commit`'s worktree (a process of its own): the objective
        lane's second reference (loop.lanes)."""
        return self._build_in_worktree(commit, f"twin-{commit[:7]}", phase, start_only, ranks)

    def _build_in_worktree(self, commit: str, name: str, phase: str, start_only: bool,
                           ranks: int = 1) -> CandidateWorker:
        from pytest_ditar.loop import worktrees

        wt = (self.worktree_root or self.state_dir / "worktrees") / commit[:12]
        with self.clock.span(phase):  # the checkout and the wait count to the phase that needed it
            if wt not in self._worktrees:
                try:
                    self._worktrees[wt] = worktrees.pristine(self.cfg.root, wt, commit)
                except CandidateError as exc:  # changed again as it was checked out afresh: a CRASH
                    self.errors.append(exc)
                    raise
            w = self.worker(wt / self.cfg.candidate_dir, name, ranks)
            w.memory_budget_gib = self.memory_budget_gib
            if start_only:
                w.request_build()
                return w
            w.built(self.cfg.build_timeout_s)
            self.clock.built(w.name, w.build_s, w.build_detail)
            err = self.check_worktrees()
            if err is not None:
                raise err
            return w

    def retire(self, worker: CandidateWorker) -> None:
        """Stop one worker now (the twin, once measured: its device memory is the candidate's)."""
        for key, w in list(self._workers.items()):
            if w is worker:
                del self._workers[key]
                w.close()
                self._drop_compile_writes(w)  # a retired worker is never the one kept

    def check_worktrees(self) -> CandidateError | None:
        """A CRASH error, recorded once in `errors`, when a file of a worktree this run builds from
        changed since it was checked against its commit; None while all are intact."""
        from pytest_ditar.loop import worktrees

        for wt, stamps in self._worktrees.items():
            paths = worktrees.changed(wt, stamps)
            if paths:
                what = "champion worktree modified during the run"
                err = CandidateError("exception", f"{what}: {', '.join(paths[:5])}")
                if not any(e.message.startswith(what) for e in self.errors):
                    self.errors.append(err)
                return err
        return None

"""One run's state: config, suite, device, tag, the candidate and everything it produced."""
from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_ditar.config.project import Config, load_config
from pytest_ditar.config.suite import CorpusItem, Suite, load_suite
from pytest_ditar.core.decision import LaneOutcome
from pytest_ditar.core.errors import CandidateError, ConfigError
from pytest_ditar.core.outputs import ItemOutput
from pytest_ditar.core.quality import ContractResult
from pytest_ditar.core.timings import PhaseClock
from pytest_ditar.core.vocabulary import ENV_CONFIG, ENV_CPU_THREADS, ENV_TAG
from pytest_ditar.hardware.cachekey import device_key
from pytest_ditar.hardware.fingerprint import Fingerprint, collect
from pytest_ditar.loop import roles
from pytest_ditar.loop.tags import resolve_tag
from pytest_ditar.loop.worktrees import bound_device
from pytest_ditar.runtime import boxdir, compiled, logs, zygote
from pytest_ditar.runtime.group import GroupWorker
from pytest_ditar.runtime.harness import batches, make_spec, pick_device, require_pipeline, run_batch
from pytest_ditar.runtime.lanes import LaneResult
from pytest_ditar.runtime.models import resolve_model_dir
from pytest_ditar.runtime.sandbox import check
from pytest_ditar.runtime.semantic import Evaluators, SessionScores, session_scores, wanted
from pytest_ditar.runtime.worker import CandidateWorker, worker_threads
from pytest_ditar.store import shards
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.snapshot import Snapshot, load_snapshot
from pytest_ditar.vcs import queries


@dataclass
class DitarSession:
    cfg: Config
    suite: Suite
    tag: str
    device: str
    judged_class: str = "exact"  # the class this run is judged under (cumulative for gated runs; loop.classes)
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
    # "candidate" or a commit -> its code as written for its workers (loop.roles)
    _code: dict[str, roles.Code] = field(default_factory=dict)
    _retired: list[CandidateWorker] = field(default_factory=list)  # stopped early (the twin): logs still kept
    _corpus_replayed: set[str] = field(default_factory=set)  # references that answered the corpus (corpus_through)
    beside_champion: bool = False  # a guard: the working tree is timed beside the champion's build, HEAD or not
    memory_budget_gib: float | None = None  # set by a gated run: each worker's allocator is capped at it
    _semantic: SessionScores | None = None  # evaluators built once per session + score cache
    clock: PhaseClock = field(default_factory=PhaseClock)  # where this run's wall time goes
    holdout_reference: Any = None  # loop.holdout.Reference: the baseline's fresh outputs, made early
    # set once the candidate is recorded as the champion (a KEEP, a baseline): close() adds what it
    # compiled to the tag's compile cache (runtime.compiled); the line saying so, once added
    keep_compiled: bool = False
    compiled_note: str | None = None
    # a reference (the champion, its twin) that could not be built or timed: the run is refused
    # naming it (loop.lanes.LaneRunner), nothing charged to the candidate
    reference_error: str | None = None
    # Keys the stream of timed requests (core.requests); made when the run starts, recorded in
    # the run's summary only after the candidate has finished.
    request_secret: str = field(default_factory=lambda: secrets.token_hex(32))

    @classmethod
    def open(cls, config_path: str | Path, tag: str | None = None, device: str | None = None) -> "DitarSession":
        cfg = load_config(config_path)
        suite = load_suite(cfg.suite_dir)
        suite.check_objective(cfg.objective_lane, cfg.path)
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
            self._run_dir = TagPaths(self.state_dir).new_run_dir(queries.state(self.cfg.root).head)
        return self._run_dir

    def use_run_dir(self, path: Path) -> None:
        """Log into a run directory another process made (the xdist controller's, phase 1's)."""
        self._run_dir = Path(path)

    # ---- what the run settles, set through these methods (no other module writes a session) ----
    def judge_as(self, judged_class: str) -> None:
        """The class this run is judged under (a gated run's cumulative one)."""
        self.judged_class = judged_class

    def time_beside_champion(self) -> None:
        """Paired rounds against the champion's build even where the tree is its commit (a guard)."""
        self.beside_champion = True

    def cap_memory(self, gib: float | None) -> None:
        """Workers built from now on cap their allocator at `gib` (a gated run's target memory)."""
        self.memory_budget_gib = gib

    def keep_compilations(self) -> None:
        """The candidate is now the champion (a KEEP, a baseline): close() adds what it compiled to the
        tag's compile cache."""
        self.keep_compiled = True

    def hold_reference(self, reference: Any) -> None:
        """The baseline's fresh outputs for the holdout, made early (loop.holdout.Reference)."""
        self.holdout_reference = reference

    def refuse_reference(self, why: str) -> None:
        """A reference (the champion, its twin) could not be built or timed: the run is refused naming it."""
        self.reference_error = why

    def outcomes(self) -> list[LaneOutcome]:
        """Every lane's outcome judged so far, in the order the lanes ran."""
        return [lr.outcome for lr in self.lanes.values()]

    def lanes_dict(self) -> dict[str, dict[str, Any]]:
        """The run's lanes as summary.json, a champion's lanes.json and the verdict document hold them."""
        return {k: v.to_dict() for k, v in self.lanes.items()}

    def put_lane(self, res: LaneResult) -> None:
        """A lane's judged result (loop.lanes.judge made it)."""
        self.lanes[res.outcome.name] = res

    def semantic_cache(self) -> SessionScores | None:
        """The semantic evaluators and their score cache, built on first use, where this run's class
        needs them and they are configured; else None."""
        if not wanted(self):
            return None
        if self._semantic is None:
            self._semantic = SessionScores(Evaluators.load(self.cfg, self.resolved_device()))
        return self._semantic

    def absorb(self, payload: dict[str, Any]) -> None:
        """Fold in what another process produced (an xdist worker's shard, phase 1's record)."""
        self.quality, self.outputs, self.errors = shards.merged(self, [payload])
        if payload.get("clock"):
            self.clock.absorb(payload["clock"])  # the run's time line covers every worker

    def resolved_device(self) -> str:
        if self.device == "auto":
            # a tag bound with `dit-ar init --gpu N` runs on cuda:N (when CUDA is there)
            self.device = bound_device(self.state_dir) or pick_device(None)
        return self.device

    def fingerprint(self) -> Fingerprint:
        """The device's hardware fingerprint, collected once per session.

        It comes from the candidate's worker (started, not yet built): the judge itself never
        imports torch nor opens a CUDA context, so nothing of it sits on the GPU it times."""
        if self._fingerprint is None:
            try:
                info = self.worker(self.candidate_code(), "candidate").hello()
                self._fingerprint = Fingerprint.from_dict(info["fingerprint"])
            except ConfigError:  # no candidate package to start a worker for: ask here
                self._fingerprint = collect(self.resolved_device())
        return self._fingerprint

    def model_dir(self) -> Path:
        if self._model_dir is None:
            self._model_dir = resolve_model_dir(self.suite)
        return self._model_dir

    def baseline(self) -> Snapshot:
        if self._baseline is None:
            self._baseline = load_snapshot(self.baseline_dir, "baseline")
        return self._baseline

    def worker(self, code: Path, name: str, ranks: int = 1) -> CandidateWorker:
        """The (started) worker process for the package `code` (written by `candidate_code` or
        `commit_code`), one per package and name per session (a second name on one package is a
        second build: the champion's twin); `ranks` > 1: a group of that many ranks
        (runtime.group), for a multi-GPU lane. Every role's worker is made alike (runtime.boxdir):
        nothing it can observe but its code says which role it plays; only the candidate's
        compilations are ever kept (runtime.compiled)."""
        if ranks > 1:
            name = f"{name}-{ranks}ranks"
        key = (Path(code).resolve(), name)
        if key not in self._workers:
            require_pipeline(key[0])  # a missing package is a usage error, before any process starts
            cwd = boxdir.new("work")
            spec = make_spec(self.suite, self.model_dir(), self.resolved_device())
            kind: Any = CandidateWorker
            if ranks > 1:
                from functools import partial

                kind = partial(GroupWorker, ranks=ranks)
            w = kind(name, key[0], spec, log_path=boxdir.new("logs") / "worker.log",
                     memory_budget_gib=self.memory_budget_gib, cwd=cwd, env=self.worker_env(cwd),
                     cpu_threads=self.worker_threads(spec.device),
                     build_timeout_s=self.cfg.build_timeout_s, sandboxed=self.cfg.sandboxed,
                     compile_cache=self.compile_cache(), keep_compile_writes=name.startswith("candidate"),
                     masks=self.role_masks(), reads=(str(self.cfg.root.resolve()),))
            self._workers[key] = w.start(fingerprint=True)
        return self._workers[key]

    def candidate_code(self) -> Path:
        """The candidate's package as its worker imports it: HEAD's blobs of the mutable paths, or,
        where they differ from HEAD (`dit-ar try`, a guard of an edited tree), the working tree's
        regular files (loop.roles)."""
        if "candidate" not in self._code:
            require_pipeline(self.cfg.candidate_path)
            st = queries.state(self.cfg.root)
            under = self.cfg.mutable_paths
            dirty = any(roles.under_any(p, under) for p in st.dirty_paths)
            dest = boxdir.new("code")
            self._code["candidate"] = (roles.from_worktree(self.cfg.root, under, self.cfg.candidate_dir, dest)
                                       if dirty or not st.head else
                                       roles.from_commit(self.cfg.root, st.head, under, self.cfg.candidate_dir, dest))
        return self._code["candidate"].package

    def commit_code(self, commit: str) -> Path:
        """`commit`'s package as its worker imports it, written from its blobs (loop.roles)."""
        if commit not in self._code:
            self._code[commit] = roles.from_commit(self.cfg.root, commit, self.cfg.mutable_paths,
                                                   self.cfg.candidate_dir, boxdir.new("code"))
        return self._code[commit].package

    def role_masks(self) -> tuple[str, ...]:
        """What every worker's sandbox hides: the repository's git folder (its worktree's too), its
        mutable paths (the working tree is the candidate: a champion comparing itself with them
        would know its role) and the state directory."""
        root = self.cfg.root.resolve()
        hidden = [root / ".git", *(root / p.strip("/") for p in self.cfg.mutable_paths), self.cfg.state_path.resolve()]
        common = queries.git_dirs(root)
        return tuple(dict.fromkeys(str(p) for p in [*hidden, *common] if os.path.lexists(p)))

    @staticmethod
    def worker_threads(device: str) -> int:
        """Each worker's torch intra-op threads on `device` (runtime.worker.worker_threads)."""
        try:
            return worker_threads(device, len(os.sched_getaffinity(0)), os.environ.get(ENV_CPU_THREADS))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def worker_env(self, cwd: Path) -> dict[str, str]:
        """The judge's environment less what names the state directory, the judge's own settings or
        the moment (pytest's current test: a champion built during a test would see it), plus the
        compile cache's variables; the same for every role (runtime.boxdir)."""
        state = str(self.cfg.state_path.resolve())
        env = {k: v for k, v in os.environ.items()
               if state not in v and k not in (ENV_CONFIG, ENV_TAG, "OLDPWD", "PYTEST_CURRENT_TEST")}
        env["PWD"] = str(cwd)
        if env.get("PYTHONPATH"):  # the worker starts elsewhere: relative entries must keep their meaning
            env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) if p else p
                                                for p in env["PYTHONPATH"].split(os.pathsep))
        # torch.compile's caches, one folder per tag and device stack: the champion's side (the
        # champion, its twin, the holdout's baseline) writes it, the candidate reads it through an
        # overlay of its own sandbox (worker(); runtime.sandbox), so a rebuilt champion compiles
        # once per machine and the candidate starts from what the champion compiled. Added after the
        # filter on purpose: this names the state directory, which the sandbox shows read-only.
        cache = boxdir.CACHE if self.cfg.sandboxed else str(self.compile_cache())
        env.update(TORCHINDUCTOR_CACHE_DIR=cache, TRITON_CACHE_DIR=f"{cache}/triton",
                   TORCHINDUCTOR_FX_GRAPH_CACHE="1", TORCHINDUCTOR_AUTOGRAD_CACHE="1")
        return env

    def compile_cache(self) -> Path:
        """torch.compile's cache of this tag and device stack: the champion's (loop.session.worker)."""
        return TagPaths(self.state_dir.resolve()).compile_cache(device_key(self.resolved_device()))

    def sandbox_refusal(self) -> str | None:
        """Why a gated run cannot sandbox its workers here (runtime.sandbox.check), or None; always
        None when the project owner turned the sandbox off."""
        if not self.cfg.sandboxed:
            return None
        return check()

    def start_candidate(self, ranks: int = 1) -> None:
        """Send the candidate's build without waiting: it builds while the judge does other work
        (`ranks` > 1: its group for a multi-GPU lane)."""
        if ranks > 1 or (self.candidate is None and self.candidate_error is None):
            w = self.worker(self.candidate_code(), "candidate", ranks)
            w.cap_memory(self.memory_budget_gib)
            w.request_build()

    def get_candidate(self, ranks: int = 1) -> CandidateWorker:
        """The candidate's worker, built once per session; a failure is remembered, not retried.
        `ranks` > 1: the candidate's group for a multi-GPU lane (its own build, once per session)."""
        if ranks > 1:
            w = self.worker(self.candidate_code(), "candidate", ranks)
            w.cap_memory(self.memory_budget_gib)
            with self.clock.span("build.candidate"):
                w.built(self.cfg.build_timeout_s)
            self.clock.built(w.name, w.build_s, w.build_detail)
            return w
        if self.candidate_error is not None:
            raise self.candidate_error
        if self.candidate is None:
            try:
                w = self.worker(self.candidate_code(), "candidate")
                w.cap_memory(self.memory_budget_gib)
                with self.clock.span("build.candidate"):
                    self.candidate = w.built(self.cfg.build_timeout_s)
                self.clock.built(w.name, w.build_s, w.build_detail)
                self.clock.imported(float(zygote.imports_s() or 0.0), zygote.state())  # most of a CPU build's wait
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
        self._keep_logs()

    def _keep_logs(self) -> None:
        """Each worker's log (made under a name that says nothing of its role) beside the run's, under
        the role's name; one folder per judge process: xdist workers and the decide phase share a run dir."""
        if self._run_dir is None:
            return
        who = os.environ.get("PYTEST_XDIST_WORKER") or f"judge-{os.getpid()}"
        for w in [*self._workers.values(), *self._retired]:
            folder = w.log_path.parent
            for f in sorted(folder.iterdir()) if folder.is_dir() else []:
                own = f == w.log_path or f.name.startswith(f"{w.name}.")  # a group's rank logs carry its name
                dest = self._run_dir / "workers" / who / (f"{w.name}.log" if f == w.log_path
                                                          else f.name if own else f"{w.name}.{f.name}")
                dest.parent.mkdir(parents=True, exist_ok=True)
                logs.keep_capped(f, dest)  # each capped, the cut said (runtime.logs)

    def _add_compiled(self) -> None:
        """After its processes have ended: what a kept candidate compiled goes into the tag's compile
        cache (only names still free there), so the new champion's next build finds it; a discarded
        candidate's writes are dropped. A cache, never state: a failure is a note, not the run's."""
        writes = [(w, w.compile_writes) for w in self._workers.values() if w.compile_writes is not None]
        kept = [(w, folder) for w, folder in writes if w.keep_compile_writes]  # a reference's are never kept
        if self.keep_compiled and kept:
            cache = self.compile_cache()
            done, room = compiled.Promoted(), compiled.MAX_BYTES - compiled.size_of(cache)
            for _w, folder in kept:
                try:
                    done += compiled.promote(folder / "upper", cache, room - done.bytes)
                except OSError as exc:
                    self.compiled_note = f"ditar: compile cache: the kept candidate's compilations not added ({exc})"
            self.compiled_note = done.note(cache) or self.compiled_note
        for w, _folder in writes:
            w.drop_compile_writes()

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

    def corpus_through(self, worker: CandidateWorker) -> None:
        """`worker` has answered the corpus's fixed batches, in the candidate's order, once: the
        candidate through its quality phase (output_for), a reference (the champion, its twin) by
        the same requests, its outputs unused. So every role reaches its timed rounds with the same
        history of requests behind it (the role lives in the judge alone, runtime.boxdir); a
        champion counting what it was asked cannot tell it was never quality-checked."""
        if worker is self.candidate:
            for item in self.suite.corpus:
                self.output_for(item)
            return
        if worker.name in self._corpus_replayed:
            return
        self._corpus_replayed.add(worker.name)
        with self.clock.span("perf.reference_corpus"):
            for group in batches(self.suite.corpus, self.suite, self.suite.pipeline.batch):
                run_batch(worker, group, self.suite, self.cfg.item_timeout_s)

    def semantic_scores(self, item: CorpusItem, cand: ItemOutput,
                        base: ItemOutput) -> dict[str, float | None] | None:
        """CLIP/LPIPS scores for the quality contract when this run's class needs them (batched)."""
        if not wanted(self):
            return None
        with self.clock.span("semantic"):  # only runs that score book firewall time (loading included)
            return session_scores(self, item, cand, base)

    def build_at_commit(self, commit: str, phase: str = "build.worktree", start_only: bool = False,
                        ranks: int = 1, role: str = "commit") -> CandidateWorker:
        """The candidate package of `commit`, written from its blobs (commit_code), built in its
        worker: one per role, so the holdout's baseline never shares the champion's process (its
        fresh items would be a history of requests the candidate's side has not). `start_only`
        sends the build and returns at once, so it overlaps the candidate's."""
        return self._build_in_worktree(commit, f"{role}-{commit[:7]}", phase, start_only, ranks)

    def build_twin(self, commit: str, phase: str = "perf.build_twin", start_only: bool = False,
                   ranks: int = 1) -> CandidateWorker:
        """A second, independent build of `commit`'s worktree (a process of its own): the objective
        lane's second reference (loop.lanes)."""
        return self._build_in_worktree(commit, f"twin-{commit[:7]}", phase, start_only, ranks)

    def _build_in_worktree(self, commit: str, name: str, phase: str, start_only: bool,
                           ranks: int = 1) -> CandidateWorker:
        with self.clock.span(phase):  # writing the code and the wait count to the phase that needed it
            w = self.worker(self.commit_code(commit), name, ranks)
            w.cap_memory(self.memory_budget_gib)
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
                self._retired.append(w)
                w.close()
                w.drop_compile_writes()  # a retired worker is never the one kept

    def check_worktrees(self) -> CandidateError | None:
        """A CRASH error, recorded once in `errors`, when a file of the code written for a role this
        run builds changed since (read-only to every worker: only something outside the judge can);
        None while all are intact."""
        for code in self._code.values():
            paths = roles.changed(code)
            if paths:
                what = "role code modified during the run"
                err = CandidateError("exception", f"{what} ({code.source}): {', '.join(paths[:5])}")
                if not any(e.message.startswith(what) for e in self.errors):
                    self.errors.append(err)
                return err
        return None

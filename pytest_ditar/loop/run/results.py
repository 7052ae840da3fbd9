"""What a run produced, in one owner: quality results, the candidate's errors and outputs, each
lane's result, and the refusal a failed reference makes (issue 51).

The gate owns one `RunResults` per process (the plugin gives it to the gate and the fixtures);
everything else adds to it through its methods and reads it through read-only views. The gate's
decision reads a `Frozen` copy (`freeze`), so nothing added later changes what was decided on. An
xdist worker's shard, and the quality phase's record, are a `RunResults` written out (`dump`)
and merged into another (`absorb`): store.shards holds the file format and its version
(`API_VERSION`, as asv's Results carries one), so a record of another version is refused, never
misread.

The session (loop.run.session) keeps the resources that produce these results, and reports its own
failures (a build that failed, the role code changed) through the `add_error` it is given.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

from pytest_ditar.config.suite import CorpusItem
from pytest_ditar.core.decision import LaneOutcome
from pytest_ditar.core.errors import CandidateError
from pytest_ditar.core.outputs import ItemOutput
from pytest_ditar.core.quality import ContractResult
from pytest_ditar.loop.run.session import DitarSession
from pytest_ditar.runtime.harness import batches, run_batch
from pytest_ditar.runtime.lanes import LaneResult
from pytest_ditar.runtime.worker import CandidateWorker
from pytest_ditar.store import shards


@dataclass(frozen=True)
class Frozen:
    """The decision's input: what the run produced when the gate decided, never changed after."""

    quality: Mapping[str, ContractResult]
    outputs: Mapping[str, ItemOutput]
    lanes: Mapping[str, LaneResult]
    errors: tuple[CandidateError, ...]
    reference_error: str | None

    def outcomes(self) -> list[LaneOutcome]:
        """Every lane's outcome, in the order the lanes ran."""
        return [lr.outcome for lr in self.lanes.values()]


class RunResults:
    """One run's results, added through the methods below (tests/integration/repo/
    test_no_foreign_writes.py: no other module writes into them)."""

    def __init__(self) -> None:
        self._quality: dict[str, ContractResult] = {}
        self._outputs: dict[str, ItemOutput] = {}
        self._lanes: dict[str, LaneResult] = {}
        self._errors: list[CandidateError] = []
        self._reference_error: str | None = None

    # ---- reads ------------------------------------------------------------------------------
    @property
    def quality(self) -> Mapping[str, ContractResult]:
        """Each corpus item's contract result, by item id."""
        return MappingProxyType(self._quality)

    @property
    def outputs(self) -> Mapping[str, ItemOutput]:
        """The candidate's outputs generated so far, by item id."""
        return MappingProxyType(self._outputs)

    @property
    def lanes(self) -> Mapping[str, LaneResult]:
        """Each lane's judged result, by lane name, in the order the lanes ran."""
        return MappingProxyType(self._lanes)

    @property
    def errors(self) -> tuple[CandidateError, ...]:
        """The candidate's errors, in the order they happened."""
        return tuple(self._errors)

    @property
    def reference_error(self) -> str | None:
        """Why a reference (the champion, its twin, the anchor) failed in its role: the run is
        refused naming it, nothing charged to the candidate."""
        return self._reference_error

    def outcomes(self) -> list[LaneOutcome]:
        """Every lane's outcome judged so far, in the order the lanes ran."""
        return [lr.outcome for lr in self._lanes.values()]

    def lanes_dict(self) -> dict[str, dict[str, Any]]:
        """The run's lanes as summary.json, a champion's lanes.json and the verdict document hold them."""
        return {k: v.to_dict() for k, v in self._lanes.items()}

    # ---- adds -------------------------------------------------------------------------------
    def add_error(self, exc: CandidateError) -> None:
        self._errors.append(exc)

    def add_quality(self, result: ContractResult) -> None:
        self._quality[result.item_id] = result

    def add_outputs(self, outs: Iterable[ItemOutput]) -> None:
        self._outputs.update({o.item_id: o for o in outs})

    def add_lane(self, res: LaneResult) -> None:
        """A lane's judged result (loop.perf.lanes.judge made it)."""
        self._lanes[res.outcome.name] = res

    def refuse_reference(self, why: str) -> None:
        """The first reference that failed names the run's refusal."""
        if self._reference_error is None:
            self._reference_error = why

    # ---- the decision's input, shards -------------------------------------------------------
    def freeze(self) -> Frozen:
        return Frozen(MappingProxyType(dict(self._quality)), MappingProxyType(dict(self._outputs)),
                      MappingProxyType(dict(self._lanes)), tuple(self._errors), self._reference_error)

    def dump(self, directory: Path, name: str) -> dict[str, Any]:
        """The quality results, errors and outputs as a shard (store.shards): outputs in
        <directory>/<name>.npz, the rest in the JSON-able payload returned."""
        return shards.dump(self._outputs.values(), self._quality.values(), self._errors, directory, name)

    def absorb(self, payload: dict[str, Any], corpus: Sequence[CorpusItem]) -> None:
        """Fold in what another process produced (an xdist worker's shard, phase 1's record), in
        corpus order, so the merged results read like a serial run's."""
        self._quality, self._outputs, self._errors = shards.merged(
            [it.id for it in corpus], self._quality.values(), self._outputs.values(), self._errors, [payload])


def output_for(sess: DitarSession, results: RunResults, item: CorpusItem) -> ItemOutput:
    """The candidate's output for `item`: its fixed batch is generated once (in the corpus's batches,
    the same requests in every role), then served from `results`. A failure is the candidate's error."""
    if item.id not in results.outputs:
        candidate = sess.get_candidate()
        group = next(b for b in batches(sess.suite.corpus, sess.suite, sess.suite.pipeline.batch)
                     if any(it.id == item.id for it in b))
        try:
            with sess.clock.span("quality.generate"):
                results.add_outputs(run_batch(candidate, group, sess.suite, sess.cfg.item_timeout_s))
        except CandidateError as exc:
            results.add_error(exc)  # a timeout leaves the worker failed: loop.run.session never runs it again
            raise
    return results.outputs[item.id]


def corpus_through(sess: DitarSession, results: RunResults, worker: CandidateWorker, replayed: set[str]) -> None:
    """`worker` has answered the corpus's fixed batches, in the candidate's order, once: the
    candidate through its quality phase (output_for), a reference (the champion, its twin) by
    the same requests, its outputs unused (`replayed`: the references' names that have). So every
    role reaches its timed rounds with the same history of requests behind it (the role lives in
    the judge alone, runtime.boxdir); a champion counting what it was asked cannot tell it was
    never quality-checked."""
    if worker is sess.candidate:
        for item in sess.suite.corpus:
            output_for(sess, results, item)
        return
    if worker.name in replayed:
        return
    replayed.add(worker.name)
    with sess.clock.span("perf.reference_corpus"):
        for group in batches(sess.suite.corpus, sess.suite, sess.suite.pipeline.batch):
            run_batch(worker, group, sess.suite, sess.cfg.item_timeout_s)

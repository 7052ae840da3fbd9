"""loop.run.results.RunResults: the one owner of what a run produced (issue 51). Added only through its
methods, read through views that cannot be written, frozen for the decision, and merged from shards
(an xdist worker's, the quality phase's record) in corpus order whichever shard came first."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from pytest_ditar.config.suite import CorpusItem
from pytest_ditar.core.decision import LaneOutcome
from pytest_ditar.core.errors import CandidateError, DitarError
from pytest_ditar.core.outputs import ItemOutput
from pytest_ditar.core.quality import ContractResult, Metrics
from pytest_ditar.loop.run.results import RunResults
from pytest_ditar.runtime.lanes import LaneMeasurement, LaneResult
from pytest_ditar.store import shards

CORPUS = [CorpusItem(f"i{n}", label=n, seed=100 + n) for n in range(4)]
SESSION = Path(__file__).resolve().parents[3] / "pytest_ditar/loop/run/session.py"


def _result(item_id: str, failures: tuple[str, ...] = ()) -> ContractResult:
    return ContractResult(item_id, "exact", Metrics(True, 0.0, 0.0, 1.0, 1.0, float("inf"), 1.0, False), failures)


def _output(item_id: str, value: float) -> ItemOutput:
    latents = np.full((4, 2, 2), value, dtype=np.float32) + np.float32(1e-7)  # a value a float16 trip would change
    return ItemOutput(item_id, latents, np.full((8, 8, 3), int(value) % 256, dtype=np.uint8), 0.25)


def _lane(name: str, verdict: str) -> LaneResult:
    return LaneResult(LaneMeasurement(name, [1.0, 1.0], [1.0, 1.0]),
                      LaneOutcome(name, name == "obj", verdict, 1.0, 0.9, 1.1), "interleaved", 0.0)


def test_results_are_added_through_methods_and_read_through_views_that_cannot_be_written():
    r = RunResults()
    r.add_quality(_result("i1"))
    r.add_outputs([_output("i1", 1.0)])
    r.add_error(CandidateError("oom", "x", item="i1"))
    r.add_lane(_lane("obj", "FASTER"))
    assert list(r.quality) == ["i1"] and list(r.outputs) == ["i1"] and len(r.errors) == 1
    assert [oc.verdict for oc in r.outcomes()] == ["FASTER"] and r.lanes_dict()["obj"]["outcome"]["verdict"] == "FASTER"
    with pytest.raises(TypeError):
        r.quality["i2"] = _result("i2")  # type: ignore[index]
    with pytest.raises(TypeError):
        r.outputs["i2"] = _output("i2", 2.0)  # type: ignore[index]
    with pytest.raises(AttributeError):
        r.errors.append(CandidateError("oom", "y"))  # type: ignore[attr-defined]
    assert len(r.quality) == 1 and len(r.errors) == 1


def test_the_decision_reads_a_frozen_copy_that_later_adds_do_not_change():
    r = RunResults()
    r.add_quality(_result("i0"))
    made = r.freeze()
    r.add_quality(_result("i1", ("psnr below",)))
    r.add_error(CandidateError("exception", "late"))
    r.add_lane(_lane("obj", "SLOWER"))
    assert list(made.quality) == ["i0"] and made.errors == () and made.outcomes() == []
    with pytest.raises(AttributeError):
        made.errors = ()  # type: ignore[misc]


def test_the_first_reference_that_failed_names_the_refusal():
    r = RunResults()
    assert r.reference_error is None
    r.refuse_reference("champion abc1234 could not be built")
    r.refuse_reference("the champion's twin failed while timed")
    assert r.reference_error == "champion abc1234 could not be built"
    assert r.freeze().reference_error == "champion abc1234 could not be built"


def test_shards_merge_in_corpus_order_whichever_came_first(tmp_path):
    """Two xdist workers' results, the later items' first: the merged results read as a serial
    run's (items in corpus order, an error without an item first), outputs bit for bit."""
    late, early = RunResults(), RunResults()
    late.add_quality(_result("i3"))
    late.add_quality(_result("i2"))
    late.add_outputs([_output("i3", 3.0), _output("i2", 2.0)])
    late.add_error(CandidateError("non_finite", "", item="i3"))
    early.add_quality(_result("i0"))
    early.add_outputs([_output("i0", 0.5)])
    early.add_error(CandidateError("exception", "build failed"))  # no item: a build failure
    merged = RunResults()
    merged.add_quality(_result("i1"))  # the controller's own
    merged.absorb(late.dump(tmp_path, "shard-gw1"), CORPUS)
    merged.absorb(early.dump(tmp_path, "shard-gw0"), CORPUS)
    assert list(merged.quality) == ["i0", "i1", "i2", "i3"]
    assert list(merged.outputs) == ["i0", "i2", "i3"]
    assert [e.item for e in merged.errors] == [None, "i3"]
    np.testing.assert_array_equal(merged.outputs["i0"].latents, _output("i0", 0.5).latents)
    assert merged.outputs["i0"].latents.dtype == np.float32 and merged.outputs["i2"].image.dtype == np.uint8


def test_a_record_of_another_format_is_refused_one_without_a_version_is_the_first(tmp_path):
    r = RunResults()
    r.add_quality(_result("i0"))
    payload = r.dump(tmp_path, "quality")
    assert payload["api_version"] == shards.API_VERSION == 1
    with pytest.raises(DitarError, match="format 2"):
        RunResults().absorb({**payload, "api_version": 2}, CORPUS)
    older = RunResults()
    older.absorb({k: v for k, v in payload.items() if k != "api_version"}, CORPUS)  # written before the key
    assert list(older.quality) == ["i0"]


def test_the_session_keeps_resources_only():
    """Issue 51: at most 15 methods, and no field that holds a result (they are RunResults')."""
    cls = next(n for n in ast.parse(SESSION.read_text()).body
               if isinstance(n, ast.ClassDef) and n.name == "DitarSession")
    methods = [n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert len(methods) <= 15, methods
    fields = {n.target.id: ast.unparse(n.annotation) for n in cls.body
              if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    result_types = ("ContractResult", "ItemOutput", "LaneResult", "LaneOutcome", "RunResults")
    assert not {k: v for k, v in fields.items() if any(t in v for t in result_types)}
    assert not {"outputs", "quality", "lanes", "errors", "reference_error", "compiled_note"} & set(fields)

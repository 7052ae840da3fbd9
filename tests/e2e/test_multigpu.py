"""Two-process (gloo, CPU) CFG-split candidate against the stock pipeline, on the tiny suite."""
import shutil
from pathlib import Path

import pytest

from pytest_ditar.config.project import DEFAULT_THRESHOLDS, Thresholds
from pytest_ditar.config.suite import load_suite
from pytest_ditar.core.quality import check_contract, compute_metrics
from pytest_ditar.interface import Request
from pytest_ditar.runtime.harness import batches, make_spec, run_batch
from pytest_ditar.runtime.models import resolve_model_dir
from pytest_ditar.runtime.multigpu import group_outputs, group_times
from pytest_ditar.runtime.worker import CandidateWorker

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(model_cache, tmp_path_factory):
    suite = load_suite(REPO / "suites" / "tiny")
    spec = make_spec(suite, resolve_model_dir(suite), "cpu")
    cand = tmp_path_factory.mktemp("cfg_split")
    shutil.copy(REPO / "pytest_ditar" / "demo" / "candidates" / "cfg_split.py", cand / "pipeline.py")
    return suite, spec, cand


def test_cfg_split_over_two_gloo_ranks_passes_exact_and_numerical(tiny, tmp_path):
    suite, spec, cand = tiny
    groups = batches(suite.corpus[:8], suite, suite.pipeline.batch)  # two batches of 4
    stock = CandidateWorker("stock", REPO / "mutable", spec, log_path=tmp_path / "stock.log")
    try:
        ref = {o.item_id: o for g in groups for o in run_batch(stock, g, suite, 120)}
    finally:
        stock.close()
    reqs = [Request(tuple(it.label for it in g), tuple(it.seed for it in g), suite.steps_for(g[0])) for g in groups]
    outs = group_outputs(cand, spec, reqs, world=2)
    for g, (lat, img) in zip(groups, outs):
        for n, it in enumerate(g):
            m = compute_metrics(lat[n], img[n], ref[it.id].latents, ref[it.id].image)
            for cls in ("exact", "numerical"):
                res = check_contract(it.id, cls, m, Thresholds(**{k: v for k, v in DEFAULT_THRESHOLDS[cls].items()}))
                assert res.passed, (cls, res.failures)
            assert m.latent_rel_l2 < 1e-5  # same algorithm: only the GEMM row partition differs


def test_group_lane_times_the_whole_group(tiny):
    suite, spec, cand = tiny
    r = group_times(cand, spec, Request((1,), (7,), 4), world=2, warmup=1, repeats=3)
    assert len(r["samples"]) == 3 and len(r["warmup"]) == 1 and all(s > 0 for s in r["samples"])


def test_a_rank_that_raises_is_a_candidate_crash(tiny, tmp_path):
    from pytest_ditar.core.errors import CandidateError

    suite, spec, _ = tiny
    (tmp_path / "pipeline.py").write_text("def build(spec):\n    raise RuntimeError('no second GPU today')\n")
    with pytest.raises(CandidateError) as err:
        group_outputs(tmp_path, spec, [Request((1,), (7,), 4)], world=2)
    assert "2-process group failed" in str(err.value) and "no second GPU today" in str(err.value)

"""Handbook hygiene: frontmatter, the start-up pages, and the number-source convention.

The convention is written down in knowledge/handbook/README.md; the checker lives in
pytest_ditar/knowledge/lint.py (``unsourced_numbers``) so `dit-ar doctor` can reuse it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_ditar.knowledge import lint, pages

ROOT = Path(__file__).resolve().parents[3]
HANDBOOK = ROOT / "knowledge" / "handbook"
PAGES = pages.load_pages(HANDBOOK)
IDS = [p.rel for p in PAGES]

SEED_PAGES = [
    "00_foundations/04_target_hardware_and_quality_contract.md",
    "00_foundations/02_benchmarking_and_quality_gates.md",
    "03_single_gpu/08_a5500_optimization_ladder.md",
    "02_bottlenecks/05_nsight_a5500_profiling_workflow.md",
    "09_reference/09_a5500_benchmark_runbook.md",
    "09_reference/10_reproducibility_and_claims_standard.md",
]

RUNG_PAGES = [
    "03_single_gpu/01_attention_backends_dit_head_dim_72.md",
    "03_single_gpu/02_compile_and_graph_breaks.md",
    "03_single_gpu/03_pointwise_modulation_fusion.md",
    "03_single_gpu/04_cuda_graphs_diffusers_schedulers.md",
    "03_single_gpu/05_gemm_tuning.md",
    "03_single_gpu/06_transfer_elimination_lifecycle.md",
    "03_single_gpu/07_diffusers_dit_quirks.md",
    "04_memory/01_24gb_memory_engineering.md",
    "05_multi_gpu/01_2x_a5500_topology.md",
    "06_kernels/01_custom_kernels.md",
    "07_approximation/01_approximation_and_caching.md",
    "08_quantization/01_quantization_on_ampere_without_fp8.md",
]


def test_handbook_has_pages():
    assert len(PAGES) >= 18
    assert (HANDBOOK / "README.md").exists()
    assert "README.md" not in {Path(p.rel).name for p in PAGES}


@pytest.mark.parametrize("rel", SEED_PAGES + RUNG_PAGES)
def test_required_page_exists(rel):
    assert (HANDBOOK / rel).is_file(), rel


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_frontmatter_valid(page):
    assert lint.validate_frontmatter(page) == []
    meta = page.meta
    assert set(lint.REQUIRED_KEYS) <= set(meta)
    assert meta["class"] in lint.VALID_CLASSES
    assert meta["evidence"] in lint.VALID_EVIDENCE


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_page_is_dense_and_sectioned(page):
    lines = [ln for ln in page.body.splitlines() if ln.strip()]
    assert len(lines) >= 30, f"{page.rel}: only {len(lines)} non-empty lines"
    assert len(page.sections) >= 3, f"{page.rel}: fewer than 3 sections"


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_measurement_has_a_source(page):
    problems = lint.unsourced_numbers(page)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_footnotes_are_defined(page):
    assert lint.undefined_footnotes(page) == []


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_handbook_links_resolve(page):
    """Backticked handbook paths like `03_single_gpu/05_gemm_tuning.md` must exist."""
    import re

    for ref in re.findall(r"`(\d\d_[a-z_]+/[0-9a-z_]+\.md)`", page.body):
        assert (HANDBOOK / ref).is_file(), f"{page.rel}: dangling link {ref}"


def test_h200_numbers_are_labelled():
    """DESIGN.md anchor figures must never appear without saying they were measured on the H200."""
    anchors = ["2988 ms", "1395 ms", "602 ms", "732 ms", "305 ms", "123 ms", "750 TFLOP/s", "4.2 TB/s"]
    for page in PAGES:
        for _first, unit in pages.units(page.body):
            text = "\n".join(line for _, line in unit)
            if any(a in text for a in anchors):
                assert "H200" in text or "[^h200]" in text, f"{page.rel}: unlabelled H200 anchor: {text[:120]}"


# --- the checker itself ------------------------------------------------------------------


def _page(tmp_path: Path, body: str) -> pages.Page:
    p = tmp_path / "x.md"
    p.write_text("---\ntitle: T\ntags: [a]\nclass: exact\nhardware: any\nevidence: published\n---\n" + body)
    return pages.load_page(p, tmp_path)


@pytest.mark.parametrize(
    "body,ok",
    [
        ("The card moves 768 GB/s.\n", False),
        ("The card moves 768 GB/s [^ds].\n\n[^ds]: NVIDIA RTX A5500 datasheet.\n", True),
        ("The card moves 768 GB/s [^nope].\n", False),
        ("It took 602 ms, measured here on NVIDIA H200 (DESIGN.md anchors).\n", True),
        ("It took 602 ms on one run,\nmeasured here on\nNVIDIA H200.\n", True),
        ("Weights are 1.35 GB (derived: 675M x 2 bytes).\n", True),
        ("Expect 1.2x (hypothesis).\n", True),
        ("Expect 1.2x.\n", False),
        ("- a 2988 ms item\n- another item (source: DESIGN.md)\n", False),
        ("| a | 34 TFLOP/s |\n| b | 68 TFLOP/s (source: datasheet) |\n", False),
        ("| b | 68 TFLOP/s (source: datasheet) |\n", True),
        ("Shapes 16 x 72 and a 95% CI are fine.\n", True),
        ("```\nDITAR VERDICT: KEEP speedup=1.183x\n```\n", True),
        ("The `speedup=1.183x` field.\n", True),
        ("## A 24 GB heading\n\ntext\n", True),
        ("Noise was 6.5% between runs.\n", False),
    ],
)
def test_unsourced_numbers_checker(tmp_path, body, ok):
    assert (lint.unsourced_numbers(_page(tmp_path, body)) == []) is ok


def test_validate_frontmatter_reports_errors(tmp_path):
    p = tmp_path / "bad.md"
    p.write_text("---\ntitle: ''\ntags: nope\nclass: fast\nevidence: vibes\n---\nbody\n")
    errors = lint.validate_frontmatter(pages.load_page(p, tmp_path))
    joined = "\n".join(errors)
    for key in ("hardware", "title", "tags", "class", "evidence"):
        assert key in joined
    q = tmp_path / "none.md"
    q.write_text("# no frontmatter\n")
    assert lint.validate_frontmatter(pages.load_page(q, tmp_path))

"""Handbook search: ranking on the seed's priorities, index rebuild, filters, import hygiene."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_ditar.cli.search import Search
from pytest_ditar.core.vocabulary import HANDBOOK_CLASSES
from pytest_ditar.knowledge import pages, search as knowledge

ROOT = Path(__file__).resolve().parents[3]
HANDBOOK = ROOT / "knowledge" / "handbook"

# (query, expected page path; "a|b" means either page is acceptable), written from the seed's
# A5500 priority list and the start-up pages.
QUERIES = [
 ("flash attention head dim 72 ampere","03_single_gpu/01_attention_backends_dit_head_dim_72.md"),
 ("cuda graphs scheduler","03_single_gpu/04_cuda_graphs_diffusers_schedulers.md"),
 ("fp8 a5500","08_quantization/01_quantization_on_ampere_without_fp8.md|00_foundations/04_target_hardware_and_quality_contract.md"),
 ("torch.compile graph breaks","03_single_gpu/02_compile_and_graph_breaks.md"),
 ("int8 weight only quantization torchao","08_quantization/01_quantization_on_ampere_without_fp8.md"),
 ("nvlink two a5500","05_multi_gpu/01_2x_a5500_topology.md"),
 ("vae decode tiling 24gb","04_memory/01_24gb_memory_engineering.md"),
 ("adaln modulation fusion","03_single_gpu/03_pointwise_modulation_fusion.md"),
 ("nsight systems phase attribution","02_bottlenecks/05_nsight_a5500_profiling_workflow.md"),
 ("mann whitney bootstrap noise","00_foundations/02_benchmarking_and_quality_gates.md"),
 ("fewer steps approximate","07_approximation/01_approximation_and_caching.md"),
 ("regional compile repeated blocks","03_single_gpu/02_compile_and_graph_breaks.md"),
 ("gemm cublas qkv fusion layout","03_single_gpu/05_gemm_tuning.md"),
 ("pinned memory host to device copy sync","03_single_gpu/06_transfer_elimination_lifecycle.md"),
 ("custom triton kernel profiler evidence","06_kernels/01_custom_kernels.md"),
 ("clocks power thermal throttling warm-up","09_reference/09_a5500_benchmark_runbook.md"),
 ("claim hardware fingerprint suite hash commit","09_reference/10_reproducibility_and_claims_standard.md"),
 ("priority ladder order of experiments","03_single_gpu/08_a5500_optimization_ladder.md"),
 ("set_attention_backend diffusers dit","03_single_gpu/07_diffusers_dit_quirks.md|03_single_gpu/01_attention_backends_dit_head_dim_72.md"),
 ("conditioning embedding computed in every block","03_single_gpu/07_diffusers_dit_quirks.md"),
 ("tf32 bf16 fp16 numerical precision","03_single_gpu/09_numerical_precision_modes.md"),
 ("quality contract exact numerical approximate quantization","00_foundations/04_target_hardware_and_quality_contract.md"),
 ("verdict line keep discard crash","00_foundations/02_benchmarking_and_quality_gates.md"),
 ("launch bound batch 1 latency","03_single_gpu/04_cuda_graphs_diffusers_schedulers.md|02_bottlenecks/05_nsight_a5500_profiling_workflow.md"),
 ("feature caching teacache deepcache","07_approximation/01_approximation_and_caching.md"),
 ("w8a8 int8 tensor cores smoothquant","08_quantization/01_quantization_on_ampere_without_fp8.md"),
 ("pcie gen4 bandwidth peer to peer","05_multi_gpu/01_2x_a5500_topology.md"),
 ("dit-xl/2 flops per image shapes","00_foundations/01_dit_xl2_workload_anatomy.md"),
 ("guidance duplicates batch cfg","03_single_gpu/07_diffusers_dit_quirks.md"),
 ("peak vram allocator expandable segments","04_memory/01_24gb_memory_engineering.md"),
 ("nsight compute roofline kernel","02_bottlenecks/05_nsight_a5500_profiling_workflow.md"),
 ("cite the profile phase share in the commit message","02_bottlenecks/06_dit_ar_profile_phase_table.md"),
 ("dpmsolver step index nonzero item sync","03_single_gpu/04_cuda_graphs_diffusers_schedulers.md|03_single_gpu/07_diffusers_dit_quirks.md"),
]


@pytest.mark.parametrize("query,expected", QUERIES, ids=[q for q, _ in QUERIES])
def test_query_finds_expected_page_in_top3(query, expected):
    hits = knowledge.search(HANDBOOK, query, k=3)
    paths = [h.path for h in hits]
    assert any(e in paths for e in expected.split("|")), f"{query!r} -> {paths}"


def test_enough_queries():
    assert len(QUERIES) >= 20


def test_hit_fields():
    hits = knowledge.search(HANDBOOK, "cuda graphs scheduler", k=5)
    assert 1 <= len(hits) <= 5
    h = hits[0]
    assert isinstance(h, knowledge.Hit)
    assert h.path.endswith(".md") and not h.path.startswith("/")
    assert h.heading and h.title and h.snippet
    assert isinstance(h.tags, tuple) and h.cls in HANDBOOK_CLASSES
    assert [x.score for x in hits] == sorted((x.score for x in hits), reverse=True)
    with pytest.raises(Exception):
        h.score = 0.0  # frozen


def test_empty_and_nonsense_queries():
    assert knowledge.search(HANDBOOK, "", k=5) == []
    assert knowledge.search(HANDBOOK, "the of and", k=5) == []
    assert knowledge.search(HANDBOOK, "zzqxjw", k=5) == []


def test_class_filter():
    hits = knowledge.search(HANDBOOK, "int8 quantization tensor cores", k=5, class_name="exact")
    assert hits and all(h.cls == "exact" for h in hits)
    hits = knowledge.search(HANDBOOK, "int8 quantization tensor cores", k=5, class_name="quantization")
    assert hits and {h.path for h in hits} == {"08_quantization/01_quantization_on_ampere_without_fp8.md"}


def test_tag_filter():
    hits = knowledge.search(HANDBOOK, "bandwidth", k=10, tag="nvlink")
    assert hits and all("nvlink" in h.tags for h in hits)
    assert knowledge.search(HANDBOOK, "bandwidth", k=5, tag="no-such-tag") == []


def _copy_handbook(tmp_path: Path) -> Path:
    dst = tmp_path / "knowledge" / "handbook"
    shutil.copytree(HANDBOOK, dst)
    return dst


def test_editing_a_page_rebuilds_the_index(tmp_path):
    hb = _copy_handbook(tmp_path)
    assert knowledge.search(hb, "xylophonequokka", k=3) == []
    key_before = knowledge.index_key(hb)
    page = hb / "03_single_gpu" / "05_gemm_tuning.md"
    text = page.read_text(encoding="utf-8")
    page.write_text(text + "\n## Xylophonequokka trick\n\nA made-up word for the rebuild test.\n", encoding="utf-8")
    os.utime(page, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assert knowledge.index_key(hb) != key_before
    hits = knowledge.search(hb, "xylophonequokka", k=3)
    assert hits and hits[0].path == "03_single_gpu/05_gemm_tuning.md"
    assert hits[0].heading == "Xylophonequokka trick"
    # the index lives next to the handbook, one directory per handbook state
    idx = hb.parent / ".index"
    assert idx.is_dir() and len([p for p in idx.iterdir() if p.is_dir()]) == 1


def test_adding_and_removing_a_page_rebuilds(tmp_path):
    hb = _copy_handbook(tmp_path)
    new = hb / "03_single_gpu" / "99_new.md"
    new.write_text(
        "---\ntitle: Wombatfusion\ntags: [test]\nclass: exact\nhardware: any\nevidence: hypothesis\n---\n"
        "\n## Wombat\n\nwombatfusion body\n",
        encoding="utf-8",
    )
    assert knowledge.search(hb, "wombatfusion", k=1)[0].path == "03_single_gpu/99_new.md"
    new.unlink()
    assert knowledge.search(hb, "wombatfusion", k=1) == []


def test_index_cached_on_disk(tmp_path):
    hb = _copy_handbook(tmp_path)
    knowledge.search(hb, "cuda graphs", k=1)
    key = knowledge.index_key(hb)
    d = hb.parent / ".index" / key
    assert (d / "sections.json").exists()
    mtime = (d / "sections.json").stat().st_mtime_ns
    knowledge._MEMO.clear()
    knowledge.search(hb, "cuda graphs", k=1)
    assert (d / "sections.json").stat().st_mtime_ns == mtime  # reused, not rebuilt


def test_sections_split_at_headings_not_in_code():
    body = "intro\n\n## A\n\ntext a\n\n```\n# not a heading\n```\n\n### B\n\ntext b\n"
    secs = pages.split_sections(body, title="T")
    assert [s.heading for s in secs] == ["T", "A", "B"]
    assert "# not a heading" in secs[1].body


def _args(*argv):
    parser = argparse.ArgumentParser(prog="dit-ar")
    sub = parser.add_subparsers(dest="command")
    Search.setup_parser(sub)
    return parser.parse_args(["search", *argv])


def test_cli_text_output(capsys):
    args = _args("cuda graphs scheduler", "--k", "2")
    assert args.k == 2 and args.json is False and args.search_tag is None and args.cls is None
    assert Search.search_in(args, HANDBOOK) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("1. 03_single_gpu/04_cuda_graphs_diffusers_schedulers.md :: ")
    assert "(score " in out[0]
    assert sum(1 for line in out if line[:2] in ("1.", "2.")) == 2


def test_cli_json_output_and_filters(capsys):
    args = _args("int8 tensor cores", "--json", "--class", "quantization", "--k", "3")
    assert Search.search_in(args, HANDBOOK) == 0
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, list) and data
    assert all(d["class"] == "quantization" for d in data)
    assert {"rank", "path", "heading", "score", "snippet", "title", "tags"} <= set(data[0])
    args = _args("nvlink", "--json", "--tag", "nvlink")
    assert Search.search_in(args, HANDBOOK) == 0
    assert all("nvlink" in d["tags"] for d in json.loads(capsys.readouterr().out))


def test_cli_missing_handbook(tmp_path, capsys):
    assert Search.search_in(_args("x"), tmp_path / "nope") == 2


def test_search_modules_do_not_import_torch():
    code = (
        "import sys; from pathlib import Path; import pytest_ditar.cli.main, pytest_ditar.knowledge.search as k; "
        f"k.search(Path({str(HANDBOOK)!r}), 'cuda graphs', k=3); "
        "bad = [m for m in ('torch', 'diffusers', 'transformers', 'pytest') if m in sys.modules]; "
        "assert not bad, bad"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_cli_tag_does_not_clash_with_a_top_level_tag(capsys):
    parser = argparse.ArgumentParser(prog="dit-ar")
    parser.add_argument("--tag", default=None)  # the session tag of the real dit-ar parser
    sub = parser.add_subparsers(dest="command")
    Search.setup_parser(sub)
    args = parser.parse_args(["--tag", "mysession", "search", "bandwidth", "--tag", "nvlink", "--json"])
    assert args.search_tag == "nvlink"
    assert Search.search_in(args, HANDBOOK) == 0
    data = json.loads(capsys.readouterr().out)
    assert data and all("nvlink" in d["tags"] for d in data)

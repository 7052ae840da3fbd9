"""Device time per phase by kernel launch (core.launches, issue 52): synthetic calls whose kernels
are launched inside marked ranges, inside graph replays the judge wrapped, outside every range
(a lean champion's F.* rewrite, a compiled block) and with no launch at all."""
from __future__ import annotations

import pytest

from pytest_ditar.core.attribution import Span
from pytest_ditar.core.launches import (
    FLAG_FOREIGN,
    FLAG_GRAPH,
    IDLE,
    LEAVES,
    TF_INFERRED,
    UNATTRIBUTED,
    Launch,
    attribute_launches,
    sum_checks,
)

GEMM = "sm90_xmma_gemm_f16f16_128x128"
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits>"
TRITON = "triton_poi_fused_add_mul_0"
CONV = "cudnn::conv2d_fprop_nhwc"


def _graph_champion(steps: int = 10) -> tuple[list[Span], list[Launch]]:
    """A lean champion: setup kernels, then per step a copy into the graph's inputs, one replayed
    graph (GEMMs, flash attention, Triton epilogues: one cudaGraphLaunch each), the loop's own
    elementwise kernels; then the compiled VAE (its decoder's range fires) and the output copy.
    No transformer or scheduler mark fires."""
    spans = [Span("call", 0.0, 10_000.0)]
    ls = [Launch("randn_like_kernel", 5.0, 10.0), Launch("index_select_kernel", 8.0, 5.0)]
    t = 100.0
    for _ in range(steps):
        ls.append(Launch("Memcpy DtoD (Device -> Device)", t, 2.0))
        spans.append(Span("graph", t + 10, t + 20))
        ls += [Launch(GEMM, t + 15, 300.0, FLAG_GRAPH), Launch(FLASH, t + 15, 100.0, FLAG_GRAPH),
               Launch(TRITON, t + 15, 50.0, FLAG_GRAPH)]
        ls.append(Launch("elementwise_kernel_sub", t + 30, 3.0))
        t += 500.0
    spans.append(Span("vae", 8_000.0, 8_400.0))
    ls += [Launch(CONV, 8_100.0, 200.0), Launch("triton_per_fused_group_norm_silu_3", 8_200.0, 40.0)]
    ls.append(Launch("Memcpy DtoH (Device -> Pageable)", 9_000.0, 20.0))
    return spans, ls


def test_a_graph_replayed_compiled_champion_is_named_to_at_least_90_percent():
    spans, ls = _graph_champion()
    d = attribute_launches(spans, ls)
    assert d.kernels == len(ls) and d.in_graphs == 30 and d.triton == 11
    assert d.named_share is not None and d.named_share >= 0.9, d
    assert d.phases["attention"] == pytest.approx(1.0)  # 10 flash kernels, placed by family
    assert d.phases[TF_INFERRED] == pytest.approx(3.5 + 0.002 * 9 + 0.003 * 10)  # graphs, later copies, loop glue
    assert d.phases["setup"] == pytest.approx(0.017)  # before the first graph: setup and step 0's copy
    assert d.phases["vae"] == pytest.approx(0.24) and d.phases["output"] == pytest.approx(0.02)
    assert d.inferred["attention"] == pytest.approx(1.0) and "vae" not in d.inferred  # the VAE's range fired
    assert d.phases["transformer"] == pytest.approx(d.phases["attention"] + d.phases[TF_INFERRED])
    assert sum(d.leaves().values()) == pytest.approx(d.busy_ms)


def test_a_graph_replayed_inside_a_marked_range_goes_to_that_range():
    """Inductor's cudagraph trees inside the VAE (reduce-overhead), and a graph replayed inside
    the transformer's own range: the innermost phase range wins, the graph only counts."""
    spans = [Span("call", 0, 1000), Span("transformer", 100, 400), Span("graph", 110, 390),
             Span("scheduler.step", 420, 450), Span("vae", 500, 900), Span("graph", 510, 890)]
    ls = [Launch(GEMM, 120, 200.0, FLAG_GRAPH), Launch(FLASH, 120, 50.0, FLAG_GRAPH),
          Launch("elementwise_kernel", 430, 5.0), Launch(CONV, 520, 100.0, FLAG_GRAPH)]
    d = attribute_launches(spans, ls)
    assert d.phases["transformer_other"] == pytest.approx(0.25)  # flash too: the transformer's range is innermost
    assert d.phases["attention"] == 0.0 and d.phases["scheduler"] == pytest.approx(0.005)
    assert d.phases["vae"] == pytest.approx(0.1) and d.in_graphs == 3 and not d.inferred


def test_a_lean_candidate_where_only_the_vae_fired():
    """No loop landmark: before the first VAE range is the denoiser's, setup's kernels among them
    (said in a note); after it, output."""
    spans = [Span("call", 0, 1000), Span("vae", 800, 900)]
    ls = [Launch(GEMM, 10, 100.0), Launch("fmha_cutlassF_f16_aligned_64x64", 20, 40.0), Launch(TRITON, 30, 10.0),
          Launch(CONV, 850, 30.0), Launch("Memcpy DtoH", 950, 5.0)]
    d = attribute_launches(spans, ls)
    assert d.phases[TF_INFERRED] == pytest.approx(0.11) and d.phases["attention"] == pytest.approx(0.04)
    assert d.phases["setup"] == 0.0 and d.phases["output"] == pytest.approx(0.005)
    assert d.named_share == pytest.approx(1.0)
    assert any("no loop landmark" in n for n in d.notes)


def test_kernels_with_no_launch_are_unattributed_never_a_phase():
    spans = [Span("call", 0, 1000), Span("transformer", 0, 900)]
    ls = [Launch(GEMM, 10, 100.0), Launch("mystery_kernel", None, 300.0), Launch(FLASH, None, 100.0)]
    d = attribute_launches(spans, ls)
    assert d.phases[UNATTRIBUTED] == pytest.approx(0.4) and d.unattributed_ms == pytest.approx(0.4)
    assert d.phases["transformer"] == pytest.approx(0.1)  # the flash kernel with no launch is not attention's
    assert d.named_share == pytest.approx(0.2)
    assert [r[0] for r in d.top_unnamed] == ["mystery_kernel", FLASH]


def test_work_with_no_landmark_at_all_is_not_named():
    """Nothing fired in the call (every module bypassed, the VAE too): the kernels have nothing
    to be placed by, so the share named is low, not inflated by a guess."""
    spans = [Span("call", 0, 1000)]
    ls = [Launch(GEMM, 10 * i, 100.0) for i in range(50)] + [Launch(FLASH, 5, 50.0)]
    d = attribute_launches(spans, ls)
    assert d.named_share == 0.0 and d.phases["bypassed"] == pytest.approx(5.05)
    assert any("no landmark fired" in n for n in d.notes)


def test_work_all_in_setup_before_a_late_landmark_reads_as_setup_not_as_the_transformer():
    """A candidate that does its whole loop before the first landmark: its kernels are setup (a
    row the table shows as inferred, `*`), not the transformer's."""
    spans = [Span("call", 0, 1000), Span("scheduler.step", 900, 910), Span("vae", 920, 950)]
    d = attribute_launches(spans, [Launch(GEMM, 10 * i, 100.0) for i in range(50)])
    assert d.phases["setup"] == pytest.approx(5.0) and d.phases["transformer"] == 0.0
    assert d.inferred["setup"] == pytest.approx(5.0)


def test_guidance_between_a_transformer_range_and_the_step_and_foreign_threads():
    spans = [Span("call", 0, 1000), Span("transformer", 100, 200), Span("scheduler.step", 300, 350),
             Span("vae", 600, 700)]
    ls = [Launch("elementwise_kernel", 250, 4.0), Launch(GEMM, 150, 100.0, FLAG_FOREIGN),
          Launch(GEMM, 150, 100.0)]
    d = attribute_launches(spans, ls)
    assert d.phases["guidance"] == pytest.approx(0.004)
    assert d.phases["transformer_other"] == pytest.approx(0.1)  # the call thread's launch in the range
    assert d.phases[TF_INFERRED] == pytest.approx(0.1)  # another thread's launch: placed by position only


def test_nested_ranges_take_the_innermost_and_ranges_that_closed_do_not_linger():
    spans = [Span("call", 0, 1000), Span("transformer", 0, 500), Span("block", 10, 200), Span("attention", 20, 60),
             Span("mlp", 100, 150), Span("block", 210, 400)]
    ls = [Launch(FLASH, 30, 1.0), Launch(GEMM, 70, 2.0), Launch(GEMM, 120, 4.0), Launch(GEMM, 160, 8.0),
          Launch(GEMM, 205, 16.0), Launch(GEMM, 300, 32.0), Launch(GEMM, 450, 64.0)]
    d = attribute_launches(spans, ls)
    assert (d.phases["attention"], d.phases["mlp"]) == (pytest.approx(0.001), pytest.approx(0.004))
    assert d.phases["block"] == pytest.approx(0.002 + 0.008 + 0.032)
    assert d.phases["transformer_other"] == pytest.approx(0.016 + 0.064)


def test_no_call_span_is_an_error():
    with pytest.raises(ValueError):
        attribute_launches([Span("vae", 0, 1)], [])


def test_the_leaves_partition_busy_and_the_sum_check_compares_each_total():
    ref = {k: 0.0 for k in LEAVES} | {"attention": 40.0, "block": 30.0, IDLE: 30.0}
    new = {k: 0.0 for k in LEAVES} | {"attention": 20.0, TF_INFERRED: 25.0, IDLE: 5.0}
    checks = {c.name: c for c in sum_checks(ref, new, {"device busy": (70.0, 45.0),
                                                        "profiled call walls": (100.0, 50.0),
                                                        "unprofiled walls": (90.0, 48.0)})}
    assert checks["device busy"].summed_ms == pytest.approx(-25.0) and checks["device busy"].gap == pytest.approx(0)
    assert checks["profiled call walls"].summed_ms == pytest.approx(-50.0)
    assert checks["profiled call walls"].gap == pytest.approx(0.0)
    assert checks["unprofiled walls"].gap == pytest.approx(8 / 42)  # the profiler's overhead differs by side
    assert sum_checks(ref, ref, {"device busy": (70.0, 70.0)})[0].gap is None

"""core.kernels (issue 41): the kernel families, the kernel table of one call and the difference of
two calls (`dit-ar profile --against`), on hand-made names and numbers (no torch). The command
itself: tests/e2e/test_profile.py."""
from __future__ import annotations

import pytest

from pytest_ditar.core import kernels as k
from pytest_ditar.core.kernels import diff, family, headline, kernel_table

ATTENTION, COPY, GEMM, NORM, OTHER, POINTWISE, REST = k.ATTENTION, k.COPY, k.GEMM, k.NORM, k.OTHER, k.POINTWISE, k.REST

# Names as torch.profiler reports them: CPU operators, CUDA kernels (eager, cuBLAS, cuDNN, flash),
# the Triton kernels of a compiled region (Inductor's names) and the copy engines' records.
NAMES = {
    "aten::addmm": GEMM, "aten::mm": GEMM, "aten::bmm": GEMM, "aten::linear": GEMM, "aten::conv2d": GEMM,
    "aten::mkldnn_convolution": GEMM, "ampere_sgemm_128x64_tn": GEMM,
    "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64": GEMM,
    "cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>": GEMM,
    "triton_tem_fused_addmm_0": GEMM, "aten::_scaled_mm": GEMM,
    "aten::scaled_dot_product_attention": ATTENTION,
    "aten::_scaled_dot_product_flash_attention_for_cpu": ATTENTION,
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<72, 128, 64, 4>>": ATTENTION,
    "fmha_cutlassF_f16_aligned_64x64_rf_sm80": ATTENTION,
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3": ATTENTION,
    "aten::softmax": ATTENTION, "triton_per_fused__softmax_0": ATTENTION,
    "aten::native_layer_norm": NORM, "aten::group_norm": NORM, "aten::native_group_norm": NORM,
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>": NORM,
    "triton_per_fused_native_layer_norm_1": NORM, "triton_red_fused_native_group_norm_2": NORM,
    "aten::copy_": COPY, "aten::to": COPY, "aten::_to_copy": COPY, "aten::clone": COPY, "aten::cat": COPY,
    "Memcpy HtoD (Pageable -> Device)": COPY, "Memset (Device)": COPY,
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>": COPY,
    "aten::add": POINTWISE, "aten::mul_": POINTWISE, "aten::silu": POINTWISE, "aten::gelu": POINTWISE,
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>": POINTWISE,
    "triton_poi_fused__to_copy_add_mul_0": POINTWISE,
    "aten::empty": OTHER, "aten::upsample_nearest2d": OTHER, "triton_red_fused_sum_3": OTHER,
}


@pytest.mark.parametrize("name", sorted(NAMES))
def test_family_of_a_name(name):
    assert family(name) == NAMES[name]


def test_every_family_is_reached_and_rest_is_never_a_names():
    assert set(NAMES.values()) == set(k.FAMILIES) - {REST}


def test_the_table_merges_names_and_its_families_add_up_to_the_wall():
    t = kernel_table([("aten::addmm", 4, 10.0), ("aten::silu", 2, 1.5), ("aten::addmm", 1, 2.0),
                      ("aten::native_layer_norm", 3, 0.5)], wall_ms=20.0)
    assert [(r.name, r.calls, r.ms) for r in t.rows] == [("aten::addmm", 5, 12.0), ("aten::silu", 2, 1.5),
                                                         ("aten::native_layer_norm", 3, 0.5)]
    assert t.rows[0].share == pytest.approx(0.6) and t.busy_ms == pytest.approx(14.0)
    assert t.families[GEMM] == 12.0 and t.families[POINTWISE] == 1.5 and t.families[NORM] == 0.5
    assert t.families[REST] == pytest.approx(6.0)
    assert sum(t.families.values()) == pytest.approx(20.0)


def test_a_device_busier_than_its_wall_has_no_negative_rest():
    t = kernel_table([("gemm_a", 1, 8.0), ("gemm_b", 1, 7.0)], wall_ms=10.0)  # two streams overlapping
    assert t.families[REST] == 0.0 and t.busy_ms == 15.0


def test_the_diff_sums_to_the_walls_difference_and_sorts_by_size():
    ref = {"setup": 2.0, "vae": 10.0, "attention": 5.0}
    new = {"setup": 2.5, "vae": 50.0, "mlp": 3.0}  # attention gone, mlp new
    d = diff(ref, new, ref_wall_ms=17.0, wall_ms=55.5)
    assert [r.key for r in d.rows] == ["vae", "attention", "mlp", "setup"]
    assert d.summed_ms == pytest.approx(d.delta_ms) == pytest.approx(38.5)
    assert d.rows[0].rel == pytest.approx(4.0) and d.rows[2].rel is None
    text = headline(d, {"vae": "VAE decode"})
    assert text.startswith("slower by 38.5 ms: VAE decode +40.0 ms (+400%), attention -5.0 ms (-100%), "
                           "mlp +3.0 ms (new)")
    assert headline(diff(new, ref, 55.5, 17.0)).startswith("faster by 38.5 ms: vae -40.0 ms")

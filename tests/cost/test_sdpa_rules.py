"""torch's SDPA dispatch rules, one firing and one passing case each (sdp_utils.cpp)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mhaudit.cost.devices import PROFILES, get_profile
from mhaudit.cost.kernels import choose_kernel, priority_order, sdpa_backend
from mhaudit.cost.sdpa_rules import KernelQuery


def _pick(d: int = 64, dv: int | None = None, dtype: str = "bf16", gpu: str = "a100",
          **facts: Any) -> str:
    return sdpa_backend(d, d if dv is None else dv, dtype, get_profile(gpu), **facts).backend


def test_flash_refuses_any_mask() -> None:
    # check_for_attn_mask: a padding mask on sm80 at bf16 -> efficient, is_causal alone -> flash
    assert _pick(has_arbitrary_mask=True) == "mem_efficient"
    assert _pick(is_causal=True, seq_len_q=512, seq_len_kv=512) == "flash"


def test_flash_head_dim() -> None:
    # check_head_dim_size_flash: one head dim for q, k, v, at most 256
    assert _pick(256) == "flash"
    assert _pick(264) == "mem_efficient"
    assert _pick(64, 128) == "mem_efficient"


def test_flash_hardware() -> None:
    # check_flash_attention_hardware_support: sm80..sm121 (the T4 is sm75)
    assert _pick(dtype="fp16", gpu="t4") == "mem_efficient"
    assert _pick(dtype="fp16", gpu="l4") == "flash"


def test_flash_backward_head_dim_on_sm86_89() -> None:
    # check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120: training on
    # sm89 refuses d in (192, 224], and (224, 256] with dropout; inference takes them
    assert _pick(208, gpu="l40s", training=True) == "mem_efficient"
    assert _pick(208, gpu="l40s") == "flash"
    assert _pick(256, gpu="l40s", training=True) == "flash"
    assert _pick(256, gpu="l40s", training=True, dropout_p=0.1) == "mem_efficient"
    assert _pick(208, gpu="a100", training=True) == "flash"  # sm80 is not in the range


def test_flash_causal_needs_square() -> None:
    # check_flash_causal_non_square_seqlens
    assert _pick(is_causal=True, seq_len_q=16, seq_len_kv=64) == "mem_efficient"
    assert _pick(is_causal=False, seq_len_q=16, seq_len_kv=64) == "flash"


def test_fp32_never_flash_or_cudnn() -> None:
    # check_dtypes_low_precision (flash, cuDNN); efficient takes fp32 (check_tensor_dtype)
    assert _pick(dtype="fp32", gpu="a100") == "mem_efficient"
    assert _pick(dtype="fp32", gpu="h100") == "mem_efficient"
    assert _pick(dtype="bf16", gpu="h100") == "cudnn"


def test_grouped_query_heads() -> None:
    # check_batch_size_and_num_heads_dense: unequal heads need enable_gqa; flash takes
    # it, and so does efficient on CUDA (supports_gqa), not on ROCm
    gqa = {"num_heads": 32, "num_kv_heads": 8}
    assert _pick(enable_gqa=True, **gqa) == "flash"
    assert _pick(dtype="fp32", enable_gqa=True, **gqa) == "mem_efficient"
    assert _pick(dtype="fp32", gpu="mi300x", enable_gqa=True, **gqa) == "math"
    assert _pick(dtype="fp32", enable_gqa=False) == "mem_efficient"
    assert _pick(enable_gqa=False, **gqa) == "math"  # no fused kernel broadcasts heads
    # check_grouped_query_attention: K/V heads must divide query heads
    assert _pick(enable_gqa=True, num_heads=12, num_kv_heads=5) == "math"


def test_efficient_alignment() -> None:
    # check_head_dim_size_mem_efficient / minimum_gemm_alignment: 8 (half), 4 (fp32 on
    # sm80+), 1 (fp32 before sm80, no tensor cores)
    assert _pick(20, dtype="fp32") == "mem_efficient"
    assert _pick(18, dtype="fp32") == "math"
    assert _pick(18, dtype="fp32", gpu="t4") == "mem_efficient"
    assert _pick(20, dtype="fp16", gpu="t4") == "math"


def test_nested_inputs() -> None:
    # check_for_nested_inputs (cuDNN off), check_requires_grad_and_nested (efficient)
    assert _pick(gpu="h100", nested=True) == "flash"
    assert _pick(dtype="fp32", nested=True) == "mem_efficient"
    assert _pick(dtype="fp32", nested=True, training=True) == "math"
    # check_head_dim_size_flash_nested: multiples of 8
    assert _pick(36, dtype="fp16", nested=True, has_arbitrary_mask=False) == "math"


def test_cudnn_head_dims_forward_and_backward() -> None:
    # check_cudnn_tensor_shapes: sm90 forward <= 256; check_cudnn_d256_bprop_head_dim:
    # backward <= 128, or d_qk/d_v 192/128 or 256/256
    assert _pick(256, gpu="h100") == "cudnn"
    assert _pick(256, gpu="h100", training=True) == "cudnn"
    assert _pick(192, 128, gpu="h100", training=True) == "cudnn"
    assert _pick(160, gpu="h100", training=True) == "flash"
    assert _pick(160, gpu="h100") == "cudnn"


def test_cudnn_takes_a_mask_but_not_odd_dropout() -> None:
    # cuDNN checks the mask's shape only (check_attn_mask_shape); check_cudnn_dropout
    assert _pick(gpu="h100", has_arbitrary_mask=True) == "cudnn"
    assert _pick(gpu="h100", dropout_p=0.125, training=True) == "cudnn"
    assert _pick(gpu="h100", dropout_p=0.1, training=True) == "flash"


def test_cudnn_sequence_limits() -> None:
    # check_cudnn_tensor_shapes: one key is refused, one query with dropout too
    assert _pick(gpu="b200", seq_len_q=1, seq_len_kv=1) == "flash"
    assert _pick(gpu="b200", seq_len_q=1, seq_len_kv=4096) == "cudnn"
    assert _pick(gpu="b200", seq_len_q=1, seq_len_kv=4096, dropout_p=0.125) == "flash"


def test_priority_order() -> None:
    # check_prefer_cudnn_attention: cuDNN first on sm90/sm100 (minor 0 or 3) only
    assert priority_order(get_profile("h100"))[0] == "cudnn"
    assert priority_order(get_profile("b200"))[0] == "cudnn"
    assert priority_order(get_profile("a100"))[0] == "flash"
    assert priority_order(get_profile("mi300x"))[0] == "flash"


def test_math_keeps_fp32_scores_for_half() -> None:
    choice = sdpa_backend(20, 20, "fp16", get_profile("t4"))
    assert (choice.backend, choice.materializes_scores, choice.score_element_bytes) == (
        "math", True, 4)
    assert "[check_head_dim_size_mem_efficient]" in choice.reason


# -- property: the chosen kernel never breaks a rule of its own, read from torch's
# source as written here, apart from the implementation under test ---------------

def _violations(backend: str, q: KernelQuery) -> list[str]:
    cc, d, dv, half = q.profile.compute_capability, q.head_dim, q.v_head_dim, q.half
    amd = q.profile.vendor == "amd"
    unequal_heads = q.kv_heads != q.num_heads and not q.nested  # dense inputs only
    bad: list[str] = []
    if backend == "flash":
        bad += ["mask"] * q.has_mask
        bad += ["dims"] * (d != dv or d > 256)
        bad += ["dtype"] * (not half)
        bad += ["sm"] * (not amd and not (8, 0) <= cc <= (12, 1))
        bad += ["gqa"] * (unequal_heads and (not q.enable_gqa or q.num_heads % q.kv_heads != 0))
        bad += ["causal"] * (q.is_causal and not q.nested and q.seq_len_q != q.seq_len_kv)
        # check_head_dim_size_flash_nested: nested inputs cannot be padded to a multiple of 8
        bad += ["nested dims"] * (q.nested and d % 8 != 0)
        consumer = (8, 6) <= cc <= (8, 9) or (12, 0) <= cc <= (12, 1)
        bad += ["sm86 bwd"] * (q.training and consumer and not amd and (
            192 < d <= 224 or (d > 224 and q.dropout_p > 0)))
    elif backend == "mem_efficient":
        align = 8 if half else (4 if cc >= (8, 0) or amd else 1)
        bad += ["align"] * (d % align != 0 or dv % align != 0)
        bad += ["gqa"] * (unequal_heads and (amd or not q.enable_gqa
                                              or q.num_heads % q.kv_heads != 0))
        bad += ["dtype"] * (q.dtype not in ("float16", "float32", "bfloat16"))
        bad += ["nested bwd"] * (q.nested and q.training and not amd)
        # ROCm, AOTriton < 0.12: check_head_dim_size_flash_nested<caller_is_meff>
        bad += ["rocm dims"] * (amd and (d != dv or d % 8 != 0 or d > 256))
    elif backend == "cudnn":
        bad += ["order"] * (amd or cc[0] not in (9, 10) or cc[1] not in (0, 3))
        bad += ["dtype"] * (not half)
        bad += ["nested"] * q.nested
        bad += ["dims"] * (max(d, dv) > 256 or d % 8 != 0 or dv % 8 != 0)
        bad += ["bwd"] * (q.training and max(d, dv) > 128 and (d, dv) not in ((192, 128),
                                                                            (256, 256)))
        bad += ["dropout"] * (q.dropout_p * 16 != int(q.dropout_p * 16))
        bad += ["one key"] * (q.seq_len_kv == 1)
        bad += ["one query with dropout"] * (q.seq_len_q == 1 and q.dropout_p > 0)
        bad += ["gqa"] * (unequal_heads and (not q.enable_gqa or q.num_heads % q.kv_heads != 0))
    return bad


_queries = st.builds(
    KernelQuery,
    head_dim=st.sampled_from([8, 18, 20, 36, 64, 80, 96, 128, 160, 192, 208, 256, 264, 512]),
    v_head_dim=st.sampled_from([64, 128, 192, 256, 20]),
    dtype=st.sampled_from(["float16", "bfloat16", "float32", "float8_e4m3fn", "float64"]),
    profile=st.sampled_from(sorted(PROFILES.values(), key=lambda p: p.key)),
    has_mask=st.booleans(),
    dropout_p=st.sampled_from([0.0, 0.1, 0.125]),
    is_causal=st.booleans(),
    seq_len_q=st.sampled_from([1, 16, 512]),
    seq_len_kv=st.sampled_from([1, 16, 512]),
    num_heads=st.sampled_from([8, 32]),
    num_kv_heads=st.sampled_from([None, 1, 8, 5]),
    enable_gqa=st.booleans(),
    nested=st.booleans(),
    training=st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(_queries)
@example(KernelQuery(head_dim=20, v_head_dim=20, dtype="float16", profile=get_profile("a10"),
                     num_heads=8, nested=True))  # nested: flash needs d % 8 == 0
def test_chosen_kernel_breaks_none_of_its_rules(query: KernelQuery) -> None:
    choice = choose_kernel(query)
    assert _violations(choice.backend, query) == []
    assert choice.materializes_scores == (choice.backend == "math")
    # torch's order: every backend before the chosen one had a reason to refuse
    order = priority_order(query.profile)
    before = order[:order.index(choice.backend)] if choice.backend in order else order
    supported = query.profile.supports(query.dtype)
    for backend in before:
        assert _violations(backend, query) or not supported, backend


@pytest.mark.parametrize("key", ["b200", "gb200", "h20", "l40s", "mi325x", "mi355x"])
def test_2026_profiles_exist(key: str) -> None:
    assert get_profile(key).key == key


def test_b200_datasheet() -> None:
    # DGX B200 datasheet: 2,250 TFLOP/s dense bf16, 8 TB/s, 180 GB usable, NVLink 5
    # 1.8 TB/s bidirectional (900 GB/s a direction), sm100
    b200 = get_profile("b200")
    assert (b200.peak_tflops_bf16, b200.bandwidth_gb_s, b200.memory_bytes) == (
        2250.0, 8000.0, 180 * 10**9)
    assert (b200.nvlink_gb_s, b200.compute_capability) == (900.0, (10, 0))

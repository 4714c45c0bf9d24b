"""Kernel eligibility: flash head-dim buckets, padding waste and the SDPA backend order."""

from __future__ import annotations

import pytest

from mhaudit.cost.devices import get_profile
from mhaudit.cost.kernels import (
    block_kernel,
    flash_kernel_dim,
    padding_waste,
    sdpa_backend,
    target_flash_kernel,
    tensor_core_alignment,
)
from mhaudit.data import Layout
from mhaudit.errors import ConfigError


@pytest.mark.parametrize(
    ("d_k", "version", "expected"),
    [
        (8, 2, 32), (20, 2, 32), (32, 2, 32), (64, 2, 64), (80, 2, 96), (128, 2, 128),
        (136, 2, 192), (256, 2, 256), (257, 2, None), (320, 2, None),
        (8, 3, 64), (32, 3, 64), (64, 3, 64), (80, 3, 96), (160, 3, 192), (320, 3, None),
    ],
)
def test_flash_kernel_dim(d_k: int, version: int, expected: int | None) -> None:
    assert flash_kernel_dim(d_k, version) == expected


def test_flash_kernel_dim_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        flash_kernel_dim(0, 2)
    with pytest.raises(ValueError):
        flash_kernel_dim(64, 1)


def test_padding_waste() -> None:
    # 80 in a 96 kernel: 16 of 96 columns are padding = 1/6
    assert padding_waste(80, 96) == pytest.approx(1 / 6)
    # 8 in FA3's 64 kernel: 56 / 64
    assert padding_waste(8, 64) == pytest.approx(0.875)
    assert padding_waste(128, 128) == 0.0
    assert padding_waste(320, None) == 0.0


def test_tensor_core_alignment() -> None:
    assert tensor_core_alignment("bf16") == 8
    assert tensor_core_alignment("float32") == 4
    assert tensor_core_alignment("fp8") == 16


def test_flash_on_a100_pads_80_to_96() -> None:
    choice = sdpa_backend(80, 80, "bfloat16", get_profile("a100"))
    assert (choice.backend, choice.kernel_head_dim) == ("flash", 96)
    assert choice.padding_waste == pytest.approx(1 / 6)
    assert not choice.materializes_scores


def test_cudnn_first_on_hopper() -> None:
    assert sdpa_backend(128, 128, "bf16", get_profile("h100")).backend == "cudnn"
    # cuDNN on sm90 runs d ≤ 256 forward, but its backward only ≤ 128, 192/128 or 256/256
    assert sdpa_backend(192, 192, "bf16", get_profile("h100")).backend == "cudnn"
    assert sdpa_backend(192, 192, "bf16", get_profile("h100"), training=True).backend == "flash"


def test_above_256_falls_to_mem_efficient() -> None:
    choice = sdpa_backend(320, 320, "bf16", get_profile("h100"))
    assert choice.backend == "mem_efficient"
    assert "256" in choice.reason


def test_fp32_skips_flash() -> None:
    assert sdpa_backend(64, 64, "float32", get_profile("a100")).backend == "mem_efficient"


def test_math_fallback_materializes_in_fp32_for_half() -> None:
    # T4 (sm75) has no flash; d_k = 20 is not a multiple of 8, so mem-efficient is out too
    choice = sdpa_backend(20, 20, "float16", get_profile("t4"))
    assert choice.backend == "math"
    assert choice.materializes_scores
    assert choice.score_element_bytes == 4
    assert "mem-efficient" in choice.reason


def test_fp32_mem_efficient_needs_multiple_of_4() -> None:
    assert sdpa_backend(20, 20, "float32", get_profile("a100")).backend == "mem_efficient"
    assert sdpa_backend(18, 18, "float32", get_profile("a100")).backend == "math"


def test_arbitrary_mask_rules_out_flash() -> None:
    choice = sdpa_backend(64, 64, "bf16", get_profile("a100"), has_arbitrary_mask=True)
    assert choice.backend == "mem_efficient"


def test_different_v_head_dim_rules_out_flash() -> None:
    assert sdpa_backend(64, 128, "bf16", get_profile("a100")).backend == "mem_efficient"


def test_amd_gets_a_fused_kernel_without_padding_model() -> None:
    choice = sdpa_backend(128, 128, "bf16", get_profile("mi300x"))
    assert choice.backend == "flash"
    assert choice.kernel_head_dim is None
    assert target_flash_kernel(128, get_profile("mi300x")) is None


def test_target_flash_kernel() -> None:
    assert target_flash_kernel(80, get_profile("h100")) == (3, 96)
    assert target_flash_kernel(80, get_profile("a100")) == (2, 96)
    assert target_flash_kernel(80, get_profile("t4")) is None


def _layout(implementation: str, d_k: int = 64) -> Layout:
    return Layout(
        name="attn", module_type="M", kind="self", implementation=implementation, d_model=8 * d_k,
        num_heads=8, num_kv_heads=8, head_dim=d_k, v_head_dim=d_k, batch_size=1, seq_len_q=16,
        seq_len_kv=16, d_out=8 * d_k, causal=False, scale=None, q=None, k=None, v=None, o=None,
    )


def test_eager_always_materializes() -> None:
    choice = block_kernel(_layout("eager"), "bf16", get_profile("h100"))
    assert choice.backend == "eager"
    assert choice.materializes_scores
    assert choice.score_element_bytes == 2
    assert not block_kernel(_layout("sdpa"), "bf16", get_profile("h100")).materializes_scores


def test_unknown_dtype_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown dtype"):
        sdpa_backend(64, 64, "float13", get_profile("h100"))


def test_t4_has_no_bf16() -> None:
    t4 = get_profile("t4")
    assert not t4.supports("bfloat16") and t4.supports("float16")
    choice = sdpa_backend(64, 64, "bf16", t4)
    # no fused kernel takes bf16 on sm75: the math fallback, scores in fp32, and it says so
    assert (choice.backend, choice.score_element_bytes) == ("math", 4)
    assert "no bfloat16 support" in choice.reason and "fp16" in choice.reason
    assert sdpa_backend(64, 64, "fp16", t4).backend == "mem_efficient"

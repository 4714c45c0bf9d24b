"""Attention-kernel eligibility: which kernel a head layout gets on a GPU, and what it wastes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from mhaudit.cost.devices import HALF_DTYPES, GpuProfile, canonical_dtype, dtype_bytes
from mhaudit.cost.sdpa_rules import (
    CUDNN_CHECKS,
    EFFICIENT_CHECKS,
    FLASH_CHECKS,
    KernelQuery,
    cudnn_first,
    refusal,
    sm,
)
from mhaudit.data import Layout

FA2_HEAD_DIMS: tuple[int, ...] = (32, 64, 96, 128, 192, 256)
"""Head dims FlashAttention 2 compiles kernels for (flash_api.cpp, static_switch.h)."""
FA3_HEAD_DIMS: tuple[int, ...] = (64, 96, 128, 192, 256)
"""Head dims FlashAttention 3 (Hopper) compiles kernels for (hopper/flash_api.cpp)."""

@dataclass(frozen=True)
class KernelChoice:
    """The attention kernel a layout gets on a target, and its costs."""

    backend: str
    """One of ``cudnn``, ``flash``, ``mem_efficient``, ``math`` or ``eager``."""
    kernel_head_dim: int | None
    """Compiled head dim the kernel runs; None when the kernel has no fixed sizes."""
    padding_waste: float
    """Fraction of the head-dim work spent on padding (0 when none)."""
    materializes_scores: bool
    """True when the b·h·n_q·n_kv score matrix is written to memory."""
    score_element_bytes: int
    """Bytes per materialised score (fp32 for the math fallback on half inputs)."""
    reason: str
    """Why this backend was chosen, naming what ruled out the faster ones."""


def flash_head_dims(version: int) -> tuple[int, ...]:
    """Compiled head dims of FlashAttention ``version`` (2 or 3)."""
    if version == 2:
        return FA2_HEAD_DIMS
    if version == 3:
        return FA3_HEAD_DIMS
    raise ValueError(f"unknown FlashAttention version {version}")


def flash_kernel_dim(d_k: int, version: int) -> int | None:
    """The compiled kernel that runs head dim ``d_k``: the next size up, None above 256."""
    if d_k < 1:
        raise ValueError(f"head dim must be positive, got {d_k}")
    return next((dim for dim in flash_head_dims(version) if dim >= d_k), None)


def padding_waste(d_k: int, kernel_head_dim: int | None) -> float:
    """Fraction of a ``kernel_head_dim`` kernel's head-dim work that pads ``d_k``."""
    if kernel_head_dim is None or kernel_head_dim <= d_k:
        return 0.0
    return 1.0 - d_k / kernel_head_dim


def tensor_core_alignment(dtype_name: str) -> int:
    """GEMM dimension multiple tensor cores need: 8 for fp16/bf16, 4 for tf32, 16 for 8-bit."""
    size = dtype_bytes(dtype_name)
    return {1: 16, 2: 8}.get(size, 4)


def round_up(value: int, multiple: int) -> int:
    """Smallest multiple of ``multiple`` that is at least ``value``."""
    return -(-value // multiple) * multiple


Candidate = Callable[[KernelQuery], "KernelChoice | str"]
"""A backend: its KernelChoice when it runs the query, else why it refuses."""


def _fused(backend: str, query: KernelQuery, reason: str, kernel_dim: int | None = None,
           waste: float = 0.0) -> KernelChoice:
    return KernelChoice(backend, kernel_dim, waste, False, dtype_bytes(query.dtype), reason)


def _cudnn(q: KernelQuery) -> KernelChoice | str:
    """cuDNN fused attention (can_use_cudnn_attention)."""
    refused = refusal(CUDNN_CHECKS, q)
    return refused or _fused("cudnn", q, f"cuDNN fused attention on {sm(q)} (d_k = {q.head_dim})")


def _flash(q: KernelQuery) -> KernelChoice | str:
    """PyTorch's FlashAttention-2 (can_use_flash_attention)."""
    refused = refusal(FLASH_CHECKS, q)
    if refused:
        return refused
    if q.rocm:
        return _fused("flash", q, f"ROCm flash kernel on {q.profile.name} (padding not modelled)")
    kernel = flash_kernel_dim(q.head_dim, 2)
    assert kernel is not None
    waste = padding_waste(q.head_dim, kernel)
    return _fused(
        "flash", q,
        f"PyTorch's FlashAttention-2 kernel runs d_k = {q.head_dim} in its {kernel} kernel"
        + (f" ({waste:.1%} padding)" if waste else ""),
        kernel, waste,
    )


def _mem_efficient(q: KernelQuery) -> KernelChoice | str:
    """Memory-efficient attention (can_use_mem_efficient_attention)."""
    refused = refusal(EFFICIENT_CHECKS, q)
    return refused or _fused("mem_efficient", q, "memory-efficient kernel")


CANDIDATES: dict[str, Candidate] = {
    "cudnn": _cudnn, "flash": _flash, "mem_efficient": _mem_efficient,
}
"""The fused backends by name."""


def priority_order(profile: GpuProfile) -> tuple[str, ...]:
    """torch's order (sdp_utils.cpp ``priority_order``): cuDNN first where
    ``check_prefer_cudnn_attention`` holds, else flash, efficient, math; math accepts
    everything, so cuDNN after it never runs."""
    fused = ("flash", "mem_efficient")
    return ("cudnn", *fused) if cudnn_first(profile) else fused


def _math(reasons: list[str], dtype: str) -> KernelChoice:
    score_bytes = 4 if dtype in HALF_DTYPES else dtype_bytes(dtype)
    return KernelChoice(
        "math", None, 0.0, True, score_bytes, "; ".join(reasons) or "no fused kernel applies",
    )


def choose_kernel(query: KernelQuery) -> KernelChoice:
    """The backend PyTorch SDPA runs ``query`` on: the first of :func:`priority_order`
    whose checks (:mod:`mhaudit.cost.sdpa_rules`) all pass, else math (scores in fp32
    for half inputs). The reason names the check that ruled out each faster backend."""
    if not query.profile.supports(query.dtype):
        return _math([f"{query.profile.name} has no {query.dtype} support; no fused kernel "
                      "runs it (audit with --dtype fp16 for this GPU)"], query.dtype)
    reasons: list[str] = []
    for name in priority_order(query.profile):
        outcome = CANDIDATES[name](query)
        if isinstance(outcome, KernelChoice):
            return replace(outcome, reason="; ".join(reasons)) if reasons else outcome
        reasons.append(outcome)
    return _math(reasons, query.dtype)


def sdpa_backend(
    head_dim: int,
    v_head_dim: int,
    dtype_name: str,
    profile: GpuProfile,
    has_arbitrary_mask: bool = False,
    **facts: Any,
) -> KernelChoice:
    """:func:`choose_kernel` for one call described by its head dims, dtype and
    ``facts`` (the other fields of :class:`KernelQuery`: dropout_p, is_causal,
    seq_len_q, seq_len_kv, num_heads, num_kv_heads, enable_gqa, nested, training)."""
    return choose_kernel(KernelQuery(head_dim, v_head_dim, canonical_dtype(dtype_name),
                                     profile, has_arbitrary_mask, **facts))


def layout_query(layout: Layout, dtype_name: str, profile: GpuProfile, *,
                 training: bool = False, dropout_p: float | None = None) -> KernelQuery:
    """The SDPA call a block makes, from what the detector read: its mask, dropout,
    causal flag, shapes and grouped-query heads; ``training`` applies the backward's
    limits, ``dropout_p`` replaces the traced (inference) dropout."""
    # a causal triangle built from positions alone is what transformers passes as
    # is_causal on real inputs; one query sees every key (is_causal off, as HF sets it)
    causal = layout.causal is True and not layout.explicit_mask and layout.seq_len_q > 1
    return KernelQuery(
        head_dim=layout.head_dim, v_head_dim=layout.v_head_dim,
        dtype=canonical_dtype(dtype_name), profile=profile,
        has_mask=layout.explicit_mask,
        dropout_p=layout.dropout_p if dropout_p is None else dropout_p,
        is_causal=causal, seq_len_q=layout.seq_len_q, seq_len_kv=layout.seq_len_kv,
        batch_size=layout.batch_size, num_heads=layout.num_heads,
        num_kv_heads=layout.num_kv_heads if layout.sdpa_gqa else None,
        enable_gqa=layout.sdpa_gqa, training=training,
    )


def block_kernel(layout: Layout, dtype_name: str, profile: GpuProfile, *,
                 training: bool = False) -> KernelChoice:
    """The kernel a block runs on ``profile``: eager code always materialises the scores;
    flex_attention runs its own compiled kernel; SDPA as :func:`choose_kernel` decides for
    the block's call."""
    if layout.implementation == "eager":
        dtype = canonical_dtype(dtype_name)
        unsupported = (f"; {profile.name} has no {dtype} support (audit with --dtype fp16)"
                       if not profile.supports(dtype) else "")
        return KernelChoice(
            "eager", None, 0.0, True, dtype_bytes(dtype),
            "explicit softmax(QKᵀ) in eager code materialises the scores" + unsupported,
        )
    if layout.implementation == "flex":
        return KernelChoice(
            "flex", None, 0.0, False, dtype_bytes(canonical_dtype(dtype_name)),
            "flex_attention, compiled: one fused Triton kernel over the tiles its block "
            "mask visits")
    return choose_kernel(layout_query(layout, dtype_name, profile, training=training))


def target_flash_kernel(d_k: int, profile: GpuProfile) -> tuple[int, int | None] | None:
    """(FlashAttention version, kernel dim) for ``d_k`` on ``profile``; None without flash."""
    version = profile.flash_attention_version
    if version is None:
        return None
    return version, flash_kernel_dim(d_k, version)

"""Attention-kernel eligibility: which kernel a head layout gets on a GPU, and what it wastes."""

from __future__ import annotations

from dataclasses import dataclass

from mhaudit.cost.devices import HALF_DTYPES, GpuProfile, canonical_dtype, dtype_bytes
from mhaudit.data import Layout

FA2_HEAD_DIMS: tuple[int, ...] = (32, 64, 96, 128, 192, 256)
"""Head dims FlashAttention 2 compiles kernels for (flash_api.cpp, static_switch.h)."""
FA3_HEAD_DIMS: tuple[int, ...] = (64, 96, 128, 192, 256)
"""Head dims FlashAttention 3 (Hopper) compiles kernels for (hopper/flash_api.cpp)."""
FLASH_MAX_HEAD_DIM = 256
"""Largest head dim any FlashAttention kernel runs."""
CUDNN_MAX_HEAD_DIM = 128
"""Largest head dim PyTorch's cuDNN attention backend is assumed to accept."""

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


def _math(reasons: list[str], dtype: str) -> KernelChoice:
    score_bytes = 4 if dtype in HALF_DTYPES else dtype_bytes(dtype)
    return KernelChoice(
        "math", None, 0.0, True, score_bytes, "; ".join(reasons) or "no fused kernel applies",
    )


def sdpa_backend(
    head_dim: int,
    v_head_dim: int,
    dtype_name: str,
    profile: GpuProfile,
    has_arbitrary_mask: bool = False,
) -> KernelChoice:
    """The backend PyTorch SDPA picks on ``profile``: cuDNN (sm90), flash, mem-efficient, math.

    Follows sdp_utils.cpp as summarised in DESIGN.md. Ignores run-time limits this
    model cannot see (stride layouts, dropout on some backends, nested tensors).
    """
    dtype = canonical_dtype(dtype_name)
    half = dtype in HALF_DTYPES
    same_dim = head_dim == v_head_dim
    reasons: list[str] = []
    nvidia = profile.vendor == "nvidia"

    if nvidia and profile.compute_capability >= (9, 0):
        if not half:
            reasons.append(f"cuDNN needs fp16/bf16, not {dtype}")
        elif has_arbitrary_mask:
            reasons.append("cuDNN is not used with an arbitrary mask")
        elif head_dim % 8 or head_dim > CUDNN_MAX_HEAD_DIM or not same_dim:
            reasons.append("cuDNN needs equal q/k/v head dims, a multiple of 8, "
                           f"≤ {CUDNN_MAX_HEAD_DIM}")
        else:
            return KernelChoice(
                "cudnn", None, 0.0, False, dtype_bytes(dtype),
                f"cuDNN fused attention on sm{profile.compute_capability[0]}"
                f"{profile.compute_capability[1]} (d_k = {head_dim})",
            )

    flash_ok = profile.flash_attention_version is not None or not nvidia
    if not flash_ok:
        reasons.append(f"flash needs sm80+, {profile.name} is sm"
                       f"{profile.compute_capability[0]}{profile.compute_capability[1]}")
    elif not half:
        reasons.append(f"flash needs fp16/bf16, not {dtype}")
    elif has_arbitrary_mask:
        reasons.append("flash does not take an arbitrary mask")
    elif not same_dim:
        reasons.append(f"flash needs equal q/k/v head dims ({head_dim} ≠ {v_head_dim})")
    elif head_dim > FLASH_MAX_HEAD_DIM:
        reasons.append(f"flash needs d_k ≤ {FLASH_MAX_HEAD_DIM}, got {head_dim}")
    elif not nvidia:
        return KernelChoice(
            "flash", None, 0.0, False, dtype_bytes(dtype),
            f"ROCm flash kernel on {profile.name} (padding not modelled)",
        )
    else:
        kernel = flash_kernel_dim(head_dim, 2)
        assert kernel is not None
        waste = padding_waste(head_dim, kernel)
        return KernelChoice(
            "flash", kernel, waste, False, dtype_bytes(dtype),
            f"PyTorch's FlashAttention-2 kernel runs d_k = {head_dim} in its {kernel} kernel"
            + (f" ({waste:.1%} padding)" if waste else ""),
        )

    if dtype in HALF_DTYPES or dtype == "float32":
        align = 8 if half else 4
        if head_dim % align or v_head_dim % align:
            reasons.append(f"mem-efficient needs head dims in multiples of {align} for {dtype}")
        else:
            return KernelChoice(
                "mem_efficient", None, 0.0, False, dtype_bytes(dtype),
                "memory-efficient kernel (" + "; ".join(reasons) + ")",
            )
    else:
        reasons.append(f"mem-efficient needs fp16, bf16 or fp32, not {dtype}")
    return _math(reasons, dtype)


def block_kernel(layout: Layout, dtype_name: str, profile: GpuProfile) -> KernelChoice:
    """The kernel a block runs on ``profile``: eager code always materialises the scores."""
    if layout.implementation == "eager":
        dtype = canonical_dtype(dtype_name)
        return KernelChoice(
            "eager", None, 0.0, True, dtype_bytes(dtype),
            "explicit softmax(QKᵀ) in eager code materialises the scores",
        )
    return sdpa_backend(layout.head_dim, layout.v_head_dim, dtype_name, profile)


def target_flash_kernel(d_k: int, profile: GpuProfile) -> tuple[int, int | None] | None:
    """(FlashAttention version, kernel dim) for ``d_k`` on ``profile``; None without flash."""
    version = profile.flash_attention_version
    if version is None:
        return None
    return version, flash_kernel_dim(d_k, version)

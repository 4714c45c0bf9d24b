"""Attention-kernel eligibility: which kernel a head layout gets on a GPU, and what it wastes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

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


@dataclass(frozen=True)
class KernelQuery:
    """What SDPA's backend choice depends on for one call."""

    head_dim: int
    v_head_dim: int
    dtype: str
    """Canonical dtype name."""
    profile: GpuProfile
    has_arbitrary_mask: bool = False

    @property
    def half(self) -> bool:
        """fp16 or bf16."""
        return self.dtype in HALF_DTYPES

    @property
    def nvidia(self) -> bool:
        """An NVIDIA profile (cuDNN and the FlashAttention head-dim table apply)."""
        return self.profile.vendor == "nvidia"

    @property
    def sm(self) -> str:
        """``sm90`` for compute capability 9.0."""
        major, minor = self.profile.compute_capability
        return f"sm{major}{minor}"


Candidate = Callable[[KernelQuery], "KernelChoice | str | None"]
"""A backend check: its KernelChoice when it runs the query, a reason when it refuses,
None when it does not apply on the profile at all."""


def _fused(backend: str, query: KernelQuery, reason: str, kernel_dim: int | None = None,
           waste: float = 0.0) -> KernelChoice:
    return KernelChoice(backend, kernel_dim, waste, False, dtype_bytes(query.dtype), reason)


def _cudnn(q: KernelQuery) -> KernelChoice | str | None:
    """cuDNN fused attention: sm90+, fp16/bf16, no arbitrary mask, equal d ≤ 128, × 8."""
    if not q.nvidia or q.profile.compute_capability < (9, 0):
        return None
    if not q.half:
        return f"cuDNN needs fp16/bf16, not {q.dtype}"
    if q.has_arbitrary_mask:
        return "cuDNN is not used with an arbitrary mask"
    if q.head_dim % 8 or q.head_dim > CUDNN_MAX_HEAD_DIM or q.head_dim != q.v_head_dim:
        return f"cuDNN needs equal q/k/v head dims, a multiple of 8, ≤ {CUDNN_MAX_HEAD_DIM}"
    return _fused("cudnn", q, f"cuDNN fused attention on {q.sm} (d_k = {q.head_dim})")


def _flash(q: KernelQuery) -> KernelChoice | str | None:
    """PyTorch's FlashAttention-2: sm80+ (or ROCm), fp16/bf16, no mask, equal d ≤ 256."""
    if q.nvidia and q.profile.flash_attention_version is None:
        return f"flash needs sm80+, {q.profile.name} is {q.sm}"
    if not q.half:
        return f"flash needs fp16/bf16, not {q.dtype}"
    if q.has_arbitrary_mask:
        return "flash does not take an arbitrary mask"
    if q.head_dim != q.v_head_dim:
        return f"flash needs equal q/k/v head dims ({q.head_dim} ≠ {q.v_head_dim})"
    if q.head_dim > FLASH_MAX_HEAD_DIM:
        return f"flash needs d_k ≤ {FLASH_MAX_HEAD_DIM}, got {q.head_dim}"
    if not q.nvidia:
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


def _mem_efficient(q: KernelQuery) -> KernelChoice | str | None:
    """Memory-efficient attention: fp16/bf16 (head dims × 8) or fp32 (× 4)."""
    if not (q.half or q.dtype == "float32"):
        return f"mem-efficient needs fp16, bf16 or fp32, not {q.dtype}"
    align = 8 if q.half else 4
    if q.head_dim % align or q.v_head_dim % align:
        return f"mem-efficient needs head dims in multiples of {align} for {q.dtype}"
    return _fused("mem_efficient", q, "memory-efficient kernel")


SDPA_BACKENDS: tuple[tuple[str, Candidate], ...] = (
    ("cudnn", _cudnn),
    ("flash", _flash),
    ("mem_efficient", _mem_efficient),
)
"""PyTorch SDPA's backend order (sdp_utils.cpp): the first candidate that accepts runs;
when none does, the math fallback materialises the scores."""


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
    """The backend PyTorch SDPA picks on ``profile``: the first of ``SDPA_BACKENDS`` that
    accepts the layout, else math (scores in fp32 for half inputs).

    Follows sdp_utils.cpp as summarised in DESIGN.md. The reason names what ruled out
    each faster backend. Ignores run-time limits this model cannot see (stride
    layouts, dropout on some backends, nested tensors).
    """
    query = KernelQuery(head_dim, v_head_dim, canonical_dtype(dtype_name), profile,
                        has_arbitrary_mask)
    if not profile.supports(query.dtype):
        return _math([f"{profile.name} has no {query.dtype} support; no fused kernel runs it "
                      "(audit with --dtype fp16 for this GPU)"], query.dtype)
    reasons: list[str] = []
    for _, candidate in SDPA_BACKENDS:
        outcome = candidate(query)
        if isinstance(outcome, KernelChoice):
            if reasons and outcome.backend == "mem_efficient":
                return replace(outcome, reason=f"{outcome.reason} ({'; '.join(reasons)})")
            return outcome
        if outcome is not None:
            reasons.append(outcome)
    return _math(reasons, query.dtype)


def block_kernel(layout: Layout, dtype_name: str, profile: GpuProfile) -> KernelChoice:
    """The kernel a block runs on ``profile``: eager code always materialises the scores."""
    if layout.implementation == "eager":
        dtype = canonical_dtype(dtype_name)
        unsupported = (f"; {profile.name} has no {dtype} support (audit with --dtype fp16)"
                       if not profile.supports(dtype) else "")
        return KernelChoice(
            "eager", None, 0.0, True, dtype_bytes(dtype),
            "explicit softmax(QKᵀ) in eager code materialises the scores" + unsupported,
        )
    return sdpa_backend(layout.head_dim, layout.v_head_dim, dtype_name, profile)


def target_flash_kernel(d_k: int, profile: GpuProfile) -> tuple[int, int | None] | None:
    """(FlashAttention version, kernel dim) for ``d_k`` on ``profile``; None without flash."""
    version = profile.flash_attention_version
    if version is None:
        return None
    return version, flash_kernel_dim(d_k, version)

"""PyTorch SDPA's backend checks, one function per check, in torch's own order.

Read from torch 2.13: the constraint lists of ``can_use_cudnn_attention``,
``can_use_flash_attention`` and ``can_use_mem_efficient_attention`` in
``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp`` and the shared checks in
``sdp_utils_cpp.h`` (shipped in the wheel under ``torch/include``). Each check returns
None when it passes and, when it refuses, a sentence that names torch's check. Checks on
what an audit cannot see (strides, storage offsets, runtime switches, a mask that needs a
gradient) pass.

Judgements where versions differ: grouped-query heads (``enable_gqa`` with fewer K/V
heads) pass flash, cuDNN and, on CUDA, memory-efficient attention (its dense checks take
``supports_gqa`` there and not on ROCm, in the sources of the releases around this one,
though the wheel's ``F.scaled_dot_product_attention`` docs still name flash alone);
cuDNN's head-dim limits are those of a runtime cuDNN newer than 9.22 (the one under
which torch puts cuDNN first): 256 forward on sm90/sm10x and 128 elsewhere, backward
≤ 128 or d_qk/d_v = 192/128 or 256/256. On ROCm, AOTriton's flash and memory-efficient
kernels take head dims ≤ 256 (the limit of AOTriton < 0.12).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mhaudit.cost.devices import HALF_DTYPES, GpuProfile

CUDNN_MAX_DIM_SIZE = 65535
"""Largest batch size or head count cuDNN SDPA takes (check_cudnn_tensor_shapes)."""
FLASH_MAX_HEAD_DIM = 256
"""Largest head dim torch's flash backend takes (check_head_dim_size_flash)."""


@dataclass(frozen=True)
class KernelQuery:
    """What SDPA's backend choice depends on for one call, as torch's checks read it."""

    head_dim: int
    """d_qk: the last dim of Q and K."""
    v_head_dim: int
    dtype: str
    """Canonical dtype name of Q, K and V."""
    profile: GpuProfile
    has_mask: bool = False
    """An ``attn_mask`` tensor is passed (``is_causal`` alone is not a mask)."""
    dropout_p: float = 0.0
    is_causal: bool = False
    seq_len_q: int | None = None
    """Query positions n_q; None when unknown (the checks on it pass)."""
    seq_len_kv: int | None = None
    batch_size: int = 1
    num_heads: int = 1
    """Heads of Q at the call."""
    num_kv_heads: int | None = None
    """Heads of K and V at the call (None: as Q; fewer only with ``enable_gqa``)."""
    enable_gqa: bool = False
    nested: bool = False
    """Q, K or V is a nested (jagged) tensor."""
    training: bool = False
    """The inputs need a gradient: torch applies the backward's limits too."""

    @property
    def kv_heads(self) -> int:
        """Heads of K and V at the call."""
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def half(self) -> bool:
        """fp16 or bf16."""
        return self.dtype in HALF_DTYPES

    @property
    def cc(self) -> tuple[int, int]:
        """The profile's compute capability."""
        return self.profile.compute_capability

    @property
    def rocm(self) -> bool:
        """An AMD profile: torch's ROCm build (AOTriton kernels, no cuDNN)."""
        return self.profile.vendor == "amd"


Check = Callable[[KernelQuery], "str | None"]
"""One of torch's constraints: None when it passes, else why it refuses."""


def sm(query: KernelQuery) -> str:
    """``sm90`` for compute capability 9.0."""
    return "sm{}{}".format(*query.cc)


# -- shared checks (sdp_utils_cpp.h) -------------------------------------------------

def no_mask(q: KernelQuery) -> str | None:
    """check_for_attn_mask: flash takes no attn_mask at all."""
    return "flash refuses any attn_mask [check_for_attn_mask]" if q.has_mask else None


def nonzero_lengths(q: KernelQuery) -> str | None:
    """check_nonzero_sequence_lengths_dense."""
    if 0 in (q.seq_len_q, q.seq_len_kv):
        return "fused kernels need non-empty sequences [check_nonzero_sequence_lengths_dense]"
    return None


def heads(supports_gqa: bool) -> Check:
    """check_batch_size_and_num_heads_dense<supports_gqa>: equal heads, or with
    ``enable_gqa`` where supported, K/V heads that divide Q's."""
    def check(q: KernelQuery) -> str | None:
        if q.nested or q.kv_heads == q.num_heads:
            return None
        if not q.enable_gqa:
            return ("fused kernels need as many K/V heads as query heads without enable_gqa "
                    "[check_batch_size_and_num_heads_dense]")
        if not supports_gqa:
            return "no grouped-query heads (enable_gqa) on this backend"
        if q.num_heads % q.kv_heads:
            return (f"K/V heads ({q.kv_heads}) must divide query heads ({q.num_heads}) "
                    "[check_grouped_query_attention]")
        return None
    return check


def half_dtype(backend: str) -> Check:
    """check_dtypes_low_precision: fp16/bf16 on sm80+, fp16 before."""
    def check(q: KernelQuery) -> str | None:
        ok = q.half if q.cc >= (8, 0) or q.rocm else q.dtype == "float16"
        if ok:
            return None
        return f"{backend} needs fp16/bf16, not {q.dtype} [check_dtypes_low_precision]"
    return check


# -- flash (can_use_flash_attention) -------------------------------------------------

def flash_head_dim(q: KernelQuery) -> str | None:
    """check_head_dim_size_flash: q, k, v share one head dim ≤ 256."""
    if q.head_dim != q.v_head_dim:
        return (f"flash needs one head dim for q, k and v ({q.head_dim} ≠ {q.v_head_dim}) "
                "[check_head_dim_size_flash]")
    if q.head_dim > FLASH_MAX_HEAD_DIM:
        return f"flash needs d ≤ {FLASH_MAX_HEAD_DIM}, got {q.head_dim} [check_head_dim_size_flash]"
    return None


def flash_hardware(q: KernelQuery) -> str | None:
    """check_flash_attention_hardware_support: sm80 to sm121 (any AOTriton GPU on ROCm)."""
    if q.rocm or (8, 0) <= q.cc <= (12, 1):
        return None
    return (f"flash needs sm80–sm121, {q.profile.name} is {sm(q)} "
            "[check_flash_attention_hardware_support]")


def flash_training_head_dim(q: KernelQuery) -> str | None:
    """check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120: training on
    sm86–sm89 and sm120–sm121 takes d ≤ 192, or d > 224 without dropout."""
    consumer = (8, 6) <= q.cc <= (8, 9) or (12, 0) <= q.cc <= (12, 1)
    if q.rocm or not q.training or not consumer:
        return None
    if q.head_dim <= 192 or (q.dropout_p == 0 and q.head_dim > 224):
        return None
    return (f"flash's backward on {sm(q)} refuses d = {q.head_dim} (d ∈ (192, 224], or "
            "(224, 256] with dropout) "
            "[check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120]")


def flash_causal_square(q: KernelQuery) -> str | None:
    """check_flash_causal_non_square_seqlens: is_causal needs n_q = n_kv."""
    if q.is_causal and not q.nested and None not in (q.seq_len_q, q.seq_len_kv) \
            and q.seq_len_q != q.seq_len_kv:
        return (f"flash refuses is_causal with n_q ≠ n_kv ({q.seq_len_q} ≠ {q.seq_len_kv}) "
                "[check_flash_causal_non_square_seqlens]")
    return None


def flash_nested(q: KernelQuery) -> str | None:
    """check_head_dim_size_flash_nested: nested inputs need d a multiple of 8."""
    if q.nested and q.head_dim % 8:
        return "flash on nested inputs needs d a multiple of 8 [check_head_dim_size_flash_nested]"
    return None


FLASH_CHECKS: tuple[Check, ...] = (
    no_mask, flash_head_dim, flash_hardware, flash_training_head_dim, flash_causal_square,
    half_dtype("flash"), flash_nested, heads(supports_gqa=True), nonzero_lengths,
)
"""can_use_flash_attention's constraints, in torch's order."""


# -- memory-efficient (can_use_mem_efficient_attention) ------------------------------

def efficient_hardware(q: KernelQuery) -> str | None:
    """check_mem_efficient_hardware_support: sm50 to sm121."""
    if q.rocm or (5, 0) <= q.cc <= (12, 1):
        return None
    return f"mem-efficient needs sm50–sm121, got {sm(q)}"


def gemm_alignment(q: KernelQuery) -> int:
    """minimum_gemm_alignment: 8 for fp16/bf16 (tensor cores), 4 for fp32 on sm80+,
    1 for fp32 before sm80 (no tensor cores); 8/4 on ROCm."""
    if q.half:
        return 8
    return 4 if q.rocm or q.cc >= (8, 0) else 1


def efficient_head_dim(q: KernelQuery) -> str | None:
    """check_head_dim_size_mem_efficient: head dims multiples of the GEMM alignment (on
    ROCm, AOTriton < 0.12: one head dim, a multiple of 8, ≤ 256)."""
    if q.rocm:
        if q.head_dim != q.v_head_dim or q.head_dim % 8 or q.head_dim > FLASH_MAX_HEAD_DIM:
            return ("mem-efficient on ROCm needs one head dim, a multiple of 8, ≤ 256 "
                    "[check_head_dim_size_flash_nested]")
        return None
    align = gemm_alignment(q)
    if q.head_dim % align or q.v_head_dim % align:
        return (f"mem-efficient needs head dims in multiples of {align} for {q.dtype} "
                "[check_head_dim_size_mem_efficient]")
    return None


def efficient_nested_training(q: KernelQuery) -> str | None:
    """check_requires_grad_and_nested: no training on nested inputs (CUDA)."""
    if q.nested and q.training and not q.rocm:
        return "mem-efficient does not train on nested inputs [check_requires_grad_and_nested]"
    return None


def efficient_dtype(q: KernelQuery) -> str | None:
    """check_tensor_dtype: fp16, bf16 or fp32 on sm80+ (and ROCm), fp16 or fp32 before."""
    allowed = {"float16", "float32"} | ({"bfloat16"} if q.rocm or q.cc >= (8, 0) else set())
    if q.dtype in allowed:
        return None
    return f"mem-efficient needs {', '.join(sorted(allowed))}, not {q.dtype}"


def efficient_heads(q: KernelQuery) -> str | None:
    """check_batch_size_and_num_heads_dense<supports_gqa>: grouped-query heads on CUDA,
    not on ROCm."""
    return heads(supports_gqa=not q.rocm)(q)


EFFICIENT_CHECKS: tuple[Check, ...] = (
    efficient_hardware, efficient_head_dim, efficient_nested_training,
    efficient_heads, nonzero_lengths, efficient_dtype,
)
"""can_use_mem_efficient_attention's constraints, in torch's order."""


# -- cuDNN (can_use_cudnn_attention) -------------------------------------------------

def cudnn_nested(q: KernelQuery) -> str | None:
    """check_for_nested_inputs: nested cuDNN SDPA is off unless an environment switch."""
    return "cuDNN's nested-tensor path is off by default [check_for_nested_inputs]" \
        if q.nested else None


def cudnn_dropout(q: KernelQuery) -> str | None:
    """check_cudnn_dropout: dropout in steps of 1/16."""
    if q.dropout_p * 16 != int(q.dropout_p * 16):
        return f"cuDNN dropout must be a multiple of 1/16, got {q.dropout_p} [check_cudnn_dropout]"
    return None


def cudnn_sm90_or_sm10x(q: KernelQuery) -> bool:
    """sm90 (minor 0) or sm10x: where cuDNN takes head dims to 256."""
    return (q.cc[0] == 9 and q.cc[1] == 0) or q.cc[0] == 10


def cudnn_shapes(q: KernelQuery) -> str | None:
    """check_cudnn_tensor_shapes: b, h ≤ 65535; d_qk, d_v ≤ 256 on sm90/sm10x (else
    128), multiples of 8; n_kv ≠ 1; n_q ≠ 1 with dropout."""
    if q.batch_size > CUDNN_MAX_DIM_SIZE or q.num_heads > CUDNN_MAX_DIM_SIZE:
        return f"cuDNN takes batch and heads ≤ {CUDNN_MAX_DIM_SIZE} [check_cudnn_tensor_shapes]"
    limit = 256 if cudnn_sm90_or_sm10x(q) else 128
    if max(q.head_dim, q.v_head_dim) > limit:
        return f"cuDNN on {sm(q)} takes head dims ≤ {limit} [check_cudnn_tensor_shapes]"
    if q.head_dim % 8 or q.v_head_dim % 8:
        return "cuDNN needs head dims in multiples of 8 [check_cudnn_tensor_shapes]"
    if q.seq_len_kv == 1:
        return "cuDNN refuses one key (n_kv = 1) [check_cudnn_tensor_shapes]"
    if q.dropout_p and q.seq_len_q == 1:
        return "cuDNN refuses one query with dropout [check_cudnn_tensor_shapes]"
    return None


def cudnn_backward(q: KernelQuery) -> str | None:
    """check_cudnn_d256_bprop_head_dim: training on sm90/sm10x takes d_qk, d_v ≤ 128,
    or 192/128, or 256/256."""
    if not q.training or not cudnn_sm90_or_sm10x(q):
        return None
    dims = (q.head_dim, q.v_head_dim)
    if max(dims) <= 128 or dims in ((192, 128), (256, 256)):
        return None
    return (f"cuDNN's backward refuses d_qk/d_v = {q.head_dim}/{q.v_head_dim} (≤ 128, "
            "192/128 or 256/256) [check_cudnn_d256_bprop_head_dim]")


CUDNN_CHECKS: tuple[Check, ...] = (
    cudnn_nested, half_dtype("cuDNN"), cudnn_dropout, nonzero_lengths,
    heads(supports_gqa=True), cudnn_shapes, cudnn_backward,
)
"""can_use_cudnn_attention's constraints, in torch's order (hardware: its place in the
order already needs sm90/sm100)."""


def cudnn_first(profile: GpuProfile) -> bool:
    """check_prefer_cudnn_attention: cuDNN leads the order on sm90/sm100 (major 9 or 10,
    minor 0 or 3) with a runtime cuDNN newer than 9.15; elsewhere it comes after math,
    so it never runs unless asked for."""
    major, minor = profile.compute_capability
    return profile.vendor == "nvidia" and major in (9, 10) and minor in (0, 3)


def refusal(checks: tuple[Check, ...], query: KernelQuery) -> str | None:
    """The first check of ``checks`` that refuses ``query``; None when all pass."""
    for check in checks:
        found = check(query)
        if found is not None:
            return found
    return None

"""The one block builder: a layout -> an :class:`AttentionBlock` counted and costed on a target.

``report``, ``whatif``, the rules and the tests all build blocks here, so one block gets
one kernel, one padding figure and one roofline time wherever it is shown.
"""

from __future__ import annotations

from dataclasses import replace

from mhaudit.cost.block import (
    block_bytes_moved,
    block_flops,
    block_memory,
    causal_tile_pairs,
    diagonal_offset,
    roofline,
)
from mhaudit.cost.devices import GpuProfile, dtype_bytes
from mhaudit.cost.kernels import KernelChoice, block_kernel
from mhaudit.data import AttentionBlock, FlopBreakdown, Layout, TargetEstimate
from mhaudit.detect.params import count

ROOFLINE_CONVENTION = (
    "roofline work: dense FLOPs for kernels that materialise scores; for fused kernels on "
    "causal blocks, the 128×128 tiles holding an unmasked pair; plus the kernel's head-dim "
    "padding"
)
"""How the roofline time counts a block's work (the column header says so)."""


def kernel_flops(layout: Layout, flops: FlopBreakdown, kernel: KernelChoice) -> int:
    """FLOPs the chosen kernel executes: what the roofline times.

    A kernel that materialises scores computes the dense core; a fused kernel on a
    causal block skips the 128×128 tiles with no unmasked pair (``causal_tiles_total``).
    A kernel with a compiled head dim pads QKᵀ and PV from d_k to it:
    core · (kernel_head_dim / d_k − 1) extra FLOPs over the tiles it computes.
    """
    work, kept = flops.total, 1.0
    if flops.causal_tiles_total is not None and not kernel.materializes_scores:
        work = flops.causal_tiles_total
        tiles = causal_tile_pairs(layout.seq_len_q, layout.seq_len_kv,
                                  diagonal_offset(layout), layout.window)
        kept = tiles / (layout.seq_len_q * layout.seq_len_kv)
    if kernel.kernel_head_dim:
        core = flops.scores + flops.context
        work += int(core * kept * (kernel.kernel_head_dim / layout.head_dim - 1))
    return work


def build_block(layout: Layout, dtype: str, profile: GpuProfile) -> AttentionBlock:
    """Count and cost one block, and estimate how it runs on the target."""
    kernel = block_kernel(layout, dtype, profile)
    if layout.score_dtype is not None and kernel.materializes_scores:
        # eager code that names a softmax dtype (fp32 upcast) holds its scores at that width
        kernel = replace(kernel, score_element_bytes=max(
            kernel.score_element_bytes, dtype_bytes(layout.score_dtype)))
    e = dtype_bytes(dtype)
    memory = block_memory(layout, e, kernel.materializes_scores, kernel.score_element_bytes)
    flops = block_flops(layout)
    moved = block_bytes_moved(
        layout, e, kernel.materializes_scores, kernel.score_element_bytes
    )
    target = TargetEstimate(
        gpu=profile.key,
        gpu_name=profile.name,
        dtype=dtype,
        kernel=kernel.backend,
        kernel_head_dim=kernel.kernel_head_dim,
        padding_waste=kernel.padding_waste,
        materializes_scores=kernel.materializes_scores,
        reason=kernel.reason,
        roofline=roofline(kernel_flops(layout, flops, kernel), moved, profile),
    )
    return AttentionBlock(layout, count(layout), flops, memory, target=target)

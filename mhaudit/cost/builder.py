"""The one block builder: a layout -> an :class:`AttentionBlock` counted and costed on a target."""

from __future__ import annotations

from mhaudit.cost.block import block_bytes_moved, block_flops, block_memory, roofline
from mhaudit.cost.devices import GpuProfile, dtype_bytes
from mhaudit.cost.kernels import block_kernel
from mhaudit.data import AttentionBlock, Layout, TargetEstimate
from mhaudit.detect.params import count


def build_block(layout: Layout, dtype: str, profile: GpuProfile) -> AttentionBlock:
    """Count and cost one block, and estimate how it runs on the target."""
    kernel = block_kernel(layout, dtype, profile)
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
        roofline=roofline(flops.total, moved, profile),
    )
    return AttentionBlock(layout, count(layout), flops, memory, target=target)

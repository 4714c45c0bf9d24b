"""Head-dim rules MHA001–MHA004: sizes that tensor cores and attention kernels run badly."""

from __future__ import annotations

from mhaudit import units
from mhaudit.cost.forms import has_square_scores
from mhaudit.cost.kernels import FA2_HEAD_DIMS, padding_waste, round_up
from mhaudit.data import AttentionBlock, Severity
from mhaudit.rules.base import Hit, NumberSpec, Rule, RuleContext, Threshold
from mhaudit.rules.sources import (
    FA2_API,
    FA3_API,
    LOW_RANK,
    NVIDIA_GUIDE,
    SDP_UTILS,
    SIXTEEN_HEADS,
)
from mhaudit.rules.target import kernel_hint, on_target, target_of


def _not_multiple_of_8(block: AttentionBlock, ctx: RuleContext) -> Hit | None:
    lay = block.layout
    multiple = int(ctx.threshold("multiple"))
    bad = [(label, dim) for label, dim in (("d_k", lay.head_dim), ("d_v", lay.v_head_dim))
           if dim % multiple]
    if lay.v_head_dim == lay.head_dim and bad:
        bad = bad[:1]
    if not bad:
        return None
    label, dim = bad[0]
    padded = round_up(dim, multiple)
    waste = padding_waste(dim, padded)
    return Hit(
        f"{label} = {dim} is not a multiple of {multiple}: GEMMs and the flash wrapper pad it "
        f"to {padded} ({units.percent(waste)} of head-dim work wasted) and SDPA's "
        f"memory-efficient kernel rejects it in fp16/bf16",
        {"head_dim": lay.head_dim, "v_head_dim": lay.v_head_dim, "multiple": multiple,
         "padded_head_dim": padded, "padding_waste_fraction": waste},
        fix=f"Make d_k a multiple of {multiple}; {kernel_hint(block, ctx, 'MHA001')}.",
    )


HEAD_DIM_NOT_MULTIPLE_OF_8 = Rule(
    code="MHA001", name="head-dim-not-multiple-of-8", severity=Severity.WARNING,
    since="0.1.0",
    summary="The query/key or value head dim is not a multiple of 8.",
    why="Tensor cores run fp16/bf16 GEMMs on dimensions that are multiples of 8; other "
        "sizes are padded or take slower paths. The FlashAttention wrapper pads the head "
        "dim to a multiple of 8, and PyTorch SDPA's memory-efficient kernel rejects the "
        "layout in fp16/bf16, so a fallback can be the math kernel.",
    known_problems="The multiple does not follow the dtype: TF32 needs only 4 and int8 or "
                   "fp8 need 16, so set the `multiple` threshold for those. The waste is "
                   "the padding of the head dim alone; the kernel's own compiled size "
                   "(MHA002) can add more.",
    example="d_model = 640 with h = 32 gives d_k = 20, padded to 24 (16.7% wasted).",
    fix="Choose h so that d_k = d/h is a multiple of 8, ideally 64 or 128.",
    references=(NVIDIA_GUIDE, FA2_API, SDP_UTILS),
    thresholds=(Threshold("multiple", 8, "Required multiple of the head dims."),),
    numbers=(
        NumberSpec("head_dim", "elements", "d_k, the query/key head dim"),
        NumberSpec("v_head_dim", "elements", "d_v, the value head dim"),
        NumberSpec("multiple", "elements", "the required multiple"),
        NumberSpec("padded_head_dim", "elements", "the flagged dim rounded up to the multiple"),
        NumberSpec("padding_waste_fraction", "fraction", "share of the padded work wasted"),
    ),
    check=_not_multiple_of_8,
)


def _kernel_padding(block: AttentionBlock, ctx: RuleContext) -> Hit | None:
    lay = block.layout
    target = target_of(block, ctx)
    kernel, waste = target.kernel_head_dim, target.padding_waste
    if kernel is None or lay.head_dim < FA2_HEAD_DIMS[0] or waste <= ctx.threshold("min_waste"):
        return None
    wasted = (block.flops.scores + block.flops.context) * (kernel / lay.head_dim - 1)
    return Hit(
        f"the {target.kernel} kernel on {ctx.profile.name} at {ctx.dtype} runs "
        f"d_k = {lay.head_dim} in its {kernel} kernel: {units.percent(waste)} of the QKᵀ and "
        f"PV work ({units.si(wasted, 'FLOP')} at this shape) is padding",
        {"head_dim": lay.head_dim, "kernel_head_dim": kernel,
         "padding_waste_fraction": waste, "wasted_flops": wasted},
        fix=f"Pick a compiled head dim; {kernel_hint(block, ctx, 'MHA002')}.",
    )


HEAD_DIM_KERNEL_PADDING = Rule(
    code="MHA002", name="head-dim-kernel-padding", severity=Severity.WARNING,
    since="0.1.0",
    summary="The attention kernel the block gets on the target runs d_k in a larger "
            "compiled size (FA2 32/64/96/128/192/256; d_k < 32 is MHA004's).",
    why="FlashAttention compiles kernels for a few head dims only and runs any other d_k "
        "in the next one up: d_k = 80 runs as 96, d_k = 136 as 192, and on Hopper every "
        "d_k ≤ 64 pays for 64. The padded part of QKᵀ and PV is computed and thrown away.",
    known_problems="Only FlashAttention has a head-dim table here: a block that gets cuDNN "
                   "or the memory-efficient kernel on the target is not flagged, whatever "
                   "those kernels do inside. The wasted FLOPs are the forward QKᵀ and PV at "
                   "the traced shape, not the backward.",
    example="d_model = 1280 with h = 16 gives d_k = 80: the 96 kernel wastes 16.7%.",
    fix="Pick h so that d_k is a compiled size (64, 96, 128, 192 or 256).",
    references=(FA2_API, FA3_API, SDP_UTILS),
    thresholds=(Threshold("min_waste", 0.0, "Padding fraction above which the rule fires."),),
    numbers=(
        NumberSpec("head_dim", "elements", "d_k, the query/key head dim"),
        NumberSpec("kernel_head_dim", "elements", "the compiled head dim that runs it"),
        NumberSpec("padding_waste_fraction", "fraction", "share of the kernel's work wasted"),
        NumberSpec("wasted_flops", "flops", "QKᵀ and PV FLOPs spent on padding"),
    ),
    check=_kernel_padding,
)


def _above_kernel_limit(block: AttentionBlock, ctx: RuleContext) -> Hit | None:
    lay = block.layout
    limit = int(ctx.threshold("max_head_dim"))
    if lay.head_dim <= limit:
        return None
    target = target_of(block, ctx)
    numbers: dict[str, float] = {"head_dim": lay.head_dim, "max_head_dim": limit}
    cost = f"on {ctx.profile.name} it runs the {target.kernel} kernel"
    if target.materializes_scores:
        scores = on_target(block, ctx).memory.scores_bytes_if_materialized
        numbers["scores_bytes"] = scores
        cost += f", materialising {units.nbytes(scores)} of scores"
    return Hit(
        f"d_k = {lay.head_dim} exceeds the {limit} limit of FlashAttention: {cost}",
        numbers,
        fix=f"Use more heads so that d_k ≤ {limit}; {kernel_hint(block, ctx, 'MHA003')}.",
    )


HEAD_DIM_ABOVE_KERNEL_LIMIT = Rule(
    code="MHA003", name="head-dim-above-kernel-limit", severity=Severity.WARNING,
    since="0.1.0",
    summary="d_k is above 256, the largest head dim of every FlashAttention kernel.",
    why="No flash kernel runs d_k > 256 (nor cuDNN above 128), so SDPA drops to the "
        "memory-efficient kernel or, when that is ruled out too, to the math fallback "
        "that materialises the b·h·n² score matrix.",
    known_problems="The limit is FlashAttention's. Newer cuDNN releases accept larger head "
                   "dims on the newest GPUs, and the rule does not read the cuDNN version. "
                   "The memory-efficient kernel that often takes over is slower than flash, "
                   "but not by a figure the rule states.",
    example="d_model = 1280 with h = 4 gives d_k = 320: no flash kernel.",
    fix="Use more heads so that d_k ≤ 256 (128 is the usual choice).",
    references=(FA2_API, FA3_API, SDP_UTILS),
    thresholds=(Threshold("max_head_dim", 256, "Largest head dim that passes."),),
    numbers=(
        NumberSpec("head_dim", "elements", "d_k, the query/key head dim"),
        NumberSpec("max_head_dim", "elements", "the largest head dim that passes"),
        NumberSpec("scores_bytes", "bytes", "the b·h·n_q·n_kv score matrix the fallback writes",
                   when="the kernel on the target materialises scores"),
    ),
    check=_above_kernel_limit,
)


def _too_small(block: AttentionBlock, ctx: RuleContext) -> Hit | None:
    lay = block.layout
    limit = int(ctx.threshold("min_head_dim"))
    if lay.head_dim >= limit or not has_square_scores(lay):
        return None  # per-score intensity and rank are those of n_q×n_kv scores
    flops_per_score = 2 * (lay.head_dim + lay.v_head_dim)
    intensity = flops_per_score / ctx.element_bytes
    ridge = ctx.profile.ridge_flops_per_byte
    numbers: dict[str, float] = {
        "head_dim": lay.head_dim, "min_head_dim": limit, "flops_per_score": flops_per_score,
        "score_bytes_per_flop": ctx.element_bytes / flops_per_score,
        "flops_per_score_byte": intensity, "ridge_flops_per_byte": ridge,
        "rank_fraction": min(1.0, lay.head_dim / max(1, lay.seq_len_kv)),
    }
    text = (f"d_k = {lay.head_dim} < {limit}: each {ctx.element_bytes}-byte score carries "
            f"{flops_per_score} FLOPs of QKᵀ and PV ({units.count(intensity)} FLOP/B against "
            f"the {units.count(ridge)} FLOP/B ridge of {ctx.profile.name})")
    target = target_of(block, ctx)
    if target.kernel_head_dim is not None and target.padding_waste:
        waste = target.padding_waste
        numbers.update(kernel_head_dim=target.kernel_head_dim, padding_waste_fraction=waste)
        text += (f", the {target.kernel} kernel pads it to {target.kernel_head_dim} "
                 f"({units.percent(waste)} wasted)")
    if lay.head_dim < lay.seq_len_kv:
        text += (f", and each head's scores have rank ≤ {lay.head_dim} over "
                 f"{lay.seq_len_kv} positions")
    return Hit(text, numbers, fix=f"Use fewer, wider heads; {kernel_hint(block, ctx, 'MHA004')}.")


HEAD_DIM_TOO_SMALL = Rule(
    code="MHA004", name="head-dim-too-small", severity=Severity.WARNING,
    since="0.1.0",
    summary="d_k is below 32: low arithmetic intensity and a low-rank bottleneck.",
    why="Each score costs 2·(d_k + d_v) FLOPs of QKᵀ and PV, so small heads do little "
        "tensor-core work per score byte and per softmax exponential: attention turns "
        "memory- or exp-bound. Every flash kernel pads d_k up to at least 32 (64 on "
        "Hopper). And a head's score matrix has rank ≤ d_k, a bottleneck when d_k < n "
        "(Bhojanapalli et al. 2020).",
    known_problems="The rank bound limits what one head can express; it is not a measured "
                   "quality loss, and many small heads can be intended (or pruned: Michel "
                   "et al. 2019). Padding is reported only when the target's kernel has a "
                   "head-dim table (FlashAttention), not on cuDNN targets.",
    example="The textbook d_model = 64 with h = 8 gives d_k = 8.",
    fix="Use fewer, wider heads (d_k of 64 or 128).",
    references=(LOW_RANK, SIXTEEN_HEADS, FA2_API, FA3_API, NVIDIA_GUIDE),
    thresholds=(Threshold("min_head_dim", 32, "Smallest head dim that passes."),),
    numbers=(
        NumberSpec("head_dim", "elements", "d_k, the query/key head dim"),
        NumberSpec("min_head_dim", "elements", "the smallest head dim that passes"),
        NumberSpec("flops_per_score", "flops", "QKᵀ and PV FLOPs per score, 2·(d_k + d_v)"),
        NumberSpec("score_bytes_per_flop", "bytes/flop", "score bytes per FLOP of QKᵀ and PV"),
        NumberSpec("flops_per_score_byte", "flops/byte", "arithmetic intensity per score byte"),
        NumberSpec("ridge_flops_per_byte", "flops/byte", "the target's roofline ridge point"),
        NumberSpec("rank_fraction", "fraction", "d_k over the key positions, at most 1"),
        NumberSpec("kernel_head_dim", "elements", "the compiled head dim that runs it",
                   when="the target's flash kernel pads d_k"),
        NumberSpec("padding_waste_fraction", "fraction", "share of the kernel's work wasted",
                   when="the target's flash kernel pads d_k"),
    ),
    check=_too_small,
)

RULES = (HEAD_DIM_NOT_MULTIPLE_OF_8, HEAD_DIM_KERNEL_PADDING, HEAD_DIM_ABOVE_KERNEL_LIMIT,
         HEAD_DIM_TOO_SMALL)
"""The head-dim rules, in code order."""

"""The head-layout rules MHA001–MHA010, each one declared object with its check."""

from __future__ import annotations

from mhaudit.cost.builder import build_block
from mhaudit.cost.kernels import (
    FA2_HEAD_DIMS,
    flash_head_dims,
    padding_waste,
    round_up,
    sdpa_backend,
)
from mhaudit.data import AttentionBlock, Finding, Severity, TargetEstimate
from mhaudit.rules.base import REGISTRY, RuleContext, Threshold
from mhaudit.rules.heads import divisors, fmt_bytes, fmt_si, heads_hint, reduced_kv_heads

_TP_DEGREES = (1, 2, 4, 8, 16, 32, 64)


def _hint(block: AttentionBlock, ctx: RuleContext) -> str:
    """Head counts whose d_k is a compiled flash size on the target."""
    version = ctx.profile.flash_attention_version
    dims = flash_head_dims(version) if version else FA2_HEAD_DIMS
    return heads_hint(block.layout.num_heads * block.layout.head_dim, dims)


def _on_target(block: AttentionBlock, ctx: RuleContext) -> AttentionBlock:
    """The block as costed on the context's GPU and dtype: itself, or rebuilt for them."""
    target = block.target
    if target is None or target.gpu != ctx.profile.key or target.dtype != ctx.dtype:
        return build_block(block.layout, ctx.dtype, ctx.profile)
    return block


def _target(block: AttentionBlock, ctx: RuleContext) -> TargetEstimate:
    """The kernel the block really gets on the context's GPU and dtype."""
    target = _on_target(block, ctx).target
    assert target is not None
    return target


def _score_element_bytes(block: AttentionBlock) -> int:
    """Bytes per materialised score, from the block's memory figures."""
    elements = _score_elements(block)
    return block.memory.scores_bytes_if_materialized // elements if elements else 0


def _score_elements(block: AttentionBlock) -> int:
    lay = block.layout
    return lay.batch_size * lay.num_heads * lay.seq_len_q * lay.seq_len_kv


@REGISTRY.rule(
    code="MHA001", name="head-dim-not-multiple-of-8", severity=Severity.WARNING,
    summary="The query/key or value head dim is not a multiple of 8.",
    why="Tensor cores run fp16/bf16 GEMMs on dimensions that are multiples of 8; other "
        "sizes are padded or take slower paths. The FlashAttention wrapper pads the head "
        "dim to a multiple of 8, and PyTorch SDPA's memory-efficient kernel rejects the "
        "layout in fp16/bf16, so a fallback can be the math kernel.",
    example="d_model = 640 with h = 32 gives d_k = 20, padded to 24 (16.7% wasted).",
    fix="Choose h so that d_k = d/h is a multiple of 8, ideally 64 or 128.",
    thresholds=(Threshold("multiple", 8, "Required multiple of the head dims."),),
)
def head_dim_not_multiple_of_8(block: AttentionBlock, ctx: RuleContext) -> Finding | None:
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
    return head_dim_not_multiple_of_8.finding(
        block,
        f"{label} = {dim} is not a multiple of {multiple}: GEMMs and the flash wrapper pad it "
        f"to {padded} ({waste:.1%} of head-dim work wasted) and SDPA's memory-efficient "
        f"kernel rejects it in fp16/bf16",
        {"head_dim": lay.head_dim, "v_head_dim": lay.v_head_dim, "multiple": multiple,
         "padded_head_dim": padded, "padding_waste_fraction": waste},
        fix=f"Make d_k a multiple of {multiple}; {_hint(block, ctx)}.",
    )


@REGISTRY.rule(
    code="MHA002", name="head-dim-kernel-padding", severity=Severity.WARNING,
    summary="The attention kernel the block gets on the target runs d_k in a larger "
            "compiled size (FA2 32/64/96/128/192/256; d_k < 32 is MHA004's).",
    why="FlashAttention compiles kernels for a few head dims only and runs any other d_k "
        "in the next one up: d_k = 80 runs as 96, d_k = 136 as 192, and on Hopper every "
        "d_k ≤ 64 pays for 64. The padded part of QKᵀ and PV is computed and thrown away.",
    example="d_model = 1280 with h = 16 gives d_k = 80: the 96 kernel wastes 16.7%.",
    fix="Pick h so that d_k is a compiled size (64, 96, 128, 192 or 256).",
    thresholds=(Threshold("min_waste", 0.0, "Padding fraction above which the rule fires."),),
)
def head_dim_kernel_padding(block: AttentionBlock, ctx: RuleContext) -> Finding | None:
    lay = block.layout
    target = _target(block, ctx)
    kernel, waste = target.kernel_head_dim, target.padding_waste
    if kernel is None or lay.head_dim < FA2_HEAD_DIMS[0] or waste <= ctx.threshold("min_waste"):
        return None
    wasted = (block.flops.scores + block.flops.context) * (kernel / lay.head_dim - 1)
    return head_dim_kernel_padding.finding(
        block,
        f"the {target.kernel} kernel on {ctx.profile.name} at {ctx.dtype} runs "
        f"d_k = {lay.head_dim} in its {kernel} kernel: {waste:.1%} of the QKᵀ and PV work "
        f"({fmt_si(wasted, 'FLOP')} at this shape) is padding",
        {"head_dim": lay.head_dim, "kernel_head_dim": kernel,
         "padding_waste_fraction": waste, "wasted_flops": wasted},
        fix=f"Pick a compiled head dim; {_hint(block, ctx)}.",
    )


@REGISTRY.rule(
    code="MHA003", name="head-dim-above-kernel-limit", severity=Severity.WARNING,
    summary="d_k is above 256, the largest head dim of every FlashAttention kernel.",
    why="No flash kernel runs d_k > 256 (nor cuDNN above 128), so SDPA drops to the "
        "memory-efficient kernel or, when that is ruled out too, to the math fallback "
        "that materialises the b·h·n² score matrix.",
    example="d_model = 1280 with h = 4 gives d_k = 320: no flash kernel.",
    fix="Use more heads so that d_k ≤ 256 (128 is the usual choice).",
    thresholds=(Threshold("max_head_dim", 256, "Largest head dim that passes."),),
)
def head_dim_above_kernel_limit(block: AttentionBlock, ctx: RuleContext) -> Finding | None:
    lay = block.layout
    limit = int(ctx.threshold("max_head_dim"))
    if lay.head_dim <= limit:
        return None
    target = _target(block, ctx)
    numbers: dict[str, float] = {"head_dim": lay.head_dim, "max_head_dim": limit}
    cost = f"on {ctx.profile.name} it runs the {target.kernel} kernel"
    if target.materializes_scores:
        scores = _on_target(block, ctx).memory.scores_bytes_if_materialized
        numbers["scores_bytes"] = scores
        cost += f", materialising {fmt_bytes(scores)} of scores"
    return head_dim_above_kernel_limit.finding(
        block,
        f"d_k = {lay.head_dim} exceeds the {limit} limit of FlashAttention: {cost}",
        numbers,
        fix=f"Use more heads so that d_k ≤ {limit}; {_hint(block, ctx)}.",
    )


@REGISTRY.rule(
    code="MHA004", name="head-dim-too-small", severity=Severity.WARNING,
    summary="d_k is below 32: low arithmetic intensity and a low-rank bottleneck.",
    why="Each score costs 2·(d_k + d_v) FLOPs of QKᵀ and PV, so small heads do little "
        "tensor-core work per score byte and per softmax exponential: attention turns "
        "memory- or exp-bound. Every flash kernel pads d_k up to at least 32 (64 on "
        "Hopper). And a head's score matrix has rank ≤ d_k, a bottleneck when d_k < n "
        "(Bhojanapalli et al. 2020).",
    example="The textbook d_model = 64 with h = 8 gives d_k = 8.",
    fix="Use fewer, wider heads (d_k of 64 or 128).",
    thresholds=(Threshold("min_head_dim", 32, "Smallest head dim that passes."),),
)
def head_dim_too_small(block: AttentionBlock, ctx: RuleContext) -> Finding | None:
    lay = block.layout
    limit = int(ctx.threshold("min_head_dim"))
    if lay.head_dim >= limit:
        return None
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
            f"{flops_per_score} FLOPs of QKᵀ and PV ({intensity:.0f} FLOP/B against the "
            f"{ridge:.0f} FLOP/B ridge of {ctx.profile.name})")
    target = _target(block, ctx)
    if target.kernel_head_dim is not None and target.padding_waste:
        waste = target.padding_waste
        numbers.update(kernel_head_dim=target.kernel_head_dim, padding_waste_fraction=waste)
        text += (f", the {target.kernel} kernel pads it to {target.kernel_head_dim} "
                 f"({waste:.1%} wasted)")
    if lay.head_dim < lay.seq_len_kv:
        text += (f", and each head's scores have rank ≤ {lay.head_dim} over "
                 f"{lay.seq_len_kv} positions")
    return head_dim_too_small.finding(
        block, text, numbers,
        fix=f"Use fewer, wider heads; {_hint(block, ctx)}.",
    )


@REGISTRY.rule(
    code="MHA005", name="materialized-attention-scores", severity=Severity.WARNING,
    summary="The b·h·n_q·n_kv score matrix is written to memory: eager softmax(QKᵀ) or "
            "SDPA's math fallback on the target.",
    why="Fused kernels keep scores in on-chip memory. An explicit softmax(QKᵀ)V, or the "
        "math fallback (in fp32 for half inputs), writes and reads b·h·n_q·n_kv scores: "
        "memory that grows with h and with n², and bandwidth the kernel did not need.",
    example="`scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)` then "
            "`scores.softmax(-1) @ v`, or SDPA with d_k = 20 in fp16 on a T4.",
    fix="Call F.scaled_dot_product_attention(q, k, v, is_causal=...) instead.",
    thresholds=(Threshold("min_scores_bytes", 0, "Score bytes above which the rule fires."),),
)
def materialized_attention_scores(block: AttentionBlock, ctx: RuleContext) -> Finding | None:
    lay = block.layout
    choice = _target(block, ctx)
    if not choice.materializes_scores:
        return None
    scores = _on_target(block, ctx).memory.scores_bytes_if_materialized
    element_bytes = _score_element_bytes(_on_target(block, ctx))
    if scores <= ctx.threshold("min_scores_bytes"):
        return None
    share = scores / ctx.profile.memory_bytes
    shape = f"{lay.batch_size}×{lay.num_heads}×{lay.seq_len_q}×{lay.seq_len_kv}"
    if choice.kernel == "eager":
        how = "eager softmax(QKᵀ) materialises"
        alt = sdpa_backend(lay.head_dim, lay.v_head_dim, ctx.dtype, ctx.profile)
        fix = (f"Call F.scaled_dot_product_attention(q, k, v, is_causal=...); on "
               f"{ctx.profile.name} it would run the {alt.backend} kernel.")
    else:
        how = (f"SDPA falls back to the math kernel on {ctx.profile.name} ({choice.reason}), "
               "which materialises")
        fix = ("Make the layout fit a fused kernel: fp16/bf16, d_k a multiple of 8 and ≤ 256, "
               "then call F.scaled_dot_product_attention.")
    of_memory = f", {share:.2%} of {ctx.profile.name} memory" if share >= 1e-4 else ""
    return materialized_attention_scores.finding(
        block,
        f"{how} the {shape} score matrix: {fmt_bytes(scores)} "
        f"({element_bytes} B per score{of_memory}), growing with h and n²",
        {"scores_bytes": scores, "score_elements": _score_elements(block),
         "score_element_bytes": element_bytes, "device_memory_fraction": share},
        fix=fix,
    )


@REGISTRY.rule(
    code="MHA006", name="kv-heads-do-not-divide-heads", severity=Severity.ERROR,
    summary="The number of KV heads does not divide the number of query heads.",
    why="Grouped-query attention shares each KV head with h / h_kv query heads. When h_kv "
        "does not divide h the groups are uneven: FlashAttention (h % h_kv == 0) and "
        "repeat_kv reject the layout, and a custom path has to be written and kept.",
    example="h = 12 query heads with h_kv = 5 KV heads.",
    fix="Choose h_kv among the divisors of h.",
)
def kv_heads_do_not_divide_heads(block: AttentionBlock, ctx: RuleContext) -> Finding | None:
    lay = block.layout
    if lay.num_kv_heads > 0 and lay.num_heads % lay.num_kv_heads == 0:
        return None
    options = ", ".join(str(d) for d in divisors(lay.num_heads))
    return kv_heads_do_not_divide_heads.finding(
        block,
        f"h_kv = {lay.num_kv_heads} does not divide h = {lay.num_heads} "
        f"({lay.num_heads / max(1, lay.num_kv_heads):.2f} query heads per KV head): GQA "
        f"kernels reject uneven groups",
        {"heads": lay.num_heads, "kv_heads": lay.num_kv_heads,
         "remainder": lay.num_heads % max(1, lay.num_kv_heads)},
        fix=f"Choose h_kv among the divisors of {lay.num_heads}: {options}.",
    )


@REGISTRY.rule(
    code="MHA007", name="kv-cache-heavy", severity=Severity.WARNING,
    summary="Decoder (causal) self-attention without GQA/MQA (nor a cached latent) whose "
            "KV cache per token crosses a threshold.",
    why="Generation keeps K and V of every past position: 2·h_kv·d_k bytes per token per "
        "layer. With h_kv = h the cache, not the weights, caps batch size and context; "
        "grouped-query attention with h_kv = h/8 cuts it 8× at a small quality cost "
        "(Ainslie et al. 2023).",
    example="A 32-layer decoder with h = 32, d_k = 128 in bf16: 16 KiB per token per layer.",
    fix="Use grouped-query attention (h_kv = h/4 or h/8) or multi-query attention.",
    thresholds=(Threshold("min_bytes_per_token", 8192,
                          "KV-cache bytes per token of one block above which it fires."),),
)
def kv_cache_heavy(block: AttentionBlock, ctx: RuleContext) -> Finding | None:
    lay = block.layout
    per_token = block.memory.kv_cache_bytes_per_token
    if (lay.kind != "self" or lay.causal is not True or lay.num_heads < 2
            or lay.num_kv_heads != lay.num_heads or lay.latent_width is not None
            or per_token < ctx.threshold("min_bytes_per_token")):
        return None
    h = lay.num_heads
    numbers: dict[str, float] = {"kv_cache_bytes_per_token": per_token,
                                 "kv_cache_bytes": block.memory.kv_cache_bytes, "heads": h}
    parts = []
    for factor, label in ((4, "quarter"), (8, "eighth")):
        kv = reduced_kv_heads(h, factor)
        saving = per_token * (1 - kv / h)
        numbers[f"kv_heads_{label}"] = kv
        numbers[f"saving_bytes_per_token_{label}"] = saving
        parts.append(f"h_kv = {kv} saves {fmt_bytes(saving)} per token ({1 - kv / h:.0%})")
    return kv_cache_heavy.finding(
        block,
        f"decoder self-attention keeps all {h} KV heads: {fmt_bytes(per_token)} of KV cache "
        f"per token in this layer ({fmt_bytes(block.memory.kv_cache_bytes)} at batch "
        f"{lay.batch_size} × {lay.seq_len_kv} positions); " + ", ".join(parts),
        numbers,
        fix=f"Use grouped-query attention with h_kv = {int(numbers['kv_heads_quarter'])} or "
            f"{int(numbers['kv_heads_eighth'])} (uptrain by mean-pooling KV heads).",
    )


@REGISTRY.rule(
    code="MHA008", name="heads-not-divisible-by-tensor-parallel", severity=Severity.ERROR,
    summary="With --tensor-parallel N, the query heads do not split evenly over N GPUs, "
            "or the KV heads neither split over nor replicate evenly across them.",
    why="Tensor parallelism gives each GPU h/N query heads and h_kv/N KV heads (or "
        "replicates each KV head N/h_kv times). Other counts cannot be sharded by "
        "Megatron-style column/row splits, so the model does not run at that degree.",
    example="h = 12 heads with --tensor-parallel 8.",
    fix="Use a tensor-parallel degree that divides h (and h_kv), or change the head counts.",
)
def heads_not_divisible_by_tensor_parallel(
    block: AttentionBlock, ctx: RuleContext
) -> Finding | None:
    lay = block.layout
    tp = ctx.tensor_parallel
    if tp is None or tp <= 1:
        return None

    def fits(degree: int) -> bool:
        kv = lay.num_kv_heads
        return lay.num_heads % degree == 0 and (kv % degree == 0 or degree % max(1, kv) == 0)

    if fits(tp):
        return None
    valid = [str(t) for t in _TP_DEGREES if t > 1 and fits(t)]
    fix = (f"Use a tensor-parallel degree in {{{', '.join(valid)}}} or change the head counts."
           if valid else "Change the head counts: h, and h_kv or the degree, must divide evenly.")
    return heads_not_divisible_by_tensor_parallel.finding(
        block,
        f"h = {lay.num_heads} query heads and h_kv = {lay.num_kv_heads} KV heads do not shard "
        f"over tensor-parallel degree {tp} ({lay.num_heads / tp:.2f} query heads and "
        f"{lay.num_kv_heads / tp:.2f} KV heads per GPU)",
        {"heads": lay.num_heads, "kv_heads": lay.num_kv_heads, "tensor_parallel": tp,
         "heads_per_gpu": lay.num_heads / tp},
        fix=fix,
    )


@REGISTRY.rule(
    code="MHA009", name="inner-width-differs-from-d-model", severity=Severity.INFO,
    summary="h·d_k (or h·d_v) differs from d_model, so the textbook 4·d² does not hold.",
    why="Attention parameters and projection FLOPs scale with the inner width h·d_k, not "
        "with d_model. That can be intended (Gemma's d_k = 256), but it changes every "
        "cost figure against the textbook and is easy to get wrong by accident.",
    example="d_model = 3072 with h = 16 heads of d_k = 256: inner width 4096.",
    fix="Set d_k = d_model / h unless the wider or narrower inner width is intended.",
)
def inner_width_differs_from_d_model(block: AttentionBlock, ctx: RuleContext) -> Finding | None:
    lay = block.layout
    inner = lay.num_heads * lay.head_dim
    inner_v = lay.num_heads * lay.v_head_dim
    if inner == lay.d_model and inner_v == lay.d_model:
        return None
    params, textbook = block.params.total, block.params.textbook
    ratio = params / textbook if textbook else 0.0
    return inner_width_differs_from_d_model.finding(
        block,
        f"h·d_k = {lay.num_heads}·{lay.head_dim} = {inner} (h·d_v = {inner_v}) differs from "
        f"d_model = {lay.d_model}: Q/K/V/O hold {params:,} parameters against the textbook "
        f"{textbook:,} ({ratio:.2f}×)",
        {"inner_width": inner, "inner_v_width": inner_v, "d_model": lay.d_model,
         "params": params, "textbook_params": textbook, "params_ratio": ratio},
    )


@REGISTRY.rule(
    code="MHA010", name="unfused-qkv-projections", severity=Severity.INFO,
    summary="Self-attention computes Q, K and V with three separate projections.",
    why="Three GEMMs launch three kernels and read the input activation three times; one "
        "fused projection of width (h + 2·h_kv)·d_k reads it once and runs a larger, "
        "better-shaped GEMM.",
    example="`self.q = nn.Linear(d, d)`, `self.k = nn.Linear(d, d)` and "
            "`self.v = nn.Linear(d, d)` in one self-attention module.",
    fix="Fuse them into one nn.Linear(d, (h + 2·h_kv)·d_k) and split its output.",
)
def unfused_qkv_projections(block: AttentionBlock, ctx: RuleContext) -> Finding | None:
    lay = block.layout
    projections = (lay.q, lay.k, lay.v)
    if lay.kind != "self" or any(p is None for p in projections):
        return None
    if len({p.weight for p in projections if p is not None}) < 3:
        return None
    if any(p.fused for p in projections if p is not None):
        return None
    input_bytes = lay.batch_size * lay.seq_len_q * lay.d_model * ctx.element_bytes
    width = (lay.num_heads + 2 * lay.num_kv_heads) * lay.head_dim
    return unfused_qkv_projections.finding(
        block,
        f"Q, K and V are three projections: three GEMM launches read the "
        f"{fmt_bytes(input_bytes)} input three times ({fmt_bytes(2 * input_bytes)} of extra "
        f"reads per forward) where one {lay.d_model}×{width} projection reads it once",
        {"projections": 3, "input_bytes": input_bytes, "extra_read_bytes": 2 * input_bytes,
         "fused_width": width},
        fix=f"Fuse them into one nn.Linear({lay.d_model}, {width}) and split its output.",
    )

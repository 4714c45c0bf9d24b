"""KV-head rules MHA006–MHA007: uneven query groups and a KV cache kept for every head."""

from __future__ import annotations

from mhaudit import units
from mhaudit.data import AttentionBlock, Severity
from mhaudit.rules.base import Hit, NumberSpec, Rule, RuleContext, Threshold
from mhaudit.rules.heads import divisors, reduced_kv_heads
from mhaudit.rules.sources import FA2_API, GQA, MQA


def _kv_heads_do_not_divide(block: AttentionBlock, ctx: RuleContext) -> Hit | None:
    lay = block.layout
    if lay.num_kv_heads > 0 and lay.num_heads % lay.num_kv_heads == 0:
        return None
    options = ", ".join(str(d) for d in divisors(lay.num_heads))
    per_kv_head = lay.num_heads / max(1, lay.num_kv_heads)
    return Hit(
        f"h_kv = {lay.num_kv_heads} does not divide h = {lay.num_heads} "
        f"({units.decimal(per_kv_head)} query heads per KV head): GQA kernels reject "
        f"uneven groups",
        {"heads": lay.num_heads, "kv_heads": lay.num_kv_heads,
         "remainder": lay.num_heads % max(1, lay.num_kv_heads)},
        fix=f"Choose h_kv among the divisors of {lay.num_heads}: {options}.",
    )


KV_HEADS_DO_NOT_DIVIDE_HEADS = Rule(
    code="MHA006", name="kv-heads-do-not-divide-heads", severity=Severity.ERROR,
    since="0.1.0",
    summary="The number of KV heads does not divide the number of query heads.",
    why="Grouped-query attention shares each KV head with h / h_kv query heads. When h_kv "
        "does not divide h the groups are uneven: FlashAttention (h % h_kv == 0) and "
        "repeat_kv reject the layout, and a custom path has to be written and kept.",
    known_problems="The KV head count comes from the K/V projection widths; a layout "
                   "whose K/V width detection could not read (h_kv = 0) is reported as "
                   "not dividing.",
    example="h = 12 query heads with h_kv = 5 KV heads.",
    fix="Choose h_kv among the divisors of h.",
    references=(FA2_API, GQA),
    numbers=(
        NumberSpec("heads", "count", "h, the query heads"),
        NumberSpec("kv_heads", "count", "h_kv, the key/value heads"),
        NumberSpec("remainder", "count", "h mod h_kv, the query heads left over"),
    ),
    check=_kv_heads_do_not_divide,
)


def _kv_cache_heavy(block: AttentionBlock, ctx: RuleContext) -> Hit | None:
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
        parts.append(f"h_kv = {kv} saves {units.nbytes(saving)} per token "
                     f"({units.percent(1 - kv / h, 0)})")
    return Hit(
        f"decoder self-attention keeps all {h} KV heads: {units.nbytes(per_token)} of KV "
        f"cache per token in this layer ({units.nbytes(block.memory.kv_cache_bytes)} at "
        f"batch {lay.batch_size} × {lay.seq_len_kv} positions); " + ", ".join(parts),
        numbers,
        fix=f"Use grouped-query attention with h_kv = {int(numbers['kv_heads_quarter'])} or "
            f"{int(numbers['kv_heads_eighth'])} (uptrain by mean-pooling KV heads).",
    )


KV_CACHE_HEAVY = Rule(
    code="MHA007", name="kv-cache-heavy", severity=Severity.WARNING, since="0.1.0",
    summary="Decoder (causal) self-attention without GQA/MQA (nor a cached latent) whose "
            "KV cache per token crosses a threshold.",
    why="Generation keeps K and V of every past position: 2·h_kv·d_k elements per token "
        "per layer, times the bytes per element of the cache dtype (2 in bf16/fp16, 4 in "
        "fp32, 1 in fp8). With h_kv = h the cache, not the weights, caps batch size and context; "
        "grouped-query attention with h_kv = h/8 cuts it 8× at a small quality cost "
        "(Ainslie et al. 2023).",
    known_problems="The threshold is per block, not per model: many small layers can add "
                   "up to a heavy cache without one of them firing. A sliding-window layer "
                   "is judged by its per-token cache although its cache stops growing at "
                   "the window. The savings assume the quality of GQA is acceptable, which "
                   "needs uptraining to check.",
    example="A 32-layer decoder with h = 32, d_k = 128 in bf16: 2·32·128 elements × 2 bytes "
            "= 16 KiB per token per layer.",
    fix="Use grouped-query attention (h_kv = h/4 or h/8) or multi-query attention.",
    references=(GQA, MQA),
    thresholds=(Threshold("min_bytes_per_token", 8192,
                          "KV-cache bytes per token of one block above which it fires."),),
    numbers=(
        NumberSpec("kv_cache_bytes_per_token", "bytes/token", "K and V kept per token"),
        NumberSpec("kv_cache_bytes", "bytes", "K and V at the traced batch and length"),
        NumberSpec("heads", "count", "h, the query heads (and KV heads)"),
        NumberSpec("kv_heads_quarter", "count", "the largest h_kv ≤ h/4 that divides h"),
        NumberSpec("saving_bytes_per_token_quarter", "bytes/token",
                   "cache saved per token with kv_heads_quarter"),
        NumberSpec("kv_heads_eighth", "count", "the largest h_kv ≤ h/8 that divides h"),
        NumberSpec("saving_bytes_per_token_eighth", "bytes/token",
                   "cache saved per token with kv_heads_eighth"),
    ),
    check=_kv_cache_heavy,
)

RULES = (KV_HEADS_DO_NOT_DIVIDE_HEADS, KV_CACHE_HEAVY)
"""The KV-head rules, in code order."""

"""What detection reads from the graph: projections, layouts and their parameter breakdown."""

from __future__ import annotations

from dataclasses import dataclass

SCORE_FORMS = ("softmax", "kernel", "linear", "separable", "channel", "flex", "query_softmax",
               "unfolded")
"""How a block turns Q and K into the weights it applies to V:

- ``softmax``: an n_q×n_kv matrix QKᵀ through a softmax over the keys (the textbook form);
- ``kernel``: an n_q×n_kv matrix QKᵀ through another elementwise map or normaliser
  (sigmoid, ReLU, cosine, YOSO's expectation (1 − acos(q·k)/π)^τ), no softmax;
- ``linear``: φ(K)ᵀV is computed first, a d_k×d_v state per head; no n×n matrix;
- ``separable``: one score per token (a width-1 query), softmax over the tokens, a pooled
  context vector broadcast against the other operand (separable and additive attention);
- ``query_softmax``: an n_q×n_kv matrix QKᵀ through a softmax over the queries (each key
  shared out among the queries, as slot attention shares inputs among slots), then each
  query's weights renormalised over the keys before V;
- ``channel``: scores over channels, d_k×d_k per head, contracted over the tokens (channel
  attention: the tokens are the reduction axis, the head dim is the channels per head);
- ``unfolded``: each query scores only the ``window`` keys unfolded beside it, by a
  multiply and a sum (no matmul), softmax over the window: n_q×window scores.
"""


@dataclass(frozen=True)
class Projection:
    """One of the Q, K, V or O projections of a block, as the graph shows it."""

    module: str
    """Qualified name of the module that owns the weight (``""`` for the root)."""
    weight: str
    """Qualified name of the weight parameter."""
    in_features: int
    """Input width of the projection."""
    out_features: int
    """Output width used by this role (a slice of a fused weight)."""
    fused_width: int
    """Full output width of the weight; larger than ``out_features`` when fused."""
    weight_params: int
    """Weight elements attributed to this role."""
    bias_params: int
    """Bias elements attributed to this role (0 without a bias)."""
    low_rank_width: int = 0
    """Bottleneck width of a low-rank factorised projection (x → r → out through a
    down- and an up-projection, norms between); 0 when the role is one matrix."""
    groups: int = 1
    """Groups of a grouped projection (a grouped 1×1 convolution): each output feature
    reads ``in_features / groups`` inputs, so it holds and computes 1/groups of a full one."""

    @property
    def fused(self) -> bool:
        """True when this role uses a slice of a wider (fused) weight."""
        return self.fused_width != self.out_features

    @property
    def params(self) -> int:
        """Weight plus bias elements."""
        return self.weight_params + self.bias_params


@dataclass(frozen=True)
class Layout:
    """What the graph says an attention block computes (shapes, not costs)."""

    name: str
    """Qualified name of the smallest module containing all projections."""
    module_type: str
    """Class name of that module."""
    kind: str
    """``"self"`` or ``"cross"``."""
    implementation: str
    """``"sdpa"`` (fused kernel op) or ``"eager"`` (explicit softmax(QKᵀ)V)."""
    d_model: int
    """Input width of the Q projection."""
    num_heads: int
    """Query heads h."""
    num_kv_heads: int
    """Key/value heads h_kv (h for MHA, 1 for MQA, between for GQA)."""
    head_dim: int
    """Query/key head dim d_k."""
    v_head_dim: int
    """Value head dim d_v."""
    batch_size: int
    """Batch size b at the audited shape."""
    seq_len_q: int
    """Query positions n_q at the audited shape."""
    seq_len_kv: int
    """Key/value positions n_kv at the audited shape."""
    d_out: int
    """Output width of the O projection (d_model when absent)."""
    causal: bool | None
    """True for a causal mask, False for none, None when unknown (``mask_unknown`` says
    why)."""
    scale: float | None
    """Softmax scale applied to QKᵀ, when the graph shows one."""
    q: Projection | None
    k: Projection | None
    v: Projection | None
    o: Projection | None
    kv_shared: bool = False
    """True when K and V read the same projection output."""
    core_count: int = 1
    """Attention cores merged into this block (per-head modules give h cores)."""
    cached_width: int | None = None
    """Elements per position the code writes to its KV cache (K and V, or the latent
    they are expanded from); None when the traced forward wrote no cache."""
    sinks: int = 0
    """Extra logit columns the softmax runs over and that no value reads (attention
    sinks); 0 when none."""
    head_mixing: bool = False
    """True when linear maps across the head axis mix the logits or the probabilities
    (talking-heads attention)."""
    padded_head_dim: int | None = None
    """Head dim the attention kernel runs at when Q/K/V are zero-padded to it (the
    padding is sliced off after); None when the kernel sees ``head_dim``."""
    windowed: int | None = None
    """Chunk length when one attention is split over windows of one sequence (then
    ``seq_len_q``/``seq_len_kv`` are one window's and ``batch_size`` counts every window);
    None when the attention sees the whole sequence."""
    tied_rows: int = 1
    """Query sequences whose scores are summed into one map before the softmax (the R rows
    of an alignment tied into one map, ``brihc,brjhc->bhij``): ``batch_size`` counts each
    row, the score tensor and its softmax each map once; 1 otherwise."""
    streams: int = 1
    """Token streams projected apart and joined along the sequence (2 for joint
    attention over text and image tokens); 1 otherwise."""
    window: int | None = None
    """Sliding-window length: each query sees at most this many keys (a causal window, or
    a band a mask keeps on both sides of the diagonal, which is not causal: w keys either
    side and itself, 2w + 1), or, for a band computed over overlapping chunks
    (``window_chunk``), the band's width 2w: each query sees the w keys either side of it
    and itself; None when unbounded."""
    window_chunk: int | None = None
    """Queries and keys per score chunk when the scores are a band computed over
    overlapping chunks of this length with stride half of it (Longformer's sliding
    chunks: 2w); ``seq_len_q``/``seq_len_kv`` are then the whole (padded) sequence. None
    for a dense core."""
    global_keys: int = 0
    """Keys scored apart and joined beside a band (Longformer's global tokens, which
    every query sees); 0 when none."""
    causal_alignment: str = "top-left"
    """Where a causal mask puts its diagonal when n_q ≠ n_kv: ``top-left`` (query i sees
    keys 0..i, torch's ``is_causal``) or ``bottom-right`` (query i sees keys up to
    i + n_kv − n_q, as masks built from cache positions do)."""
    score_dtype: str | None = None
    """Dtype the graph computes softmax in when the code names one (``float32`` where
    eager code upcasts, as most HF models do); None when it follows the inputs."""
    latent_width: int | None = None
    """Elements per position of the latent that K and V are expanded from (multi-head
    latent attention: the K/V down-projection's output, rope key included); None when
    K and V are projected directly."""
    score_form: str = "softmax"
    """How the scores are formed (one of :data:`SCORE_FORMS`); ``softmax`` for the
    textbook n_q×n_kv softmax."""
    score_map_ops: int = 0
    """Elementwise ops per score between QKᵀ and the context for the ``kernel`` form
    (YOSO's acos, divide, subtract, power: 4); 0 for the other forms."""
    explicit_mask: bool = False
    """True when the core takes a mask tensor that torch's flash backend refuses: an SDPA
    ``attn_mask`` (or a mask added to the scores in eager code) that reads the model's
    inputs (padding, packed-sequence boundaries), holds anything but a causal triangle, or
    bounds a window. A causal triangle built from positions alone is not one: transformers
    passes it as ``is_causal`` on real inputs."""
    dropout_p: float = 0.0
    """Dropout probability the traced SDPA call applies to the attention weights (0 in
    the eval-mode trace; the training step reads each call's own)."""
    sdpa_gqa: bool = False
    """True when SDPA gets fewer K/V heads than query heads with ``enable_gqa`` (K/V not
    expanded before the call, as ``repeat_kv`` does)."""
    visited_fraction: float | None = None
    """Share of the (query block, key block) score tiles a ``flex_attention`` block mask
    visits, partial and full (0–1); None for a core without a block mask."""
    mask_unknown: str | None = None
    """Why the mask could not be read when ``causal`` is None (a buffer whose value is not
    known: a model on meta whose constructor mhaudit cannot run); None otherwise."""
    block_mask_read: str | None = None
    """How ``visited_fraction`` was found: ``read`` (the mask's own block counts),
    ``evaluated`` (its mask_mod on CPU), or why neither could be (then 1.0, dense)."""
    score_bias_params: int = 0
    """Elements of the learned parameters that bias the logits outside W_Q, W_K, W_V and
    W_O (relative-position tables and embeddings, their projections, content and
    position bias vectors); a table several blocks read counts in the first one."""
    score_bias_tables: tuple[tuple[str, int], ...] = ()
    """Qualified names and elements of the score-bias parameters the block reads, before a
    table shared with an earlier block is left to that block (``score_bias_params``)."""
    score_map_params: int = 0
    """Elements of the learned maps of the score map between QKᵀ and ·V (a head-mixing
    block's h×h matrix, its convolutions over the map, a norm's weight and bias); counted
    in ``ParamBreakdown.score_map`` and its total. A map several blocks read counts in the
    first one."""
    learned_map_ops: int = 0
    """FLOPs per score (b·h·n_q·n_kv of them) of those learned maps: 2·h for an h×h
    matrix across the heads, 2·(c_in/g)·k·k·c_out/h for a k×k convolution over the map."""
    kv_transform_params: int = 0
    """Elements of the learned maps over positions that K and V pass through between
    their projections and the core (a compressor of each block of l positions,
    ``Linear(l·d_k, d_k)``; Linformer's n→k map); counted in ``ParamBreakdown.kv_transform``
    and its total. A map several blocks read counts in the first one."""
    kv_transform_flops: tuple[int, int] = (0, 0)
    """FLOPs of those maps on K and on V at the audited shape (2 per multiply-add)."""
    absorbed_params: int = 0
    """Elements of per-head maps folded into the query path or applied to the context before
    O (latent attention's absorbed W_UK and W_UV, one matrix per head), outside W_Q and W_O;
    counted in ``ParamBreakdown.absorbed`` and its total."""
    absorbed_flops: tuple[int, int] = (0, 0)
    """FLOPs of those maps on the query path and on the context (2 per multiply-add)."""
    kv_rows: int = 0
    """Token rows the K and V projections run on when a map over positions after them
    shortens the keys (b·n before the map); 0 when they run on the b·n_kv keys."""

    @property
    def score_maps(self) -> int:
        """Softmax maps per head, each from its own d_k-wide share of Q and K, combined
        into the one map V meets (differential attention: 2), read from Q and K being
        that many times h·d_k wide; 1 otherwise."""
        q, k, h, h_kv, d_k = self.q, self.k, self.num_heads, self.num_kv_heads, self.head_dim
        if q is None or k is None or not h * d_k or not h_kv * d_k:
            return 1
        q_width, k_width = q.out_features // self.streams, k.out_features // self.streams
        maps = q_width // (h * d_k)
        exact = q_width == maps * h * d_k and k_width == maps * h_kv * d_k
        return maps if maps > 1 and exact else 1


@dataclass(frozen=True)
class Deviation:
    """One explained difference between the textbook count and the real one."""

    reason: str
    """Plain-language cause, e.g. ``GQA (8 KV heads of 64) saves ...``."""
    params: int
    """Signed parameter difference this cause accounts for."""


@dataclass(frozen=True)
class ParamBreakdown:
    """Parameter counts of one block against the textbook 4·d² (+ biases)."""

    q: int
    k: int
    v: int
    o: int
    q_bias: int
    k_bias: int
    v_bias: int
    o_bias: int
    textbook: int
    """4·d_model² plus d_model for each bias the layout has."""
    formula: int
    """d·h·d_k + 2·d_kv·h_kv·d_k·… for the actual layout, from the derived shape."""
    formula_text: str
    """The formula with numbers, e.g. ``64·8·8 + 2·64·8·8 + 8·8·64 + 4·64``."""
    deviations: tuple[Deviation, ...]
    """Why ``total`` differs from ``textbook``; the params add up exactly."""
    score_bias: int = 0
    """Score-bias parameter elements (relative-position biases), outside q, k, v, o and
    ``total``; see ``SCORE_BIAS_CONVENTION``."""
    score_map: int = 0
    """Parameters of the learned maps of the score map (``Layout.score_map_params``),
    part of ``total``."""
    kv_transform: int = 0
    """Parameters of the maps over positions K and V pass through
    (``Layout.kv_transform_params``), part of ``total``."""
    absorbed: int = 0
    """Parameters of the per-head maps absorbed into the query path and the context
    (``Layout.absorbed_params``), part of ``total``."""

    @property
    def total(self) -> int:
        """q + k + v + o (each weight plus bias) + the score map's learned maps + the
        K/V transforms over positions + the absorbed per-head maps."""
        return (self.q + self.k + self.v + self.o + self.score_map + self.kv_transform
                + self.absorbed)

    @property
    def delta(self) -> int:
        """total - textbook: what the deviations add up to."""
        return self.total - self.textbook

    @property
    def num_biases(self) -> int:
        """How many of Q, K, V and O have a bias."""
        return sum(1 for b in (self.q_bias, self.k_bias, self.v_bias, self.o_bias) if b)

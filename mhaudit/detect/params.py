"""Count stage: block parameters against the textbook 4·d² (+ biases), deviations explained."""

from __future__ import annotations

from dataclasses import dataclass, replace

from mhaudit.data import Deviation, Layout, ParamBreakdown, Projection


@dataclass(frozen=True)
class _Shape:
    """The dimensions that fix a block's parameter count."""

    d_q_in: int
    d_k_in: int
    d_v_in: int
    heads: int
    kv_heads: int
    d_k: int
    d_v: int
    d_out: int
    has: tuple[bool, bool, bool, bool]
    """Q, K, V, O projections present."""
    bias: tuple[bool, bool, bool, bool]
    """Q, K, V, O biases present."""
    kv_shared: bool
    o_extra: int = 0
    """Input features of O beyond the h·d_v of the heads (a branch concatenated in)."""
    low_rank: tuple[int | None, int | None, int | None, int | None] = (None, None, None, None)
    """Measured weight + bias of each low-rank factorised role (None: one d_in × out matrix)."""
    streams: int = 1
    """Token streams with their own Q, K, V and O weights (joint attention)."""
    maps: int = 1
    """Softmax maps per head, each from its own share of Q and K (differential attention)."""
    groups: tuple[int, int, int, int] = (1, 1, 1, 1)
    """Groups of each of Q, K, V and O (a grouped 1×1 convolution holds 1/g of a matrix)."""

    def widths(self) -> tuple[int, int, int, int]:
        """Output widths of Q, K, V and O."""
        return (
            self.heads * self.d_k * self.maps,
            self.kv_heads * self.d_k * self.maps,
            self.kv_heads * self.d_v,
            self.d_out,
        )

    def weights(self) -> tuple[int, int, int, int]:
        """Weight elements of Q, K, V and O."""
        q_w, k_w, v_w, _ = self.widths()
        parts = (
            self.d_q_in * q_w,
            self.d_k_in * k_w,
            0 if self.kv_shared else self.d_v_in * v_w,
            (self.heads * self.d_v + self.o_extra) * self.d_out,
        )
        return tuple(p * self.streams // g if on else 0  # type: ignore[return-value]
                     for p, on, g in zip(parts, self.has, self.groups, strict=True))

    def biases(self) -> tuple[int, int, int, int]:
        """Bias elements of Q, K, V and O."""
        shared = (False, False, self.kv_shared, False)
        return tuple(  # type: ignore[return-value]
            w * self.streams if (on and b and not s) else 0
            for w, on, b, s in zip(self.widths(), self.has, self.bias, shared, strict=True)
        )

    def total(self) -> int:
        """All parameters of this shape; a factorised role counts what its matrices hold."""
        parts = zip(self.weights(), self.biases(), self.low_rank, strict=True)
        return sum(w + b if low is None else low for w, b, low in parts)


def actual_shape(layout: Layout) -> _Shape:
    """The shape the graph shows."""
    d = layout.d_model
    roles = (layout.q, layout.k, layout.v, layout.o)
    return _Shape(
        d_q_in=layout.q.in_features if layout.q else d,
        d_k_in=layout.k.in_features if layout.k else d,
        d_v_in=layout.v.in_features if layout.v else d,
        heads=layout.num_heads,
        kv_heads=layout.num_kv_heads,
        d_k=layout.head_dim,
        d_v=layout.v_head_dim,
        d_out=layout.d_out,
        has=tuple(p is not None for p in roles),  # type: ignore[arg-type]
        bias=tuple(p is not None and p.bias_params > 0 for p in roles),  # type: ignore[arg-type]
        kv_shared=layout.kv_shared,
        o_extra=(layout.o.in_features - layout.num_heads * layout.v_head_dim
                 if layout.o else 0),
        low_rank=tuple(p.params if p is not None and p.low_rank_width else None for p in roles),  # type: ignore[arg-type]
        streams=layout.streams,
        maps=layout.score_maps,
        groups=tuple(p.groups if p is not None else 1 for p in roles),  # type: ignore[arg-type]
    )


def textbook_params(d_model: int, num_biases: int) -> int:
    """4·d² (W_Q, W_K, W_V, W_O of d×d) plus d for each bias."""
    return 4 * d_model * d_model + num_biases * d_model


def count(layout: Layout) -> ParamBreakdown:
    """The breakdown of one block, with deviations that add up exactly."""
    actual = actual_shape(layout)
    measured = [_params(p) for p in (layout.q, layout.k, layout.v, layout.o)]
    biases = [p.bias_params if p else 0 for p in (layout.q, layout.k, layout.v, layout.o)]
    d = layout.d_model
    textbook = textbook_params(d, sum(actual.bias))
    deviations = _deviations(actual, d) + _notes(layout)
    explained = textbook + sum(x.params for x in deviations)
    total = (sum(measured) + layout.score_map_params + layout.kv_transform_params
             + layout.absorbed_params)
    if total != explained:
        deviations.append(
            Deviation(
                f"not explained by the derived shape: {total - explained:+,} parameters "
                "(the layout may use weights the graph walk could not attribute)",
                total - explained,
            )
        )
    return ParamBreakdown(
        q=measured[0],
        k=measured[1],
        v=measured[2],
        o=measured[3],
        q_bias=biases[0],
        k_bias=biases[1],
        v_bias=biases[2],
        o_bias=biases[3],
        textbook=textbook,
        formula=actual.total(),
        formula_text=formula_text(actual),
        deviations=tuple(deviations),
        score_bias=layout.score_bias_params,
        score_map=layout.score_map_params,
        kv_transform=layout.kv_transform_params,
        absorbed=layout.absorbed_params,
    )


def _params(p: Projection | None) -> int:
    return p.params if p is not None else 0


def _deviations(actual: _Shape, d: int) -> list[Deviation]:
    """Walk from the textbook shape to the actual one, one cause at a time."""
    h = actual.heads
    steps: list[tuple[_Shape, str]] = []
    head = d // h if h else d
    shape = _Shape(d, d, d, h, h, head, head, d, (True,) * 4, actual.bias, False)
    inner = h * actual.d_k
    steps.append((replace(shape, d_k=actual.d_k, d_v=actual.d_k),
                  f"inner width h·d_k = {h}·{actual.d_k} = {inner:,} differs from "
                  f"d_model = {d:,}"))
    steps.append((replace(steps[-1][0], d_v=actual.d_v),
                  f"value head dim d_v = {actual.d_v} differs from d_k = {actual.d_k}"))
    kv = actual.kv_heads
    label = "MQA" if kv == 1 else "GQA" if kv < h else "more KV heads than query heads"
    steps.append((replace(steps[-1][0], kv_heads=kv),
                  f"{label}: {kv} KV heads for {h} query heads"))
    steps.append((replace(steps[-1][0], d_k_in=actual.d_k_in),
                  f"key input width kdim = {actual.d_k_in:,} differs from d_model"))
    steps.append((replace(steps[-1][0], d_v_in=actual.d_v_in),
                  f"value input width vdim = {actual.d_v_in:,} differs from d_model"))
    steps.append((replace(steps[-1][0], d_out=actual.d_out),
                  f"output projection width {actual.d_out:,} differs from d_model"))
    steps.append((replace(steps[-1][0], kv_shared=actual.kv_shared),
                  "K and V read one shared projection"))
    steps.append((replace(steps[-1][0], o_extra=actual.o_extra),
                  f"the output projection also reads {actual.o_extra:,} features besides the "
                  f"h·d_v = {h * actual.d_v:,} of the heads" if actual.o_extra > 0 else
                  f"the output projection reads {h * actual.d_v + actual.o_extra:,} features, "
                  f"not the h·d_v = {h * actual.d_v:,} of the heads (a per-head map of the "
                  "context before it)"))
    missing = "".join(r for r, on in zip("QKVO", actual.has, strict=True) if not on)
    steps.append((replace(steps[-1][0], has=actual.has),
                  f"no {'/'.join(missing)} projection"))
    steps.append((replace(steps[-1][0], low_rank=actual.low_rank),
                  f"low-rank factorised projections ({_low_rank_text(actual)}) instead of "
                  "full d_model × h·d matrices"))
    steps.append((replace(steps[-1][0], groups=actual.groups),
                  "grouped projections (" + ", ".join(
                      f"{r} {g} groups" for r, g in zip("QKVO", actual.groups, strict=True)
                      if g > 1) + ") instead of full matrices"))
    steps.append((replace(steps[-1][0], maps=actual.maps),
                  f"{actual.maps} softmax maps per head, each from its own {actual.d_k}-wide "
                  "share of Q and K (their difference is applied to V)"))
    steps.append((replace(steps[-1][0], streams=actual.streams),
                  f"joint attention over {actual.streams} token streams, each with its own "
                  "W_Q, W_K, W_V and W_O"))
    result: list[Deviation] = []
    previous = textbook_params(d, sum(actual.bias))
    for step, reason in steps:
        now = step.total()
        if now != previous:
            verb = "saves" if now < previous else "adds"
            result.append(Deviation(f"{reason}: {verb} {abs(now - previous):,}", now - previous))
        previous = now
    return result


def _notes(layout: Layout) -> list[Deviation]:
    """What the layout computes differently without changing W_Q, W_K, W_V and W_O."""
    h = layout.num_heads
    notes: list[str] = []
    if layout.sinks:
        notes.append(f"attention sinks: {layout.sinks} extra logit column(s) per head join "
                     f"the softmax ({layout.sinks * h:,} learned logits outside W_Q/W_K/W_V/W_O)")
    if layout.padded_head_dim:
        notes.append(f"head dim {layout.head_dim} is zero-padded to {layout.padded_head_dim} "
                     "for the kernel (no parameters)")
    if layout.score_bias_params:
        notes.append(f"score biases: {layout.score_bias_params:,} learned parameters bias the "
                     "logits (relative positions), outside W_Q/W_K/W_V/W_O and the total")
    if layout.windowed:
        notes.append(f"one attention over windows of {layout.windowed} tokens: the same "
                     "projections run once per window and are counted once")
    result = [Deviation(note, 0) for note in notes]
    if layout.absorbed_params:
        result.append(Deviation(
            "absorbed per-head maps: one matrix per head folded into the query path or "
            "applied to the context before O (latent attention's W_UK and W_UV), outside "
            f"W_Q/W_O: adds {layout.absorbed_params:,}", layout.absorbed_params))
    if layout.kv_transform_params:
        result.append(Deviation(
            f"K/V transforms over positions: learned maps after the K/V projections turn the "
            f"projected positions into the {layout.seq_len_kv} keys (a compressor of blocks of "
            "positions, an n→k map), "
            f"outside W_Q/W_K/W_V/W_O: adds {layout.kv_transform_params:,}",
            layout.kv_transform_params))
    if layout.head_mixing:
        mixed = layout.score_map_params
        result.insert(1 if layout.sinks else 0, Deviation(
            f"head mixing: learned maps of the {h} heads' scores (across heads, over the map)"
            f" outside W_Q/W_K/W_V/W_O: adds {mixed:,}" if mixed else
            f"head mixing: maps of the {h} heads' scores with no learned weights", mixed))
    return result


def _low_rank_text(shape: _Shape) -> str:
    """``Q 3,840, K 4,608`` for the roles whose count is their factorised matrices."""
    return ", ".join(f"{r} {low:,}" for r, low in zip("QKVO", shape.low_rank, strict=True)
                     if low is not None)


def formula_text(shape: _Shape) -> str:
    """The layout's count written out, e.g. ``64·8·8 + 2·64·8·8 + 8·8·64 + 256 (biases)``.

    A low-rank factorised role is written as its measured count (``4,608 (K low-rank)``).
    """
    terms: list[str] = []
    q_in, k_in, v_in = shape.d_q_in, shape.d_k_in, shape.d_v_in
    h, kv, dk, dv = shape.heads, shape.kv_heads, shape.d_k, shape.d_v
    low = shape.low_rank
    has_q, has_k, has_v, has_o = (on and lr is None for on, lr in zip(shape.has, low, strict=True))
    dk_text = f"{shape.maps}·{dk}" if shape.maps > 1 else f"{dk}"
    if has_q:
        terms.append(f"{q_in}·{h}·{dk_text}")
    v_on = has_v and not shape.kv_shared
    if has_k and v_on and k_in == v_in and dk == dv and shape.maps == 1:
        terms.append(f"2·{k_in}·{kv}·{dk}")
    else:
        if has_k:
            terms.append(f"{k_in}·{kv}·{dk_text}")
        if v_on:
            terms.append(f"{v_in}·{kv}·{dv}")
    if has_o and shape.o_extra:
        terms.append(f"({h}·{dv} + {shape.o_extra})·{shape.d_out}")
    elif has_o:
        terms.append(f"{h}·{dv}·{shape.d_out}")
    terms.extend(f"{n:,} ({r} low-rank)" for r, n in zip("QKVO", low, strict=True)
                 if n is not None)
    bias = sum(b for b, lr in zip(shape.biases(), low, strict=True) if lr is None)
    if bias:
        terms.append(f"{bias:,} (biases)")
    text = " + ".join(terms) if terms else "0"
    return f"{shape.streams}·({text})" if shape.streams > 1 else text

"""Property tests: detection and counting are exact on generated attention layouts.

One configurable module, ``ConfigurableAttention``, covers the space the detector
claims to handle: separate or fused projections, MHA/GQA/MQA with three ways of
repeating key/value heads, SDPA or an explicit matmul/einsum core, causal or not,
self- or cross-attention (with a memory of another length and, for separate
projections, another width). Hypothesis draws specs; every spec is built on the
meta device, traced, detected and counted, and the result must match the spec.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import pytest
import torch
import torch.nn.functional as F
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st
from torch import Tensor, nn

from mhaudit.data import Layout
from mhaudit.detect.blocks import detect
from mhaudit.detect.params import count
from mhaudit.trace.export import trace

Core = Literal["sdpa", "matmul", "einsum"]
Repeat = Literal["none", "repeat_interleave", "expand", "gqa"]

MAX_D_MODEL = 128
MAX_HEADS = 16
MAX_SEQ = 17

# No explain phase: it re-runs failing cases many times and doubles the time to a report.
PROPERTY_SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),
)


@dataclass(frozen=True)
class Spec:
    """Everything that fixes one generated attention block and its inputs."""

    d_model: int
    num_heads: int
    num_kv_heads: int
    """Divides ``num_heads``."""
    head_dim: int
    bias: bool
    fused: bool
    """One Linear for Q, K and V (self) or for K and V (cross), split by widths."""
    core: Core
    repeat: Repeat
    """How K/V heads are repeated up to ``num_heads``; ``"none"`` when h_kv == h."""
    causal: bool
    cross: bool
    kdim: int
    """Memory width (== d_model unless cross with separate projections)."""
    batch: int
    seq_q: int
    seq_kv: int
    """== seq_q for self-attention."""

    @property
    def groups(self) -> int:
        """Query heads per key/value head."""
        return self.num_heads // self.num_kv_heads

    def inputs(self) -> tuple[Tensor, ...]:
        """Positional inputs on the current default device."""
        x = torch.randn(self.batch, self.seq_q, self.d_model)
        if not self.cross:
            return (x,)
        return (x, torch.randn(self.batch, self.seq_kv, self.kdim))

    # Hand formulas, written from the spec (d = d_model, h, h_kv, d_k, kdim):
    #   q = d·h·d_k        + h·d_k     (bias)
    #   k = kdim·h_kv·d_k  + h_kv·d_k  (bias)
    #   v = kdim·h_kv·d_k  + h_kv·d_k  (bias)
    #   o = h·d_k·d        + d         (bias)
    # A fused weight is split by output width, so the same formulas hold for its slices.
    def q_params(self) -> int:
        h, d_k = self.num_heads, self.head_dim
        return self.d_model * h * d_k + (h * d_k if self.bias else 0)

    def kv_params(self) -> int:
        h_kv, d_k = self.num_kv_heads, self.head_dim
        return self.kdim * h_kv * d_k + (h_kv * d_k if self.bias else 0)

    def o_params(self) -> int:
        h, d_k, d = self.num_heads, self.head_dim, self.d_model
        return h * d_k * d + (d if self.bias else 0)


class ConfigurableAttention(nn.Module):
    """Multi-head attention whose layout, core and head sharing follow a ``Spec``."""

    def __init__(self, spec: Spec) -> None:
        super().__init__()
        self.spec = spec
        d, h, h_kv, d_k = spec.d_model, spec.num_heads, spec.num_kv_heads, spec.head_dim
        self.widths = (h * d_k, h_kv * d_k, h_kv * d_k)
        self.qkv: nn.Linear | None = None
        self.kv: nn.Linear | None = None
        self.q_proj: nn.Linear | None = None
        self.k_proj: nn.Linear | None = None
        self.v_proj: nn.Linear | None = None
        if spec.fused and not spec.cross:
            self.qkv = nn.Linear(d, sum(self.widths), bias=spec.bias)
        elif spec.fused:
            self.q_proj = nn.Linear(d, h * d_k, bias=spec.bias)
            self.kv = nn.Linear(spec.kdim, 2 * h_kv * d_k, bias=spec.bias)
        else:
            self.q_proj = nn.Linear(d, h * d_k, bias=spec.bias)
            self.k_proj = nn.Linear(spec.kdim, h_kv * d_k, bias=spec.bias)
            self.v_proj = nn.Linear(spec.kdim, h_kv * d_k, bias=spec.bias)
        self.o_proj = nn.Linear(h * d_k, d, bias=spec.bias)

    def _project(self, x: Tensor, memory: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if self.qkv is not None:
            q, k, v = self.qkv(x).split(self.widths, dim=-1)  # (B, n, h·d_k), 2 x (B, n, h_kv·d_k)
            return q, k, v
        assert self.q_proj is not None
        q = self.q_proj(x)  # (B, n_q, h·d_k)
        if self.kv is not None:
            k, v = self.kv(memory).split(self.widths[1:], dim=-1)  # 2 x (B, n_kv, h_kv·d_k)
            return q, k, v
        assert self.k_proj is not None and self.v_proj is not None
        return q, self.k_proj(memory), self.v_proj(memory)

    def _repeat(self, t: Tensor) -> Tensor:
        """(B, h_kv, n, d_k) -> (B, h, n, d_k), or unchanged for none/gqa."""
        g = self.spec.groups
        if self.spec.repeat == "repeat_interleave":
            return t.repeat_interleave(g, dim=1)
        if self.spec.repeat == "expand":
            b, h_kv, n, d_k = t.shape
            return t[:, :, None].expand(b, h_kv, g, n, d_k).reshape(b, h_kv * g, n, d_k)
        return t

    def _mask(self, n_q: int, n_kv: int, device: torch.device) -> Tensor:
        """True where a query may attend (top-left aligned, like SDPA's is_causal)."""
        return torch.ones(n_q, n_kv, dtype=torch.bool, device=device).tril()

    def forward(self, x: Tensor, memory: Tensor | None = None) -> Tensor:
        spec = self.spec
        h, h_kv, d_k = spec.num_heads, spec.num_kv_heads, spec.head_dim
        b, n_q, _ = x.shape  # (B, n_q, d)
        source = memory if memory is not None else x  # (B, n_kv, kdim)
        n_kv = source.shape[1]
        q, k, v = self._project(x, source)
        q = q.view(b, n_q, h, d_k).transpose(1, 2)  # (B, h, n_q, d_k)
        k = self._repeat(k.view(b, n_kv, h_kv, d_k).transpose(1, 2))  # (B, h|h_kv, n_kv, d_k)
        v = self._repeat(v.view(b, n_kv, h_kv, d_k).transpose(1, 2))  # (B, h|h_kv, n_kv, d_k)
        if spec.core == "sdpa":
            y = F.scaled_dot_product_attention(
                q, k, v, is_causal=spec.causal, enable_gqa=spec.repeat == "gqa"
            )  # (B, h, n_q, d_k)
        else:
            scale = d_k**-0.5
            if spec.core == "matmul":
                scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (B, h, n_q, n_kv)
            else:
                scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale  # (B, h, n_q, n_kv)
            if spec.causal:
                allowed = self._mask(n_q, n_kv, x.device)  # (n_q, n_kv)
                scores = scores.masked_fill(~allowed, float("-inf"))
            probs = scores.softmax(dim=-1)  # (B, h, n_q, n_kv)
            if spec.core == "matmul":
                y = torch.matmul(probs, v)  # (B, h, n_q, d_k)
            else:
                y = torch.einsum("bhqk,bhkd->bhqd", probs, v)  # (B, h, n_q, d_k)
        y = y.transpose(1, 2).reshape(b, n_q, h * d_k)  # (B, n_q, h·d_k)
        out: Tensor = self.o_proj(y)  # (B, n_q, d)
        return out


class Layer(nn.Module):
    """A residual wrapper, so that stacked blocks are named ``layers.{i}.attn``."""

    def __init__(self, spec: Spec) -> None:
        super().__init__()
        self.attn = ConfigurableAttention(spec)

    def forward(self, x: Tensor, memory: Tensor | None = None) -> Tensor:
        update: Tensor = self.attn(x, memory)  # (B, n_q, d)
        return x + update


class Stack(nn.Module):
    """N identical layers."""

    def __init__(self, spec: Spec, num_layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer(spec) for _ in range(num_layers))

    def forward(self, x: Tensor, memory: Tensor | None = None) -> Tensor:
        for layer in self.layers:
            x = layer(x, memory)
        return x


def _divisors(n: int) -> list[int]:
    return [i for i in range(1, n + 1) if n % i == 0]


@st.composite
def specs(draw: st.DrawFn) -> Spec:
    """Attention layouts with d_model <= 128, h <= 16, batch 1-3 and sequences 1-17."""
    h = draw(st.integers(1, MAX_HEADS))
    h_kv = draw(st.sampled_from(_divisors(h)))
    if draw(st.booleans()):  # the usual d_k = d_model / h
        d_k = draw(st.integers(1, MAX_D_MODEL // h))
        d = h * d_k
    else:  # inner width h·d_k differs from d_model
        d = draw(st.integers(1, MAX_D_MODEL))
        d_k = draw(st.integers(1, 32).filter(lambda v: v * h != d))
    core: Core = draw(st.sampled_from(["sdpa", "matmul", "einsum"]))
    repeat: Repeat = "none"
    if h_kv < h:
        styles: list[Repeat] = ["repeat_interleave", "expand"]
        if core == "sdpa":
            styles.append("gqa")
        repeat = draw(st.sampled_from(styles))
    fused = draw(st.booleans())
    cross = draw(st.booleans())
    seq_q = draw(st.integers(1, MAX_SEQ))
    seq_kv = seq_q
    kdim = d
    if cross:
        seq_kv = draw(st.integers(1, MAX_SEQ).filter(lambda n: n != seq_q))
        if not fused and draw(st.booleans()):
            kdim = draw(st.integers(1, MAX_D_MODEL))
    return Spec(
        d_model=d,
        num_heads=h,
        num_kv_heads=h_kv,
        head_dim=d_k,
        bias=draw(st.booleans()),
        fused=fused,
        core=core,
        repeat=repeat,
        causal=draw(st.booleans()),
        cross=cross,
        kdim=kdim,
        batch=draw(st.integers(1, 3)),
        seq_q=seq_q,
        seq_kv=seq_kv,
    )


def _detect(
    model_factory: type[nn.Module], spec: Spec, *extra: int
) -> tuple[nn.Module, list[Layout]]:
    with torch.device("meta"):
        model = model_factory(spec, *extra).eval()
        args = spec.inputs()
    return model, detect(trace(model, args, {}), model)


def _model_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _params(layout: Layout) -> tuple[int, int, int, int]:
    roles = (layout.q, layout.k, layout.v, layout.o)
    return tuple(p.params if p is not None else 0 for p in roles)  # type: ignore[return-value]


def _assert_counted(layout: Layout, expected_total: int) -> None:
    """count() matches the real parameters and explains every difference from 4·d²."""
    breakdown = count(layout)
    assert breakdown.total == expected_total
    unexplained = [d.reason for d in breakdown.deviations if d.reason.startswith("not explained")]
    assert not unexplained
    assert breakdown.textbook + sum(d.params for d in breakdown.deviations) == breakdown.total


def _spec(**changes: object) -> Spec:
    """A GQA self-attention spec with some fields changed, for explicit examples."""
    base = Spec(
        d_model=48, num_heads=6, num_kv_heads=2, head_dim=8, bias=True, fused=False,
        core="sdpa", repeat="gqa", causal=True, cross=False, kdim=48, batch=2, seq_q=7,
        seq_kv=7,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


# Rare corners of the strategy, always run: SDPA's enable_gqa, einsum cores, kdim != d.
@PROPERTY_SETTINGS
@given(spec=specs())
@example(spec=_spec())
@example(spec=_spec(cross=True, kdim=20, seq_kv=11, causal=False, bias=False))
@example(spec=_spec(core="einsum", repeat="expand", num_kv_heads=1, cross=True, seq_kv=3))
@example(spec=_spec(core="einsum", repeat="none", num_kv_heads=6, head_dim=5, batch=1))
@example(spec=_spec(core="matmul", repeat="repeat_interleave", num_kv_heads=3, seq_q=1, seq_kv=1))
def test_generated_layout_is_detected_exactly(spec: Spec) -> None:
    model, layouts = _detect(ConfigurableAttention, spec)
    assert len(layouts) == 1
    layout = layouts[0]
    got = {
        "kind": layout.kind,
        "implementation": layout.implementation,
        "d_model": layout.d_model,
        "num_heads": layout.num_heads,
        "num_kv_heads": layout.num_kv_heads,
        "head_dim": layout.head_dim,
        "v_head_dim": layout.v_head_dim,
        "batch_size": layout.batch_size,
        "seq_len_q": layout.seq_len_q,
        "seq_len_kv": layout.seq_len_kv,
        "d_out": layout.d_out,
        "causal": layout.causal,
        "params": _params(layout),
    }
    want = {
        "kind": "cross" if spec.cross else "self",
        "implementation": "sdpa" if spec.core == "sdpa" else "eager",
        "d_model": spec.d_model,
        "num_heads": spec.num_heads,
        "num_kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "v_head_dim": spec.head_dim,
        "batch_size": spec.batch,
        "seq_len_q": spec.seq_q,
        "seq_len_kv": spec.seq_kv,
        "d_out": spec.d_model,
        "causal": spec.causal,
        "params": (spec.q_params(), spec.kv_params(), spec.kv_params(), spec.o_params()),
    }
    assert got == want
    assert layout.name == ""
    assert layout.scale == pytest.approx(1.0 / math.sqrt(spec.head_dim))
    _assert_counted(layout, _model_params(model))


@PROPERTY_SETTINGS
@given(
    d_model=st.integers(1, MAX_D_MODEL),
    bias=st.booleans(),
    fused=st.booleans(),
    core=st.sampled_from(["sdpa", "matmul", "einsum"]),
)
def test_params_do_not_depend_on_heads(d_model: int, bias: bool, fused: bool, core: Core) -> None:
    """With h·d_k = d_model, every h gives 4·d² + 4·d (biases): heads only split the width."""
    textbook = 4 * d_model * d_model + (4 * d_model if bias else 0)
    base = Spec(
        d_model=d_model, num_heads=1, num_kv_heads=1, head_dim=d_model, bias=bias, fused=fused,
        core=core, repeat="none", causal=False, cross=False, kdim=d_model, batch=1, seq_q=3,
        seq_kv=3,
    )
    for h in (h for h in _divisors(d_model) if h <= MAX_HEADS):
        spec = replace(base, num_heads=h, num_kv_heads=h, head_dim=d_model // h)
        model, layouts = _detect(ConfigurableAttention, spec)
        assert len(layouts) == 1
        assert layouts[0].num_heads == h
        assert _model_params(model) == textbook
        breakdown = count(layouts[0])
        assert (breakdown.total, breakdown.textbook) == (textbook, textbook)
        assert breakdown.deviations == ()


@PROPERTY_SETTINGS
@given(spec=specs(), num_layers=st.integers(1, 4))
def test_stacked_layers_give_one_block_each(spec: Spec, num_layers: int) -> None:
    model, layouts = _detect(Stack, spec, num_layers)
    assert [lay.name for lay in layouts] == [f"layers.{i}.attn" for i in range(num_layers)]
    assert {lay.module_type for lay in layouts} == {"ConfigurableAttention"}
    per_block = _model_params(model) // num_layers
    for layout in layouts:
        assert (layout.num_heads, layout.num_kv_heads, layout.head_dim) == (
            spec.num_heads, spec.num_kv_heads, spec.head_dim
        )
        _assert_counted(layout, per_block)

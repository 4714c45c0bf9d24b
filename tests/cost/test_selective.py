"""``--checkpointing selective`` against a real CPU step under torch's MemTracker.

The reference is written here: each layer under ``torch.utils.checkpoint`` with torch's
selective activation checkpointing and a policy that names the paper's ops (Korthikanti
et al. 2022: QKᵀ, its scale and mask, softmax, its dropout, P·V) by their aten names and
the score shape (b·a, s, s) or (b, a, s, s) worked out from the constructor; a real fp32
AdamW step on CPU (a first step makes the states, the second is tracked).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._pytree import tree_leaves
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

import mhaudit
from mhaudit.data import TrainingCost
from tests.parallel.korthikanti import KorthikantiStack

aten = torch.ops.aten
S, B, H, A, LAYERS = 64, 2, 64, 4, 4

PAPER_OPS = {
    aten.bmm, aten.baddbmm, aten.mm,  # QKᵀ, P·V
    aten.mul, aten.div, aten.add, aten.masked_fill,  # the scale, the mask
    aten._softmax, aten._to_copy,  # softmax and its cast
    aten.native_dropout, aten.empty_like, aten.bernoulli_, aten.div_,  # dropout (GPU, CPU)
    aten.expand, aten.view, aten._unsafe_view, aten.transpose, aten.clone,  # their views
}
"""The attention core's ops, as aten names them on CPU tensors."""


def _paper_policy(batch: int, heads: int, seq: int) -> Callable[..., CheckpointPolicy]:
    def is_scores(t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.numel() == batch * heads * seq * seq \
            and tuple(t.shape[-2:]) == (seq, seq)

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        core = op.overloadpacket in PAPER_OPS and (
            any(is_scores(t) for t in tree_leaves(ctx.op_output))
            or (op.overloadpacket in (aten.bmm, aten.baddbmm, aten.mm)
                and any(is_scores(t) for t in args)))
        return CheckpointPolicy.MUST_RECOMPUTE if core else CheckpointPolicy.PREFER_SAVE

    return policy


def _memtracker_step(model: nn.Module, layers: list[nn.Module], inputs: dict[str, Any],
                     loss: Callable[[Any], torch.Tensor],
                     policy: Callable[..., CheckpointPolicy] | None) -> dict[str, int]:
    """MemTracker's peak of the second of two real AdamW steps, each layer selectively
    checkpointed under ``policy`` (none: no checkpointing)."""
    from torch.distributed._tools.mem_tracker import MemTracker

    for layer in layers if policy is not None else []:
        layer.forward = functools.partial(  # type: ignore[method-assign]
            checkpoint, layer.forward, use_reentrant=False, context_fn=functools.partial(
                create_selective_checkpoint_contexts, policy,
                allow_cache_entry_mutation=True))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)

    def step() -> None:
        loss(model(**inputs)).backward()  # type: ignore[no-untyped-call]
        opt.step()
        opt.zero_grad()

    torch.manual_seed(0)
    step()
    tracker = MemTracker()
    tracker.track_external(model, opt, *inputs.values())
    with tracker:
        step()
    (device,) = tracker.get_tracker_snapshot("peak").values()
    return {str(getattr(k, "name", k)): int(v) for k, v in device.items()}


def _ours(build: Callable[[], nn.Module], inputs: dict[str, Any], checkpointing: str
          ) -> TrainingCost:
    with torch.device("meta"):
        model = build()
    meta = {k: v.to("meta") for k, v in inputs.items()}
    training = mhaudit.audit(model, meta, train=True, checkpointing=checkpointing,
                             gpu="h100").training
    assert training is not None
    return training


def _stack() -> nn.Module:
    return KorthikantiStack(LAYERS, H, A)


@pytest.mark.slow
def test_selective_matches_memtracker_on_the_paper_layer() -> None:
    x = {"x": torch.randn(B, S, H)}
    ours = {c: _ours(_stack, x, c) for c in ("none", "selective", "layers")}
    torch.manual_seed(0)
    model = _stack()
    reference = _memtracker_step(model, list(model.layers), x, torch.Tensor.sum,
                                 _paper_policy(B, A, S))
    # the CPU reference keeps the step counters beside the rest; a CUDA run on the host
    selective = ours["selective"]
    assert selective.peak_bytes + selective.host_state_bytes == pytest.approx(
        reference["Total"], rel=0.001)
    assert "selective (Korthikanti et al. 2022)" in selective.convention
    # none ≥ selective ≥ layers, for the activations saved by the forward
    saved = {c: sum(b.saved_bytes for b in t.blocks) for c, t in ours.items()}
    assert saved["none"] > saved["selective"] > saved["layers"]
    peaks = {c: t.peak_bytes for c, t in ours.items()}
    assert peaks["none"] > peaks["selective"] > peaks["layers"]
    # without checkpointing each block keeps three score tensors, b·a·s·s elements in fp32:
    # softmax out, the dropout mask (a float tensor on CPU) and the dropout out,
    # 2·4·64·64·(4 + 4 + 4) = 393,216 B per block; selective keeps none of them
    assert all(b.scores_saved_bytes == 2 * 4 * 64 * 64 * 12 for b in ours["none"].blocks)
    assert all(b.scores_saved_bytes == 0 for b in selective.blocks)
    # the block (here the whole layer) drops the scores less what torch's SAC caches that
    # the backward does not read: the outputs of Q, K, V, P·V, O, the MLP's down
    # projection and the two residual dropouts, eight s·b·h fp32 tensors,
    # 8·64·2·64·4 = 262,144 B: 393,216 − 262,144 = 131,072 B per block
    drops = [n.saved_bytes - s.saved_bytes for n, s in zip(ours["none"].blocks,
                                                          selective.blocks, strict=True)]
    assert drops == [131072] * LAYERS


def _llama() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=4, vocab_size=300, max_position_embeddings=256,
        attention_dropout=0.1, attn_implementation="eager", use_cache=False))


@pytest.mark.slow
def test_selective_matches_memtracker_on_eager_llama() -> None:
    ids = torch.randint(0, 300, (2, 128))
    batch = {"input_ids": ids, "labels": ids}
    ours = {c: _ours(_llama, batch, c) for c in ("none", "selective")}
    torch.manual_seed(0)
    model = _llama()
    reference = _memtracker_step(model, list(model.model.layers), batch,
                                 lambda out: out.loss, _paper_policy(2, 4, 128))
    selective = ours["selective"]
    assert selective.peak_bytes + selective.host_state_bytes == pytest.approx(
        reference["Total"], rel=0.01)
    # each block's scores: softmax out, dropout mask and out, fp32, and the scaled,
    # masked logits the eager code keeps for nothing else: b·a·s·s·(4 + 4 + 4) at least,
    # 2·4·128·128·12 = 1,572,864 B; all gone under selective
    assert all(b.scores_saved_bytes >= 1572864 for b in ours["none"].blocks)
    assert all(b.scores_saved_bytes == 0 for b in selective.blocks)
    assert selective.breakdown.activations < ours["none"].breakdown.activations


@pytest.mark.slow
def test_a_fused_kernel_recomputes_nothing() -> None:
    from tests.fixtures.small_models import TinyGPT

    ids = {"ids": torch.zeros(2, 32, dtype=torch.long)}
    plain, selective = (_ours(TinyGPT, ids, c) for c in ("none", "selective"))
    # SDPA's fused kernel keeps output and log-sum-exp, no b·h·n·n scores: the paper's
    # selective recomputation has nothing to recompute, and the step is the plain one
    assert selective.checkpointing == "selective"
    assert (selective.peak_bytes, selective.flops, selective.blocks) == (
        plain.peak_bytes, plain.flops, plain.blocks)
    assert "selective (Korthikanti et al. 2022) changes nothing here" in selective.convention
    assert f"{plain.attention_kernel} kernel keeps" in selective.convention


def test_the_policy_recomputes_the_attention_core_only() -> None:
    from mhaudit.phases.selective import ScoreRecompute

    with torch.device("meta"):
        model = KorthikantiStack(1, 32, 2)
    x = torch.zeros(1, 24, 32, device="meta")  # n = 24 ≠ d_k = 16: Q is not score-shaped
    (block,) = mhaudit.audit(model, (x,)).blocks
    policy = ScoreRecompute([block.layout])
    marked: list[str] = []

    def spy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        choice = policy(ctx, op, *args, **kwargs)
        if choice is CheckpointPolicy.MUST_RECOMPUTE:
            marked.append(op.overloadpacket.__name__)
        return choice

    layer = KorthikantiStack(1, 32, 2).layers[0]
    out = checkpoint(layer, torch.randn(1, 24, 32), use_reentrant=False,
                     context_fn=functools.partial(create_selective_checkpoint_contexts, spy,
                                                  allow_cache_entry_mutation=True))
    out.sum().backward()
    # QKᵀ (bmm, and its view back to (b, a, s, s)), its scale, softmax, dropout on CPU
    # (empty_like, bernoulli_, div_, mul), and P·V reading the probabilities (expand,
    # view, bmm); Q, K and V, their views and everything after P·V are kept
    assert sorted(marked) == sorted([
        "bmm", "_unsafe_view", "mul", "_softmax", "empty_like", "bernoulli_", "div_", "mul",
        "expand", "view", "bmm"])
    assert policy.recomputed == len(marked)

"""Context parallelism: the K/V ring against torch's own ring attention, activations and
chunk scores by hand.

torch's ``context_parallel`` dispatches the ring only for the CUDA SDPA kernels (flash,
efficient, cuDNN): on CPU it raises ("aten._scaled_dot_product_flash_attention_for_cpu
does not have a sharding strategy registered"). The oracle therefore drives torch's ring
functions themselves (``_templated_ring_attention`` and its backward, the code
``context_parallel`` runs) with the CPU flash kernel, on a fake process group under
CommDebugMode, and counts the bytes each collective sends."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from mhaudit.api import audit
from mhaudit.cost.devices import get_profile
from mhaudit.parallel import plan_costs

B, S, D, H, H_KV = 2, 16, 64, 8, 2
D_K = D // H


class _Attention(nn.Module):
    """Causal grouped-query attention, by SDPA or by an explicit score matrix."""

    def __init__(self, eager: bool) -> None:
        super().__init__()
        self.eager = eager
        self.q = nn.Linear(D, D, bias=False)
        self.k = nn.Linear(D, H_KV * D_K, bias=False)
        self.v = nn.Linear(D, H_KV * D_K, bias=False)
        self.o = nn.Linear(D, D, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q(x).view(b, n, H, D_K).transpose(1, 2)  # (B, h, n, d_k)
        k = self.k(x).view(b, n, H_KV, D_K).transpose(1, 2)  # (B, h_kv, n, d_k)
        v = self.v(x).view(b, n, H_KV, D_K).transpose(1, 2)
        if self.eager:
            k, v = (t.repeat_interleave(H // H_KV, dim=1) for t in (k, v))
            scores = q @ k.transpose(-1, -2) / D_K ** 0.5  # (B, h, n, n)
            mask = torch.ones(n, n, dtype=torch.bool).tril()
            y = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        else:
            y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                           enable_gqa=True)
        return self.o(y.transpose(1, 2).reshape(b, n, D))


class _Model(nn.Module):
    def __init__(self, eager: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Attention(eager) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + layer(x)
        return x


def _cost(plan: str, phase: str = "train", eager: bool = False, **options: Any) -> Any:
    model = _Model(eager)
    args = (torch.zeros(B, S, D),)
    report = audit(model, args)
    return plan_costs(model, args, {}, report.blocks, plan, get_profile("h100"), phase,
                      **options)


def _gqa(op: Any) -> Any:
    """The CPU flash kernel on grouped K/V (expanded inside, as a GQA kernel reads them)."""
    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> Any:
        rep = q.shape[1] // k.shape[1]
        return op(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), **kw)
    return run


def _torch_ring_bytes(cp: int, dtype: torch.dtype) -> dict[str, int]:
    """Bytes rank 0 sends in one attention layer's ring, forward and backward, by kind:
    an all-gather sends (g − 1) copies of its input, an all-to-all every split but its own."""
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.experimental._context_parallel import _attention as ring
    from torch.testing._internal.distributed.fake_pg import FakeStore

    aten = torch.ops.aten

    def forward(q: Any, k: Any, v: Any, is_causal: bool = False, **_: Any) -> Any:
        return aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, is_causal)

    def backward(query: Any, key: Any, value: Any, out: Any, logsumexp: Any,
                 is_causal: bool = False, grad_out: Any = None, **_: Any) -> Any:
        rep = query.shape[1] // key.shape[1]
        dq, dk, dv = aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out, query, key.repeat_interleave(rep, 1), value.repeat_interleave(rep, 1),
            out, logsumexp, 0.0, is_causal)
        fold = (B, key.shape[1], rep, *key.shape[2:])  # the groups' gradients summed
        return dq, dk.view(fold).sum(2), dv.view(fold).sum(2)

    sent: dict[str, int] = {}

    class Counting(CommDebugMode):  # type: ignore[misc]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            before = self.get_total_counts()
            out = super().__torch_dispatch__(func, types, args, kwargs)
            if self.get_total_counts() > before:
                name, t = str(func._overloadpacket), args[0]
                if "all_gather" in name:
                    sent["all_gather"] = sent.get("all_gather", 0) + (
                        (args[1] - 1) * t.numel() * t.element_size())
                else:
                    row = t.numel() // t.shape[0] * t.element_size()
                    sent["all_to_all"] = sent.get("all_to_all", 0) + row * (
                        sum(args[2]) - args[2][0])
            return out

    dist.init_process_group("fake", rank=0, world_size=cp, store=FakeStore())
    try:
        chunk = S // cp
        q = torch.randn(B, H, chunk, D_K, dtype=dtype)  # (B, h, s/cp, d_k)
        k, v = (torch.randn(B, H_KV, chunk, D_K, dtype=dtype) for _ in range(2))
        with Counting():
            out, lse = ring._templated_ring_attention(
                dist.group.WORLD, 2, _gqa(forward), q, k, v, is_causal=True)[:2]
            ring._templated_ring_attention_backward(
                dist.group.WORLD, 2, backward, torch.ones_like(out), "grad_out", q, k, v,
                out, lse, is_causal=True)
    finally:
        dist.destroy_process_group()
    return sent


def test_kv_ring_bytes_equal_torchs_ring() -> None:
    torch_ = _torch_ring_bytes(4, torch.bfloat16)
    cost = _cost("cp=4", precision="bf16")
    ring = cost.context
    assert ring is not None
    # shard S = b·(s/cp)·h_kv·(d_k + d_v) = 2·4·2·16 = 256 elements. Per layer: all-gathers
    # of K/V forward and backward, 2·(4 − 1)·256·2 B = 3,072; dK/dV at fp32 at each of the 4
    # steps, 4·256·4 B = 4,096; two layers
    assert torch_ == {"all_gather": 3_072, "all_to_all": 4_096}
    assert cost.comm_bytes_per_step.all_gather == 2 * torch_["all_gather"]
    assert cost.comm_bytes_per_step.all_to_all == 2 * torch_["all_to_all"]
    assert ring.kv_exchange_bytes == 2 * (3_072 + 4_096)
    assert ring.kv_exchange_calls == 2 * (2 + 4)
    assert ring.load_balanced and ring.tokens_per_rank == 4


def test_activations_split_over_cp_without_scores() -> None:
    # Korthikanti per layer at 16 bits: 34·s·b·h; cp = 4 keeps s/cp = 4 positions:
    # 34·4·2·64 = 17,408 B per layer, two layers 34,816 (at bf16, scale 1)
    assert _cost("cp=4", precision="bf16").per_device_bytes.activations == 34_816
    assert _cost("tp=1", precision="bf16").per_device_bytes.activations == 4 * 34_816


def test_math_kernel_holds_one_chunk_of_scores() -> None:
    cost = _cost("cp=4", eager=True, precision="bf16")
    assert cost.context is not None
    # b·h·(s/cp)²·bytes = 2·8·4·4·2 = 512
    assert cost.context.chunk_scores_bytes == 512
    assert cost.per_device_bytes.temporaries == 512
    # no scores saved under the ring: the same 34,816 B as the fused kernel's
    assert cost.per_device_bytes.activations == 34_816


def test_decode_keeps_the_whole_cache() -> None:
    one, ring = (_cost(plan, "decode", context=S) for plan in ("tp=1", "cp=4"))
    assert ring.context is not None and not ring.context.kv_cache_split
    assert ring.per_device_bytes.kv_cache == one.per_device_bytes.kv_cache
    assert ring.context.kv_exchange_bytes == 0

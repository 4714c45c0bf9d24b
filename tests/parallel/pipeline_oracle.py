"""torch's own pipeline run as the reference: a tiny Llama-style model cut into stages, each
rank's ``Schedule1F1B`` step run on real CPU tensors on a fake process group, its peak read
by MemTracker and its sends counted where the schedule issues them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Block(nn.Module):
    """Pre-norm GQA attention and a SwiGLU MLP, as a Llama layer."""

    def __init__(self, d: int, h: int, h_kv: int, ff: int) -> None:
        super().__init__()
        self.h, self.h_kv, self.d_k = h, h_kv, d // h
        self.attn_norm, self.mlp_norm = RMSNorm(d), RMSNorm(d)
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, h_kv * self.d_k, bias=False)
        self.v = nn.Linear(d, h_kv * self.d_k, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate = nn.Linear(d, ff, bias=False)
        self.up = nn.Linear(d, ff, bias=False)
        self.down = nn.Linear(ff, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        y = self.attn_norm(x)
        q = self.q(y).view(b, n, self.h, self.d_k).transpose(1, 2)  # (B, h, n, d_k)
        k = self.k(y).view(b, n, self.h_kv, self.d_k).transpose(1, 2)  # (B, h_kv, n, d_k)
        v = self.v(y).view(b, n, self.h_kv, self.d_k).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, n, d))
        y = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class TinyLlama(nn.Module):
    """Embeddings, ``layers``, final norm and LM head; with labels, (loss, logits) as
    transformers' causal LMs return them."""

    def __init__(self, vocab: int = 256, d: int = 64, layers: int = 4, h: int = 4,
                 h_kv: int = 2, ff: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Block(d, h, h_kv, ff) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor | None = None) -> Any:
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        logits = self.head(self.norm(x))
        return logits if labels is None else (lm_loss(logits, labels), logits)


def lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


class StageModule(nn.Module):
    """The part of a TinyLlama one stage runs: its layers, the embeddings on the first
    stage, the final norm and head on the last."""

    def __init__(self, model: TinyLlama, layers: Sequence[str], first: bool,
                 last: bool) -> None:
        super().__init__()
        self.embed = model.embed if first else None
        self.layers = nn.ModuleList(model.get_submodule(name) for name in layers)
        self.norm = model.norm if last else None
        self.head = model.head if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        if self.head is not None and self.norm is not None:
            x = self.head(self.norm(x))
        return x


def _static_stage(stage: Any, schedule: Any) -> None:
    """Metadata from the shapes given, not from a vote over the fake group (whose receives
    return nothing)."""
    from torch.distributed.pipelining.stage import InferenceMode

    def static(stages: Any, has_backward: bool, p2p_done: bool) -> None:
        for s in stages:
            s._inference_mode = InferenceMode.STATIC

    schedule._warmup_p2p = static


def run_1f1b(model: TinyLlama, ids: torch.Tensor, stages: Sequence[Sequence[str]],
             rank: int, microbatches: int) -> tuple[int, int]:
    """(peak bytes, bytes sent) of rank ``rank`` in the second of two AdamW steps of
    torch's Schedule1F1B over ``stages`` (the first creates the optimizer states and the
    receive buffers, which the tracker is then told of). Outputs are not kept
    (``return_outputs=False``)."""
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B
    from torch.distributed.pipelining import schedules as torch_schedules
    from torch.testing._internal.distributed.fake_pg import FakeStore

    p, d = len(stages), model.embed.embedding_dim
    mb = ids.shape[0] // microbatches
    act = torch.zeros(mb, ids.shape[1], d, requires_grad=True)
    first, last = rank == 0, rank == p - 1
    module = StageModule(model, stages[rank], first, last)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny real ops: threads only contend
    dist.init_process_group("fake", rank=rank, world_size=p, store=FakeStore())
    try:
        stage = PipelineStage(
            module, rank, p, torch.device("cpu"),
            input_args=(ids[:mb],) if first else (act,),
            output_args=(torch.zeros(mb, ids.shape[1], model.head.out_features,
                                     requires_grad=True),) if last else (act,),
            input_grads=(None,) if first else (torch.zeros_like(act),),
            output_grads=None if last else (torch.zeros_like(act),))
        schedule = Schedule1F1B(stage, n_microbatches=microbatches, loss_fn=lm_loss)
        _static_stage(stage, schedule)
        opt = torch.optim.AdamW(module.parameters())

        def step() -> None:
            if first:
                schedule.step(ids, return_outputs=False)
            else:
                schedule.step(target=ids, return_outputs=False)
            opt.step()

        step()
        opt.zero_grad()
        tracker = MemTracker()
        buffers = [info.buffer for infos in (*stage.args_recv_info.values(),
                                             *stage.grad_recv_info.values())
                   for info in infos if getattr(info, "buffer", None) is not None]
        tracker.track_external(module, opt, *buffers)
        sent: list[int] = []
        original = torch_schedules._batch_p2p

        def counted(ops: list[dist.P2POp], desc: str | None = None) -> Any:
            sent.extend(op.tensor.numel() * op.tensor.element_size() for op in ops
                        if op.op is dist.isend)
            return original(ops, desc)

        forward = stage.forward_one_chunk

        def fresh(*args: Any, **kwargs: Any) -> Any:
            tracker.reset_mod_stats()  # MemTracker refuses a root module run twice
            return forward(*args, **kwargs)

        stage.forward_one_chunk = fresh  # type: ignore[method-assign]
        torch_schedules._batch_p2p = counted
        try:
            with tracker:
                step()
        finally:
            torch_schedules._batch_p2p = original
        snap = next(iter(tracker.get_tracker_snapshot("peak").values()))
        peak = snap["Total"]
    finally:
        dist.destroy_process_group()
        torch.set_num_threads(threads)
    return int(peak), sum(sent)

"""SDPA in a fake step as the target GPU runs it: torch's dispatch rules pick each call's
kernel, and the call keeps for the backward what that kernel keeps.

The one place where the training step's attention memory follows the chosen kernel: a
fused kernel (cuDNN, flash, memory-efficient) keeps the output and the log-sum-exp (and
an RNG seed with dropout), so the call runs with dropout 0, which CPU torch runs with its
flash kernel, saving the same; the math fallback keeps the b·h·n_q·n_kv probabilities,
so the call runs on torch's math backend, dropout included.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import TorchFunctionMode

from mhaudit.cost.devices import GpuProfile
from mhaudit.cost.kernels import KernelChoice, choose_kernel
from mhaudit.cost.sdpa_rules import KernelQuery
from mhaudit.data import Layout

_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
_MHA = inspect.signature(F.multi_head_attention_forward)


def _sdpa_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    return {**dict(zip(_SDPA_ARGS, args, strict=False)), **kwargs}


class TargetAttention(TorchFunctionMode):
    """Run each SDPA call (also the one inside ``F.multi_head_attention_forward``) as the
    kernel :func:`~mhaudit.cost.kernels.choose_kernel` picks on ``profile`` at ``dtype``.

    ``layouts`` are the detected blocks by name and ``owner`` names the block that is
    running: its detected mask reading decides whether a mask tensor counts as explicit
    (a causal triangle from positions alone does not). ``choices`` keeps the kernel of
    each block's last call (``""`` for a call outside every block).
    """

    def __init__(self, profile: GpuProfile, dtype: str, layouts: Mapping[str, Layout],
                 owner: Callable[[], str | None]) -> None:
        super().__init__()
        self.profile, self.dtype, self.layouts, self.owner = profile, dtype, layouts, owner
        self.choices: dict[str, KernelChoice] = {}

    def _choose(self, query: KernelQuery) -> KernelChoice:
        name = self.owner() or ""
        layout = self.layouts.get(name)
        if query.has_mask and layout is not None and not layout.explicit_mask:
            query = replace(query, has_mask=False,
                            is_causal=bool(layout.causal) and (query.seq_len_q or 0) > 1)
        choice = choose_kernel(query)
        self.choices[name] = choice
        return choice

    def _run(self, choice: KernelChoice, func: Any, args: tuple[Any, ...],
             kwargs: dict[str, Any], dropout_at: int, dropout_name: str) -> Any:
        if choice.materializes_scores:
            with sdpa_kernel(SDPBackend.MATH):
                return func(*args, **kwargs)
        if len(args) > dropout_at:
            args = (*args[:dropout_at], 0.0, *args[dropout_at + 1:])
        else:
            kwargs[dropout_name] = 0.0
        return func(*args, **kwargs)

    def _sdpa(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call = _sdpa_call(args, kwargs)
        q, k, v = call["query"], call["key"], call["value"]
        heads = q.dim() >= 3
        choice = self._choose(KernelQuery(
            head_dim=q.shape[-1], v_head_dim=v.shape[-1], dtype=self.dtype,
            profile=self.profile, has_mask=call.get("attn_mask") is not None,
            dropout_p=float(call.get("dropout_p") or 0.0),
            is_causal=bool(call.get("is_causal")), seq_len_q=q.shape[-2],
            seq_len_kv=k.shape[-2], batch_size=q.shape[0] if q.dim() == 4 else 1,
            num_heads=q.shape[-3] if heads else 1, num_kv_heads=k.shape[-3] if heads else 1,
            enable_gqa=bool(call.get("enable_gqa")), nested=q.is_nested,
            training=_training(q, k, v)))
        return self._run(choice, func, args, kwargs, 4, "dropout_p")

    def _mha(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``F.multi_head_attention_forward``: the SDPA call inside it, which this mode
        does not see from there, read from its arguments ((L, N, E) or (L, E) inputs;
        ``need_weights`` runs eager code instead)."""
        bound = _MHA.bind(*args, **kwargs)
        bound.apply_defaults()
        call = bound.arguments
        if call["need_weights"]:
            return func(*args, **kwargs)
        query, key = call["query"], call["key"]
        heads = int(call["num_heads"])
        width = query.shape[-1] // heads
        is_causal = bool(call["is_causal"])
        choice = self._choose(KernelQuery(
            head_dim=width, v_head_dim=width, dtype=self.dtype, profile=self.profile,
            has_mask=call["key_padding_mask"] is not None or (
                call["attn_mask"] is not None and not is_causal),
            dropout_p=float(call["dropout_p"]) if call["training"] else 0.0,
            is_causal=is_causal, seq_len_q=query.shape[0], seq_len_kv=key.shape[0],
            batch_size=query.shape[1] if query.dim() == 3 else 1, num_heads=heads,
            training=_training(query, key, call["in_proj_weight"])))
        dropout_at = list(_MHA.parameters).index("dropout_p")
        return self._run(choice, func, args, kwargs, dropout_at, "dropout_p")

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is F.scaled_dot_product_attention:
            return self._sdpa(func, tuple(args), kwargs)
        if func is F.multi_head_attention_forward:
            return self._mha(func, tuple(args), kwargs)
        return func(*args, **kwargs)


def _training(*tensors: Any) -> bool:
    """The call's inputs need a gradient: torch applies the backward's limits."""
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def attention_mode(mode: TargetAttention | None) -> contextlib.AbstractContextManager[Any]:
    """``mode`` as a context, or nothing without one."""
    return mode if mode is not None else contextlib.nullcontext()

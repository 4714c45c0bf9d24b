"""Sequence parallelism on the model: which norms run on sequence shards and gather their
output for the projections, and the embedding and head split over the vocabulary, found by
following the model's own forward."""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from mhaudit.data import AttentionBlock
from mhaudit.parallel.engine import model_key, read_once
from mhaudit.parallel.roles import COLWISE, EMBEDDING, SEQUENCE, TpModule, fsdp_units


@dataclass(frozen=True)
class SpLayout:
    """The modules sequence parallelism adds to the TP plan, and what stops torch."""

    modules: tuple[TpModule, ...]
    """The token embedding (row-wise over the vocabulary, its output scattered along the
    sequence), every norm of width d (:data:`SEQUENCE`, gathered where it feeds
    column-wise projections) and the head (column-wise, its logits gathered)."""
    blocker: str | None
    """Why torch cannot run the SP plan on this model; None when it can."""


def _norms(model: nn.Module, d: int, blocks: Sequence[AttentionBlock],
           layers: Sequence[str]) -> list[str]:
    """Leaf modules whose parameters are all vectors of d elements (LayerNorm, RMSNorm and
    any other per-token scale), outside the attention modules (a layer that is its own
    attention block keeps its norms): what runs on shards."""
    inside = tuple(b.name + "." for b in blocks if b.name and b.name not in layers)
    found = []
    for name, mod in model.named_modules():
        params = list(mod.parameters(recurse=False))
        if (not name or name.startswith(inside) or any(True for _ in mod.children())
                or isinstance(mod, (nn.Linear, nn.Embedding)) or not params):
            continue
        if all(p.dim() == 1 and p.numel() == d for p in params):
            found.append(name)
    return found


def _outside(model: nn.Module, layers: Sequence[str], kind: type[nn.Module]) -> list[str]:
    """Modules of ``kind`` outside every layer unit."""
    return [name for name, mod in model.named_modules() if isinstance(mod, kind)
            and not any(name.startswith(u + ".") for u in layers)]


def _first_tensor(args: Any, kwargs: Mapping[str, Any]) -> torch.Tensor | None:
    return next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)


def _feeders(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
             norms: Sequence[str], consumers: Sequence[str]) -> dict[str, str | None]:
    """For each consumer module, the norm whose output (or a view of it: the head may read
    the last positions) is its input; None when an op stands between them or no norm feeds
    it. Read from one forward of a fake copy."""
    from mhaudit.fake.mode import FakeMode
    from mhaudit.parallel.engine import _fake_inputs, _meta_copy

    twin = _meta_copy(model)
    dtype = next((p.dtype for p in twin.parameters() if p.is_floating_point()), torch.float32)
    made: dict[int, tuple[str, torch.Tensor]] = {}
    fed: dict[str, str | None] = {}

    def record(name: str) -> Any:
        def hook(_mod: nn.Module, _args: Any, out: Any) -> None:
            if isinstance(out, torch.Tensor):
                made[id(out)] = (name, out)  # the tensor is kept, so its id is not reused
        return hook

    def reads(name: str) -> Any:
        def hook(_mod: nn.Module, args: Any, kwargs: Any) -> None:
            x = _first_tensor(args, kwargs)
            base = x if x is None or x._base is None else x._base  # a slice reads its base
            fed.setdefault(name, made[id(base)][0] if id(base) in made else None)
        return hook

    for name in norms:
        twin.get_submodule(name).register_forward_hook(record(name))
    for name in consumers:
        twin.get_submodule(name).register_forward_pre_hook(reads(name), with_kwargs=True)
    with FakeMode(allow_non_fake_inputs=True), torch.no_grad():
        twin.to_empty(device="cpu")
        twin(*_fake_inputs(args, dtype), **_fake_inputs(dict(kwargs), dtype))
    return fed


def _norm_module(model: nn.Module, name: str, d: int, gathered: bool) -> TpModule:
    """A norm as the plan sees it: ``out_features`` is its parameter elements (weight and
    bias), whose gradients the TP group all-reduces once per step."""
    elements = sum(p.numel() for p in model.get_submodule(name).parameters(recurse=False))
    return TpModule(name, SEQUENCE, d, elements, output_gathered=gathered)


def _blocker(model: nn.Module, embeddings: Sequence[str], head: str | None,
             d: int) -> str | None:
    if not embeddings:
        return (f"the model's input is not a token embedding of width {d}, so nothing "
                "splits the residual stream into sequence shards")
    if len(embeddings) > 1:
        return (f"{' and '.join(embeddings)} both feed the residual stream; the SP plan "
                "splits one token embedding")
    if head is not None and model.get_submodule(head).weight is model.get_submodule(
            embeddings[0]).weight:
        return (f"the head {head} shares the embedding's weight, which splitting both over "
                "the vocabulary (RowwiseParallel, ColwiseParallel) would untie")
    return None


_LAYOUTS: weakref.WeakKeyDictionary[nn.Module, tuple[Any, SpLayout]] = (
    weakref.WeakKeyDictionary())
"""The last layout of each model, with what it was read from: the plans of one sweep share
one forward."""


def _key(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
         blocks: Sequence[AttentionBlock], modules: Sequence[TpModule]) -> Any:
    """Everything a layout is read from: the module tree, the input shapes, the blocks and
    the TP modules."""
    return model_key(model, args, kwargs), tuple(b.name for b in blocks), tuple(modules)


def sp_layout(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
              blocks: Sequence[AttentionBlock], modules: Sequence[TpModule]) -> SpLayout:
    """:func:`read_sp_layout`, read once per model and inputs (a sweep's plans share it)."""
    return read_once(_LAYOUTS, model, _key(model, args, kwargs, blocks, modules),
                     lambda: read_sp_layout(model, args, kwargs, blocks, modules))


def read_sp_layout(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                   blocks: Sequence[AttentionBlock], modules: Sequence[TpModule]) -> SpLayout:
    """The SP plan of ``model``, as torchtitan's ``parallelize_llama`` writes it: every norm
    of width d runs on sequence shards (``SequenceParallel``); the output of each one that
    feeds column-wise projections is all-gathered once for all of them (Megatron's g); the
    row-wise projections reduce-scatter along the sequence; the token embedding is split
    over the vocabulary and scatters its output, the head gathers its logits. Which norm
    feeds which projection is read from a forward of a fake copy: a column-wise projection
    whose input is not a norm's output (post-norm layers, an op between) has no gather
    point, and the layout is then empty with the reason."""
    d = blocks[0].layout.d_model if blocks else 0
    layers = [u for u in fsdp_units(model, blocks) if u]
    norms = _norms(model, d, blocks, layers)
    heads = [n for n in _outside(model, layers, nn.Linear)
             if getattr(model.get_submodule(n), "in_features", 0) == d]
    colwise = [m.name for m in modules if m.role == COLWISE and not m.replicated]
    fed = _feeders(model, args, kwargs, norms, colwise + heads)
    unfed = next((name for name in colwise if fed.get(name) is None), None)
    if unfed is not None:
        return SpLayout((), f"{unfed}'s input is not a norm's output (a post-norm layer or "
                            "an op between them), so sequence parallelism has no norm "
                            "whose output it could gather for it")
    head = next((n for n in heads if fed.get(n) is not None), None)
    embeddings = [n for n in _outside(model, layers, nn.Embedding)
                  if model.get_submodule(n).embedding_dim == d]
    gathering = {fed[n] for n in colwise + ([head] if head else [])}
    out = [_norm_module(model, n, d, n in gathering) for n in norms]
    if len(embeddings) == 1:
        vocab = model.get_parameter(f"{embeddings[0]}.weight").shape[0]  # (vocab, d)
        out.insert(0, TpModule(embeddings[0], EMBEDDING, vocab, d, transposed=True))
    if head is not None:
        vocab = model.get_parameter(f"{head}.weight").shape[0]  # (vocab, d)
        out.append(TpModule(head, COLWISE, d, vocab, output_gathered=True))
    return SpLayout(tuple(out), _blocker(model, embeddings, head, d))

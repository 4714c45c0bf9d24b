"""What a plan does to each module: TP roles from the detected blocks, FSDP units, layers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from mhaudit.data import AttentionBlock

COLWISE = "colwise"
"""Output features split over the TP ranks (Q, K, V, MLP up and gate)."""
ROWWISE = "rowwise"
"""Input features split over the TP ranks, output all-reduced (O, MLP down)."""
EMBEDDING = "embedding"
"""A token embedding split over the vocabulary (its weight's rows), its output reduced
over the TP ranks: row-wise, under sequence parallelism."""
SEQUENCE = "sequence"
"""Run on the sequence shards under sequence parallelism, weights replicated (the norms)."""


@dataclass(frozen=True)
class TpModule:
    """One linear module the TP plan splits."""

    name: str
    """Qualified module name."""
    role: str
    """:data:`COLWISE` or :data:`ROWWISE`."""
    in_features: int
    out_features: int
    kv_heads: int = 0
    """KV heads in the module's output when it projects K or V alone (replicated once
    t > h_kv); 0 otherwise, a fused QKV included (split evenly as a whole)."""
    replicated: bool = False
    """True when the plan cannot split the module and copies it to every TP rank: its
    weight is not a 2-D matrix of the projection's widths."""
    transposed: bool = False
    """True when the weight is stored (in, out), as GPT-2's ``Conv1D`` stores it."""
    torch_splits: bool = True
    """True when torch's Colwise/RowwiseParallel split it as the plan means: an
    ``nn.Linear`` that is not a fused QKV (whose column chunks would mix Q, K and V)."""
    output_gathered: bool = False
    """True when its output is all-gathered to a whole tensor on every TP rank: under
    sequence parallelism a norm feeding column-wise projections (along the sequence) and
    the head (along the vocabulary)."""


_CONTAINERS = (nn.ModuleList, nn.ModuleDict, nn.Sequential)


def layer_of(model: nn.Module, block: AttentionBlock) -> str:
    """The repeated layer holding ``block``: its parent module, or the block itself when the
    parent is a container of layers (``""`` for the root)."""
    parent = block.name.rpartition(".")[0]
    if block.name and isinstance(model.get_submodule(parent), _CONTAINERS):
        return block.name
    return parent


def _attention_modules(block: AttentionBlock) -> list[tuple[str, str, int]]:
    lay = block.layout
    found: list[tuple[str, str, int]] = []
    for role, proj, kv in ((COLWISE, lay.q, 0), (COLWISE, lay.k, lay.num_kv_heads),
                           (COLWISE, lay.v, lay.num_kv_heads), (ROWWISE, lay.o, 0)):
        if proj is not None and all(proj.module != name for name, _, _ in found):
            found.append((proj.module, role, kv))
    return found


def _orientation(weight: object, d_in: int, d_out: int, mod: nn.Module) -> bool | None:
    """True for a weight stored (in, out), False for (out, in), None for anything else."""
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        return None
    shape = tuple(weight.shape)
    if shape == (d_in, d_out) and (d_in != d_out or hasattr(mod, "nf")):
        return True
    return False if shape == (d_out, d_in) else None


def _matrix(mod: nn.Module) -> tuple[int, int, bool] | None:
    """(in, out, transposed) of a leaf module holding one 2-D weight (``nn.Linear``,
    GPT-2's ``Conv1D``); None for embeddings and anything else."""
    weight = getattr(mod, "weight", None)
    if (isinstance(mod, nn.Embedding) or any(True for _ in mod.children())
            or not isinstance(weight, torch.Tensor) or weight.dim() != 2):
        return None
    if isinstance(mod, nn.Linear):
        return int(mod.in_features), int(mod.out_features), False
    if getattr(mod, "nf", None) == weight.shape[1]:
        return int(weight.shape[0]), int(weight.shape[1]), True
    return int(weight.shape[1]), int(weight.shape[0]), False


def _mlp_modules(model: nn.Module, block: AttentionBlock, taken: set[str]) -> list[TpModule]:
    """Matrices of the block's layer outside attention: d → wider ones column-wise (up,
    gate), wider → d ones row-wise (down); none unless both kinds are there."""
    layer = layer_of(model, block)
    if not layer:
        return []
    d = block.layout.d_model
    prefix = f"{layer}."
    up: list[TpModule] = []
    down: list[TpModule] = []
    for name, mod in model.get_submodule(layer).named_modules(prefix=layer):
        inside = layer != block.name and name.startswith(block.name + ".")
        dims = _matrix(mod)
        if dims is None or name in taken or inside or not name.startswith(prefix):
            continue
        d_in, d_out, transposed = dims
        linear = isinstance(mod, nn.Linear)
        if d_in == d and d_out != d:
            up.append(TpModule(name, COLWISE, d_in, d_out, transposed=transposed,
                               torch_splits=linear))
        elif d_out == d and d_in != d:
            down.append(TpModule(name, ROWWISE, d_in, d_out, transposed=transposed,
                                 torch_splits=linear))
    return up + down if up and down else []


def _attention_module(model: nn.Module, block: AttentionBlock, name: str, role: str,
                      kv: int) -> TpModule:
    lay = block.layout
    proj = next(p for p in (lay.q, lay.k, lay.v, lay.o) if p is not None and p.module == name)
    mod = model.get_submodule(name)
    d_in, d_out = proj.in_features, proj.fused_width
    orient = _orientation(model.get_parameter(proj.weight), d_in, d_out, mod)
    fused = role == COLWISE and proj.fused
    return TpModule(name, role, d_in, d_out, 0 if fused else kv, replicated=orient is None,
                    transposed=bool(orient),
                    torch_splits=isinstance(mod, nn.Linear) and not fused)


def tp_modules(model: nn.Module, blocks: Sequence[AttentionBlock]) -> tuple[TpModule, ...]:
    """The modules a Megatron-style TP plan splits: Q/K/V and MLP up/gate column-wise, O and
    MLP down row-wise, read from the detected blocks' projections and their layers."""
    out: list[TpModule] = []
    taken: set[str] = set()
    for block in blocks:
        for name, role, kv in _attention_modules(block):
            out.append(_attention_module(model, block, name, role, kv))
            taken.add(name)
        mlp = _mlp_modules(model, block, taken)
        out.extend(mlp)
        taken.update(m.name for m in mlp)
    return tuple(out)


def fsdp_units(model: nn.Module, blocks: Sequence[AttentionBlock]) -> tuple[str, ...]:
    """Modules ``fully_shard`` wraps, innermost first: each layer holding a block, then the
    root (``""``), which keeps every parameter outside them."""
    layers: list[str] = []
    for block in blocks:
        layer = layer_of(model, block)
        if layer and layer not in layers and not any(
                layer.startswith(u + ".") or u.startswith(layer + ".") for u in layers):
            layers.append(layer)
    return (*layers, "")


def unit_of(param: str, units: Sequence[str]) -> str:
    """The FSDP unit owning the parameter named ``param``."""
    return next((u for u in units if u and param.startswith(u + ".")), "")

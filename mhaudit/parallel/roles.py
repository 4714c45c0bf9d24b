"""What a plan does to each module: TP roles from the detected blocks, FSDP units, layers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from mhaudit.data import AttentionBlock

COLWISE = "colwise"
"""Output features split over the TP ranks (Q, K, V, MLP up and gate)."""
ROWWISE = "rowwise"
"""Input features split over the TP ranks, output all-reduced (O, MLP down)."""


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
    """KV heads in the module's output when it projects K or V (replicated once t > h_kv);
    0 otherwise."""
    replicated: bool = False
    """True when the module is not split but copied to every TP rank: a fused QKV or a
    projection that is not an ``nn.Linear``."""


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


def _mlp_modules(model: nn.Module, block: AttentionBlock, taken: set[str]) -> list[TpModule]:
    """Linear modules of the block's layer outside attention: d → wider ones column-wise
    (up, gate), wider → d ones row-wise (down); none unless both kinds are there."""
    layer = layer_of(model, block)
    if not layer:
        return []
    d = block.layout.d_model
    prefix = f"{layer}."
    up: list[TpModule] = []
    down: list[TpModule] = []
    for name, mod in model.get_submodule(layer).named_modules(prefix=layer):
        inside = layer != block.name and name.startswith(block.name + ".")
        if not isinstance(mod, nn.Linear) or name in taken or inside:
            continue
        if not name.startswith(prefix):
            continue
        if mod.in_features == d and mod.out_features != d:
            up.append(TpModule(name, COLWISE, mod.in_features, mod.out_features))
        elif mod.out_features == d and mod.in_features != d:
            down.append(TpModule(name, ROWWISE, mod.in_features, mod.out_features))
    return up + down if up and down else []


def tp_modules(model: nn.Module, blocks: Sequence[AttentionBlock]) -> tuple[TpModule, ...]:
    """The modules a Megatron-style TP plan splits: Q/K/V and MLP up/gate column-wise, O and
    MLP down row-wise, read from the detected blocks' projections and their layers."""
    out: list[TpModule] = []
    taken: set[str] = set()
    for block in blocks:
        fused = block.layout.q is not None and block.layout.q.fused
        for name, role, kv in _attention_modules(block):
            mod = model.get_submodule(name)
            linear = isinstance(mod, nn.Linear)
            d_in = int(mod.in_features) if isinstance(mod, nn.Linear) else 0
            d_out = int(mod.out_features) if isinstance(mod, nn.Linear) else 0
            copy = (fused and role == COLWISE) or not linear
            out.append(TpModule(name, role, d_in, d_out, kv, replicated=copy))
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

"""W_Q, W_K, W_V and W_O of an attention module, read from its own parameters by name.

A role is read from the name of the layer that holds it (``q_proj``, ``query``, ``to_q``,
``qkv``, ``in_proj_weight``, ``out_proj``, ``dense``, ...), the words transformers and
torch.nn name their projections with; norms and position tables hold no role. A module
whose layers do not all name a role is not checked role by role (the model's parameter
total still is).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torch import nn

from zoo_harness.expect import Declared

FUSED = {"qkv": ("qkv", "c_attn", "in_proj", "query_key_value", "wqkv", "qkv_proj"),
         "kv": ("kv", "kv_proj", "key_value", "to_kv", "wkv", "kv_lin")}
"""Layers that hold several roles at once."""
SINGLE = {
    "q": ("q", "q_proj", "query", "to_q", "wq", "q_lin", "query_proj", "q_linear"),
    "k": ("k", "k_proj", "key", "to_k", "wk", "k_lin", "key_proj", "k_linear"),
    "v": ("v", "v_proj", "value", "to_v", "wv", "v_lin", "value_proj", "v_linear"),
    "o": ("o", "o_proj", "out_proj", "out", "to_out", "wo", "out_lin", "dense", "proj",
          "c_proj", "output", "output_proj", "out_linear", "proj_out", "o_linear"),
}
"""The names of a layer that holds one role."""
NO_ROLE = ("norm", "ln", "layernorm", "layer_norm", "rotary", "rope", "relative", "position",
           "pos", "bias_table", "dropout")
"""Words of layers that hold no projection (norms, position tables)."""


@dataclass(frozen=True)
class Roles:
    """Parameter elements (weight + bias) by role; a fused layer's under its joined key."""

    by_role: dict[str, int]
    """``q``, ``k``, ``v``, ``o``, ``qkv`` or ``kv`` → parameter elements."""


def _word(path: str) -> str:
    """The role-naming word of a parameter path: the holder's name, or the parameter's own
    stem for a parameter held directly (``in_proj_weight`` → ``in_proj``)."""
    parts = path.lower().split(".")
    leaf = parts[-1]
    if leaf in ("weight", "bias") and len(parts) > 1:
        holder = parts[-2]
        return parts[-3] if holder.isdigit() and len(parts) > 2 else holder  # to_out.0
    return re.sub(r"_(weight|bias)$", "", leaf)


def _role(word: str) -> str | None:
    for role, words in FUSED.items():
        if word in words:
            return role
    for role, words in SINGLE.items():
        if word in words:
            return role
    return None


def _widths(own: Declared, module: nn.Module) -> dict[str, int]:
    """The output rows each single-role layer has where the module declares its heads and
    head dim (Q h·d_k, K and V h_kv·d_k), or Q's where it declares its query heads per KV
    head (K's rows times the groups)."""
    if own.heads and own.head_dim:
        kv = own.kv_heads or own.heads
        return {"q": own.heads * own.head_dim, "k": kv * own.head_dim, "v": kv * own.head_dim}
    k_rows = next((f[1] for role, f in _layers(module) if role == "k"), None)
    return {"q": k_rows * own.groups} if own.groups and k_rows else {}


def roles(module: nn.Module, own: Declared | None = None) -> Roles | None:
    """The module's parameters by role, or None when a parameter names no role, or a
    layer named for Q, K or V has other rows than the role's (a Q layer that also makes an
    output gate) where the module declares its heads and head dim (``own``)."""
    found: dict[str, int] = {}
    rows = _widths(own or Declared(), module)
    if any(role in rows and out != rows[role] for role, (_, out) in _layers(module)):
        return None
    for path, param in module.named_parameters():
        if any(w in path.lower() for w in NO_ROLE):
            continue
        role = _role(_word(path))
        if role is None:
            return None
        found[role] = found.get(role, 0) + param.numel()
    if "o" not in found or not ({"q", "k", "v"} <= found.keys() or "qkv" in found
                                or ("q" in found and "kv" in found)):
        return None
    return Roles(found)


def role_problems(block_params: dict[str, int], module: Roles) -> list[str]:
    """Where the block's q, k, v, o differ from the module's own; fused layers compare
    with the block's roles they join."""
    want = dict(module.by_role)
    got = dict(block_params)
    if "qkv" in want:
        want["q+k+v"] = want.pop("qkv") + want.pop("q", 0) + want.pop("k", 0) + want.pop("v", 0)
        got["q+k+v"] = got.pop("q") + got.pop("k") + got.pop("v")
    elif "kv" in want:
        want["k+v"] = want.pop("kv") + want.pop("k", 0) + want.pop("v", 0)
        got["k+v"] = got.pop("k") + got.pop("v")
    return [f"{role} {got.get(role)} (module {n})" for role, n in sorted(want.items())
            if got.get(role) != n]


def _features(layer: nn.Module) -> tuple[int, int] | None:
    """(in, out) features of a projection layer: nn.Linear's, or a transposed Conv1D's
    (``nx``, ``nf``: GPT-2's weight is stored in × out)."""
    if isinstance(layer, nn.Linear):
        return layer.in_features, layer.out_features
    nx, nf = getattr(layer, "nx", None), getattr(layer, "nf", None)
    return (nx, nf) if isinstance(nx, int) and isinstance(nf, int) else None


def _layers(module: nn.Module) -> list[tuple[str, tuple[int, int]]]:
    """(role, (in, out)) of each projection layer whose name names a role."""
    found = []
    for path, layer in module.named_modules():
        features = _features(layer)
        role = _role(_word(f"{path}.weight")) if path else None
        if features is not None and role is not None \
                and not any(w in path.lower() for w in NO_ROLE):
            found.append((role, features))
    return found


def query_width(module: nn.Module) -> int | None:
    """The width the module's queries read: the input features of its Q layer (or of its
    fused QKV layer), the first by name; None when no layer names Q."""
    return next((f[0] for role, f in _layers(module) if role in ("q", "qkv")), None)


def kv_from_layers(module: nn.Module, own: Declared) -> int | None:
    """KV heads the module's own K (or fused QKV) layer holds, where it declares its heads
    and head dim but not its KV heads: K's rows / d_k, or (QKV's rows / d_k − h) / 2."""
    if not own.heads or not own.head_dim or own.kv_heads or own.groups:
        return None
    for role, (_, out) in _layers(module):
        if role == "k" and out % own.head_dim == 0:
            return out // own.head_dim
        if role == "qkv" and out % own.head_dim == 0 and (out // own.head_dim - own.heads) % 2 == 0:
            kv = (out // own.head_dim - own.heads) // 2
            return kv if kv > 0 else None
    return None

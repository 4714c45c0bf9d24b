"""What a built timm model's attention modules declare: heads, KV heads, head dim, widths.

timm has no config objects: each attention module stores its own layout (``num_heads``,
``head_dim``, a fused ``qkv`` Linear or separate ``q``/``k``/``v``), so the ground truth is
read from the modules themselves. Nothing here imports timm.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

HEAD_ATTRS = ("num_heads", "heads", "n_head", "num_attention_heads")
"""Attributes an attention module keeps its query heads in."""
KV_HEAD_ATTRS = ("num_kv_heads", "num_key_value_heads", "kv_heads")
HEAD_DIM_ATTRS = ("head_dim", "dim_head", "key_dim", "head_size")
PROJECTIONS = ("qkv", "in_proj", "q", "q_proj", "query", "to_q")
"""Names of the query (or fused query-key-value) projection, first match wins."""
KEY_PROJECTIONS = ("k", "key", "k_proj", "to_k")
"""Names of the key projection (a fused kv one does not say how it splits K from V)."""


@dataclass(frozen=True)
class Declared:
    """One attention module's layout, as its attributes and projections say."""

    name: str
    """Qualified module name (``blocks.0.attn``)."""
    heads: int
    kv_heads: int | None
    """Declared KV heads; None when the module declares none (then KV heads = heads)."""
    head_dim: int | None
    """Declared (or fused-qkv-derived) query/key head dim; None when it cannot be read."""
    width: int | None
    """Input width of the query projection; None when it has no Linear/Conv projection."""
    params: int = 0
    """Parameters the module holds: a block named after it cannot count more."""


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def _first_int(module: nn.Module, names: tuple[str, ...]) -> int | None:
    for attr in names:
        found = _int(getattr(module, attr, None))
        if found is not None:
            return found
    return None


def _as_projection(child: object) -> nn.Module | None:
    """A Linear or conv, or the one named ``proj`` in a Sequential (a norm, then the conv)."""
    if isinstance(child, nn.Sequential):
        child = getattr(child, "proj", None)
    return child if isinstance(child, (nn.Linear, nn.Conv1d, nn.Conv2d)) else None


def _projection(module: nn.Module) -> tuple[str, nn.Module] | None:
    for attr in PROJECTIONS:
        child = _as_projection(getattr(module, attr, None))
        if child is not None:
            return attr, child
    return None


def _key_heads(module: nn.Module, head_dim: int | None) -> int | None:
    """KV heads from the key projection's width: out / (roles · head dim) (multi-query
    attention keeps one key head and declares only ``num_heads``)."""
    for attr in KEY_PROJECTIONS:
        child = _as_projection(getattr(module, attr, None))
        if child is not None and head_dim:
            out = _widths(child)[1]
            return out // head_dim if out % head_dim == 0 else None
    return None


def _widths(proj: nn.Module) -> tuple[int, int]:
    """(input, output) features of a Linear or a conv projection."""
    if isinstance(proj, nn.Linear):
        return proj.in_features, proj.out_features
    assert isinstance(proj, (nn.Conv1d, nn.Conv2d))
    return proj.in_channels, proj.out_channels


def _has_projection(module: nn.Module) -> bool:
    """Whether the module holds a Linear or conv at all: a rotary embedding that keeps
    ``num_heads`` and learned frequencies is no attention module."""
    return any(isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.MultiheadAttention))
               for m in module.modules())


def _declared(name: str, module: nn.Module) -> Declared | None:
    heads = _first_int(module, HEAD_ATTRS)
    if heads is None or not _has_projection(module):
        return None
    kv = _first_int(module, KV_HEAD_ATTRS)
    head_dim = _first_int(module, HEAD_DIM_ATTRS)
    width = None
    found = _projection(module)
    if isinstance(module, nn.MultiheadAttention):
        width = module.embed_dim
    elif found is not None:
        attr, proj = found
        width, out = _widths(proj)
        if head_dim is None and attr in ("qkv", "in_proj") and out % (3 * heads) == 0:
            head_dim = out // (3 * heads)  # fused (q, k, v), each heads x head_dim wide
        elif head_dim is None and attr not in ("qkv", "in_proj") and out % heads == 0:
            head_dim = out // heads
    if kv is None:
        kv = _key_heads(module, head_dim)
    params = sum(p.numel() for p in module.parameters())
    return Declared(name, heads, kv, head_dim, width, params)


def declared_modules(model: nn.Module) -> list[Declared]:
    """The innermost modules that declare a head count and hold parameters.

    Innermost, because a block may repeat its attention's ``num_heads`` (a Swin block
    and its window attention both keep it); the attention itself is the one to check.
    """
    found: dict[str, Declared] = {}
    for name, module in model.named_modules():
        declared = _declared(name, module)
        if declared is None:
            continue
        for outer in [o for o in found if _contains(o, name)]:
            del found[outer]
        found[name] = declared
    return list(found.values())


def _contains(outer: str, inner: str) -> bool:
    return outer == "" or inner.startswith(f"{outer}.")


def _related(block_name: str, module_name: str) -> bool:
    """A block belongs to a declared module when one contains the other (the block is
    named after the smallest module holding its projections: the module, a child, or a
    parent where the output projection sits outside the attention module)."""
    return (block_name == module_name or _contains(module_name, block_name)
            or _contains(block_name, module_name))


def layout_problems(block: dict[str, Any], declared: Declared) -> list[str]:
    """Why a JSON report block does not match a module's declared layout; [] if it does."""
    h, kv, d, width = (block.get(k) for k in ("num_heads", "num_kv_heads", "head_dim", "d_model"))
    problems = []
    if h != declared.heads:
        problems.append(f"heads {h} (module {declared.heads})")
    want_kv = declared.kv_heads or declared.heads
    if kv != want_kv and not (block.get("kind") == "cross" and kv == h):
        problems.append(f"kv heads {kv} (module {want_kv})")
    if declared.head_dim is not None and d != declared.head_dim:
        problems.append(f"head dim {d} (module {declared.head_dim})")
    if declared.width is not None and width != declared.width:
        problems.append(f"width {width} (module {declared.width})")
    total = (block.get("params") or {}).get("total")
    if block.get("name") == declared.name and isinstance(total, int) and total > declared.params:
        problems.append(f"block params {total} (module holds {declared.params})")
    return problems


def compare_layouts(blocks: list[dict[str, Any]], declared: list[Declared]) -> list[str]:
    """The failed layout checks: each declared module must have a block that fits it, and a
    block in no declared module must have one head (a module that declares no heads may
    attend with one over its width, as single-head attention does)."""
    failed = []
    for block in blocks:
        name = str(block.get("name", ""))
        if block.get("num_heads") != 1 and not any(_related(name, d.name) for d in declared):
            failed.append(f"block {name!r} of {block.get('num_heads')} heads where no "
                          "module declares heads")
    for module in declared:
        mine = [b for b in blocks if _related(str(b.get("name", "")), module.name)]
        if not mine:
            failed.append(f"no block for {module.name!r}")
            continue
        problems = [layout_problems(b, module) for b in mine]
        if all(problems):
            best = min(problems, key=len)
            failed.append(f"layout {module.name!r}: {'; '.join(best)}")
    return failed

"""What a built config says its attention layers are: heads, KV heads, head dims, widths."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from torch import nn

from zoo_harness.tiny import (
    HEAD_DIM_KEYS,
    HEAD_KEYS,
    KV_KEYS,
    LAYER_KEYS,
    PER_LAYER,
    WIDTH_KEYS,
    attention_variants,
)

LIST_WIDTH_KEYS = ("hidden_sizes", "embed_dims", "embed_dim", "hidden_size", "dims",
                   "encoder_hidden_dim")
"""Widths beside WIDTH_KEYS, one per stage where a list."""
NOT_DOT_PRODUCT = ("Deformable",)
"""Classes called attention that compute no QKᵀ: deformable attention's weights are a
linear map of the query, softmaxed over sampling points whose values are sampled at
learned offsets (``grid_sample``); they are no attention block."""


@dataclass(frozen=True)
class Expected:
    """The attention layouts one (sub-)config allows."""

    source: str
    """The config's path in the config tree (``""``, ``"text_config"``, ...)."""
    heads: frozenset[int]
    kv_heads: int | None
    """Declared KV heads; None when the config declares none (then KV heads = heads)."""
    head_dims: frozenset[int]
    """Declared or derived (width / heads) head dims; empty when it cannot be derived."""
    widths: frozenset[int]
    declared: bool = True
    """False for a config that declares a width but no heads: its attention picks its own
    heads (one over the whole width, or CLIP's width // 64), and the config alone does
    not say the model has attention."""


def _get(config: Any, key: str) -> Any:
    try:
        return getattr(config, key, None)
    except Exception:  # a config property that cannot be computed
        return None


def _ints(values: Any) -> list[int]:
    if isinstance(values, bool):
        return []
    if isinstance(values, int):
        return [values] if values > 0 else []
    if isinstance(values, (list, tuple)):
        return [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    return []


def sub_configs(config: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every config in the tree, the root first."""
    from transformers import PretrainedConfig

    yield path, config
    for key, value in vars(config).items():
        if isinstance(value, PretrainedConfig):
            yield from sub_configs(value, f"{path}.{key}" if path else key)


def _expected(path: str, config: Any) -> Expected | None:
    """The layout a (sub-)config declares: its heads, KV heads, head dims and widths. A
    config with widths but no heads declares no head count (then only heads × head dim must
    be a width)."""
    heads = {h for key in HEAD_KEYS for h in _ints(_get(config, key))}
    widths = {w for key in WIDTH_KEYS + LIST_WIDTH_KEYS for w in _ints(_get(config, key))}
    if not heads and not widths:
        return None
    depths = _ints(_get(config, "depths"))
    for base in list(widths):
        widths.update(base * 2 ** i for i in range(len(depths)))  # stages that double width
    kv = next((v for key in KV_KEYS for v in _ints(_get(config, key))), None)
    if _get(config, "multi_query") is True:
        kv = 1
    dims = {d for key in HEAD_DIM_KEYS for d in _ints(_get(config, key))}
    nope, rope = _ints(_get(config, "qk_nope_head_dim")), _ints(_get(config, "qk_rope_head_dim"))
    if nope and rope:
        dims.add(nope[0] + rope[0])
    if not dims and len(heads) == 1:
        dims = {w // h for w in widths for h in heads if w % h == 0}
    return Expected(path, frozenset(heads), kv, frozenset(dims), frozenset(widths),
                    declared=bool(heads))


def _layer_configs(path: str, config: Any) -> list[tuple[str, Any]]:
    """Each layer's config where layers override the config's fields (a heterogeneous
    config: ``per_layer_config`` sets the KV heads or head dim of some layers, and the
    global field cannot be read); else the config alone."""
    if not _get(config, "is_heterogeneous"):
        return [(path, config)]
    view = _get(config, "per_layer_config")
    try:
        return [(f"{path}.per_layer_config[{i}]".lstrip("."), view[i]) for i in range(len(view))]
    except Exception:  # a view that cannot build a layer's config
        return [(path, config)]


class _View:
    """A config read with some fields replaced: a variant's prefixed fields (``swa_head_dim``
    for ``head_dim``) or one layer's entries of per-layer lists."""

    def __init__(self, config: Any, prefix: str = "", fields: dict[str, Any] | None = None):
        self._config, self._prefix, self._fields = config, prefix, fields or {}

    def __getattr__(self, key: str) -> Any:
        if key in self._fields:
            return self._fields[key]
        if self._prefix and _get(self._config, self._prefix + key) is not None:
            return _get(self._config, self._prefix + key)
        return _get(self._config, key)


def _variants(path: str, config: Any) -> list[tuple[str, Any]]:
    """The config, its prefixed attention variants, and each layer of per-layer lists."""
    found: list[tuple[str, Any]] = [(path, config)]
    found += [(f"{path}.{p}*".lstrip("."), _View(config, p)) for p in attention_variants(config)]
    lists = {key: _get(config, key + PER_LAYER) for key in HEAD_KEYS + KV_KEYS}
    lists = {k: v for k, v in lists.items() if isinstance(v, list) and v}
    depth = min((len(v) for v in lists.values()), default=0)
    for i in range(depth):
        fields = {k: v[i] for k, v in lists.items()}
        found.append((f"{path}.layer {i}".lstrip("."), _View(config, fields=fields)))
    return found


def expected_layouts(config: Any) -> list[Expected]:
    """One entry per (sub-)config (per layer config, per variant) that declares attention
    heads or a width (see :attr:`Expected.declared`)."""
    found = (_expected(v, view) for path, sub in sub_configs(config)
             for p, layer in _layer_configs(path, sub) for v, view in _variants(p, layer))
    return [e for e in found if e is not None]


def declared_layers(config: Any) -> int:
    """Layers the config tree declares (its depth fields summed), 0 when none."""
    total = 0
    for _, sub in sub_configs(config):
        total += sum(v for key in LAYER_KEYS for v in _ints(_get(sub, key))[:1])
    return total


def _linear_layers(config: Any) -> set[int]:
    """Layers the config declares linear (softmax-free) attention for, by ``layer_types``."""
    types = _get(config, "layer_types") if config is not None else None
    if not isinstance(types, list):
        return set()
    return {i for i, kind in enumerate(types) if "linear" in str(kind)}


def _layer_index(name: str) -> int | None:
    """N of the first ``layers.N`` (or ``layer.N``, ``h.N``) in a module path."""
    parts = name.split(".")
    for before, part in pairwise(parts):
        if before in ("layers", "layer", "h", "blocks") and part.isdigit():
            return int(part)
    return None


def _linear_by_prefix(model: nn.Module) -> dict[str, set[int]]:
    """Linear-attention layer indices by module prefix: the model's own config's for every
    module, its text config's for the modules of its decoder (a multimodal model keeps the
    language model's ``layer_types`` in ``text_config``)."""
    config = getattr(model, "config", None)
    found = {"": _linear_layers(config)}
    text = config.get_text_config() if hasattr(config, "get_text_config") else None
    getter = getattr(model, "get_decoder", None)
    try:
        decoder = getter() if callable(getter) else None
    except Exception:  # a model whose decoder cannot be named
        decoder = None
    if text is not None and text is not config and isinstance(decoder, nn.Module):
        prefix = next((n for n, m in model.named_modules() if m is decoder and n), None)
        if prefix is not None:
            found[prefix + "."] = _linear_layers(text)
    return found


def attention_modules(model: nn.Module) -> list[str]:
    """Outermost modules whose class calls itself attention and that hold parameters.

    Modules of layers the config declares linear attention for (a gated delta rule, a
    lightning attention: no softmax over keys) are not softmax attention blocks.
    """
    found: list[str] = []
    linear = _linear_by_prefix(model)
    for name, module in model.named_modules():
        cls = type(module).__name__
        if ("Attention" not in cls and "Attn" not in cls) or any(
                word in cls for word in NOT_DOT_PRODUCT) or _feature_gate(module):
            continue
        if any(name.startswith(prefix) and _layer_index(name[len(prefix):]) in layers
               for prefix, layers in linear.items() if layers):
            continue
        if any(name.startswith(f"{outer}.") for outer in found if outer) or "" in found:
            continue
        if next(module.parameters(), None) is not None:
            found.append(name)
    return found


def _feature_gate(module: nn.Module) -> bool:
    """A module whose only weights are one square linear map: a gate over features, not an
    attention over positions. Two projections at least (Q and K, or a fused QKV twice or
    three times as wide as its input) are needed for QKᵀ; a square map alone can only
    weigh its input's own features. PatchTSMixer's ``PatchTSMixerGatedAttention`` computes
    ``inputs * softmax(attn_layer(inputs), dim=-1)`` (a softmax over the features of each
    token, multiplied elementwise), and its real self-attention (``self_attn=True``) is a
    separate ``PatchTSMixerAttention`` with Q, K, V and O projections."""
    holders = [m for m in module.modules() if next(m.parameters(recurse=False), None) is not None]
    if len(holders) != 1 or not isinstance(holders[0], nn.Linear):
        return False
    return holders[0].in_features == holders[0].out_features


HEAD_ATTRS = ("num_heads", "num_attention_heads", "n_heads", "n_head", "heads",
              "num_attn_heads", "attention_heads")
KV_ATTRS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "kv_heads")
HEAD_DIM_ATTRS = ("head_dim", "attention_head_size", "head_size", "dim_head", "d_head",
                  "key_dim")
WIDTH_ATTRS = ("embed_dim", "hidden_size", "d_model")
"""Attributes an attention module sets in its constructor to the layout it builds."""


def module_name(block: str) -> str:
    """The module a report block names: mhaudit names the second and later attentions one
    module runs ``NAME#2``, ``NAME#3`` (a bi-directional attention's second direction)."""
    return block.split("#")[0]


def _attention_parts(module: nn.Module) -> list[nn.Module]:
    """The module and the attention modules inside it (``self`` of ``BertAttention``),
    outermost first; other parts (a rotary table, a key indexer) declare their own sizes."""
    return [m for m in module.modules() if m is module or any(
        word in type(m).__name__ for word in ("Attention", "Attn"))]


def _attr(module: nn.Module, names: tuple[str, ...]) -> int | None:
    """The first of ``names`` that ``module`` or, failing it, an attention module inside it
    sets to a positive int: an attention module often keeps its heads on the inner module
    that splits them."""
    for held in _attention_parts(module):
        for name in names:
            value = getattr(held, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


@dataclass(frozen=True)
class Declared:
    """What one attention module's constructor says it builds: each field None where the
    module sets no such attribute (then the config's numbers are the truth)."""

    heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    width: int | None = None
    groups: int | None = None
    """Query heads per KV head (``num_key_value_groups``)."""


def declared(module: nn.Module) -> Declared:
    """The layout ``module`` declares by its attributes: heads, KV heads (or query heads per
    KV head, ``num_key_value_groups``), head dim (or the d of a ``d**-0.5`` ``scale``) and
    width. A module's code may set them from other config fields than the heads (a pooling
    head's ``intermediate_size // num_attention_heads`` head dim), so they are its truth."""
    heads = _attr(module, HEAD_ATTRS)
    kv = _attr(module, KV_ATTRS)
    groups = _attr(module, ("num_key_value_groups",))
    if kv is None and groups is not None and heads is not None and heads % groups == 0:
        kv = heads // groups
    dim = _attr(module, HEAD_DIM_ATTRS)
    if dim is None and heads is None:  # one head scaled by its width (CvT scales 3 heads
        # of 64 by 192**-0.5: with heads declared, a scale is no head dim)
        dim = next((d for held in _attention_parts(module) if (d := _scaled_dim(
            getattr(held, "scale", getattr(held, "scaling", None))))), None)
    width = next((v for n in WIDTH_ATTRS if isinstance(v := getattr(module, n, None), int)
                  and not isinstance(v, bool) and v > 0), None)
    return Declared(heads, kv, dim, width, groups)


def declared_layouts(model: nn.Module, names: list[str]) -> dict[str, Declared]:
    """:func:`declared` for each attention module, by name."""
    return {name: declared(model.get_submodule(name)) for name in names}


def owner(block: str, names: list[str]) -> str | None:
    """The attention module a block belongs to: the one it names, holds, or is held by."""
    name = module_name(block)
    for outer in names:
        if name == outer or name.startswith(f"{outer}.") or outer.startswith(f"{name}.") \
                or not outer:
            return outer
    return None


def _scaled_dim(scale: object) -> int | None:
    """d when ``scale`` is d**-0.5 for a whole d, else None."""
    if not isinstance(scale, float) or not 0 < scale < 1:
        return None
    dim = round(scale**-2)
    return dim if abs(dim**-0.5 - scale) < 1e-9 * scale else None


def _layout_problems(h: Any, kv: Any, d: Any, width: Any, e: Expected,
                     own: Declared) -> list[str]:
    problems = []
    heads = {own.heads} if own.heads else set(e.heads)
    if not own.heads and own.head_dim:  # heads over a width, at the declared head dim
        heads |= {w // own.head_dim for w in ({own.width} if own.width else e.widths)
                  if w % own.head_dim == 0}
    if heads and h not in heads:
        problems.append(f"heads {h} (declared {sorted(heads)})")
    by_groups = h // own.groups if own.groups and isinstance(h, int) else None
    want_kv = own.kv_heads or by_groups or e.kv_heads or own.heads or h
    if kv != want_kv:
        problems.append(f"kv heads {kv} (declared {want_kv})")
    dims = {own.head_dim} if own.head_dim else e.head_dims
    if dims and d not in dims:
        problems.append(f"head dim {d} (declared {sorted(dims)})")
    widths = {own.width} if own.width else e.widths
    if not dims and isinstance(h, int) and isinstance(d, int) and widths \
            and h * d not in widths | e.widths:
        problems.append(f"heads x head dim {h}x{d} is no declared width")
    if widths and width not in widths:
        problems.append(f"width {width} (declared {sorted(widths)})")
    return problems


def block_problems(block: dict[str, Any], layouts: list[Expected],
                   own: Declared | None = None) -> list[str]:
    """Why ``block`` (a JSON report block) fits none of the config's layouts; [] if it fits.

    Only the block's figures are read (heads, KV heads, head dim, width), never its labels.
    Each field its module declares (``own``) must equal that; the others must fit one layout
    of the config tree.
    """
    h, kv, d, width = (block.get(k) for k in ("num_heads", "num_kv_heads", "head_dim", "d_model"))
    own = own or Declared()
    best: list[str] | None = None
    for e in layouts or [Expected("", frozenset(), None, frozenset(), frozenset())]:
        problems = _layout_problems(h, kv, d, width, e, own)
        if not problems:
            return []
        if best is None or len(problems) < len(best):
            best = [f"{e.source or 'config'}: {p}" for p in problems]
    return best or ["the config declares no attention heads"]

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
"""Widths beside WIDTH_KEYS; RT-DETR's AIFI encoder attends at encoder_hidden_dim."""
DERIVED_WIDTH_KEYS = ("true_hidden_size",)
"""Widths a config derives for its attention (MobileBERT's bottleneck: the attention runs
on ``intra_bottleneck_size`` features, not on ``hidden_size``)."""
INPUT_WIDTH_KEYS = ("input_size",)
"""Input feature widths a first attention may project from into the model width:
FunAsrNanoEncoder builds layer 0's attention with ``hidden_size=config.input_size``
(``num_mel_bins * num_stacked_frames``, configuration_fun_asr_nano.py), so its Q, K, V
read 560 stacked mel features and its O writes ``hidden_size``."""
NOT_DOT_PRODUCT = ("Deformable",)
"""Classes called attention that compute no QKᵀ: deformable attention's weights are a
linear map of the query, softmaxed over sampling points whose values are sampled at
learned offsets (``grid_sample``); they are no attention block."""
STAGE_HEAD_DIM_KEYS = ("key_dim",)
"""Per-stage head dims of convolutional-stage models (LeViT's key_dim, independent of
hidden_sizes / heads)."""


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
    groups: frozenset[int] = frozenset()
    """Channel groups (``num_groups``), the heads of channel attention: DaViT's channel
    block (Florence2VisionChannelAttention) splits its C channels into
    ``config.num_groups[stage]`` groups of C / groups, whatever ``num_heads`` says."""
    inputs: frozenset[int] = frozenset()
    """Input widths (:data:`INPUT_WIDTH_KEYS`) a block may read when it writes a width."""
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


def _undeclared(path: str, widths: set[int]) -> Expected | None:
    """The layouts a config without heads allows: one head over a declared width (separable
    and additive attention), or heads of 64 (CLIP-style towers, ``nn.MultiheadAttention(d,
    d // 64)``, as BridgeTower's vision resblocks build them)."""
    if not widths:
        return None
    heads = {1} | {w // 64 for w in widths if w % 64 == 0}
    dims = {w // h for w in widths for h in heads if w % h == 0}
    return Expected(path, frozenset(heads), None, frozenset(dims), frozenset(widths),
                    declared=False)


def _scaled_widths(config: Any) -> set[int]:
    """Attention widths a config scales by ``width_multiplier``: MobileViTV2Encoder builds
    each attention at ``make_divisible(base_attn_unit_dims[i] * width_multiplier, 8)``
    (modeling_mobilevitv2.py), rounding to the nearest multiple of 8, at least 8, one
    step up when that loses over 10%."""
    multiplier = _get(config, "width_multiplier")
    if not isinstance(multiplier, (int, float)) or isinstance(multiplier, bool):
        return set()
    found = set()
    for base in _ints(_get(config, "base_attn_unit_dims")):
        value = base * multiplier
        rounded = max(8, int(value + 4) // 8 * 8)
        found.add(rounded + 8 if rounded < 0.9 * value else rounded)
    return found


def _expected(path: str, config: Any) -> Expected | None:
    heads = {h for key in HEAD_KEYS for h in _ints(_get(config, key))}
    widths = {w for key in WIDTH_KEYS + LIST_WIDTH_KEYS + DERIVED_WIDTH_KEYS
              for w in _ints(_get(config, key))} | _scaled_widths(config)
    if not heads:
        return _undeclared(path, widths)
    depths = _ints(_get(config, "depths"))
    for base in list(widths):
        widths.update(base * 2 ** i for i in range(len(depths)))  # stages that double width
    kv = next((v for key in KV_KEYS for v in _ints(_get(config, key))), None)
    if _get(config, "multi_query") is True:
        kv = 1
    dims = {d for key in HEAD_DIM_KEYS for d in _ints(_get(config, key))}
    stage_dims = {d for key in STAGE_HEAD_DIM_KEYS for d in _ints(_get(config, key))}
    if stage_dims and len(heads) > 1:
        # Blocks between stages (LeViT's subsampling attention) run width // head dim heads.
        heads.update(w // d for w in widths for d in stage_dims if w % d == 0)
    dims |= stage_dims
    nope, rope = _ints(_get(config, "qk_nope_head_dim")), _ints(_get(config, "qk_rope_head_dim"))
    if nope and rope:
        dims.add(nope[0] + rope[0])
    if not dims and len(heads) == 1:
        dims = {w // h for w in widths for h in heads if w % h == 0}
    ratio = _ints(_get(config, "head_ratio"))
    if ratio and len(heads) == 1:
        heads = _softmax_heads(next(iter(heads)), ratio[0])
    groups = frozenset(_ints(_get(config, "num_groups")))
    inputs = frozenset(w for key in INPUT_WIDTH_KEYS for w in _ints(_get(config, key)))
    return Expected(path, frozenset(heads), kv, frozenset(dims), frozenset(widths), groups,
                    inputs)


def _softmax_heads(heads: int, ratio: int) -> set[int]:
    """Softmax heads when 1/``ratio`` of the declared heads attend and the rest are
    another mixer (ConvBERT's span-based dynamic convolution: its self-attention has
    ``num_attention_heads // head_ratio`` heads, at least 1, of width ``hidden_size //
    num_attention_heads``)."""
    return {max(1, heads // ratio)}


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


def attention_modules(model: nn.Module) -> list[str]:
    """Outermost modules whose class calls itself attention and that hold parameters.

    Modules of layers the config declares linear attention for (a gated delta rule, a
    lightning attention: no softmax over keys) are not softmax attention blocks.
    """
    found: list[str] = []
    linear = _linear_layers(getattr(model, "config", None))
    for name, module in model.named_modules():
        cls = type(module).__name__
        if ("Attention" not in cls and "Attn" not in cls) or any(
                word in cls for word in NOT_DOT_PRODUCT) or _feature_gate(module):
            continue
        if linear and _layer_index(name) in linear:
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


HEAD_DIM_ATTRS = ("head_dim", "attention_head_size")
"""Attributes a module sets to its head dim (``attention_head_size``: BERT-style
self-attention, ``int(hidden_size / num_attention_heads)`` with the heads it was built with)."""


def module_name(block: str) -> str:
    """The module a report block names: mhaudit names the second and later attentions one
    module runs ``NAME#2``, ``NAME#3`` (a bi-directional attention's second direction)."""
    return block.split("#")[0]


def declared_head_dims(model: nn.Module, names: list[str]) -> dict[str, int]:
    """The head dim each attention module declares for itself, by module name: one of its
    :data:`HEAD_DIM_ATTRS`, else the d of the ``d**-0.5`` it scales the scores by (``scale``).

    A module may set it in code, not from the config's heads: VideoPrism's
    ``VideoPrismMultiheadAttentionPoolingHead`` sets ``self.head_dim =
    config.intermediate_size // config.num_attention_heads`` and splits Q, K and V
    (``num_attention_heads * head_dim`` wide) into heads of that size; GroupViT's
    ``GroupViTAssignAttention`` sets ``self.scale = config.hidden_size**-0.5`` and computes
    ``query @ key.transpose(-2, -1)`` on the whole width, one head of ``hidden_size``;
    Grounding DINO's text enhancer builds its ``GroundingDinoMultiheadAttention`` with
    ``config.encoder_attention_heads // 2`` heads, so its ``attention_head_size`` is
    ``d_model // (encoder_attention_heads // 2)``, twice the config's head dim
    (modeling_grounding_dino.py)."""
    found: dict[str, int] = {}
    for name in names:
        module = model.get_submodule(name)
        dim = next((v for v in (getattr(module, a, None) for a in HEAD_DIM_ATTRS)
                    if isinstance(v, int) and not isinstance(v, bool) and v > 0), None)
        if dim is None:
            dim = _scaled_dim(getattr(module, "scale", getattr(module, "scaling", None)))
        if dim:
            found[name] = dim
    return found


def _scaled_dim(scale: object) -> int | None:
    """d when ``scale`` is d**-0.5 for a whole d, else None."""
    if not isinstance(scale, float) or not 0 < scale < 1:
        return None
    dim = round(scale**-2)
    return dim if abs(dim**-0.5 - scale) < 1e-9 * scale else None


def declared_groups(model: nn.Module, names: list[str]) -> dict[str, int]:
    """Query heads per KV head that each attention module declares for itself
    (``num_key_value_groups``), by module name. Some layers set it in code, not in the
    config (MiMo-V2-Flash's sliding layers have twice the config's KV heads)."""
    found: dict[str, int] = {}
    for name in names:
        groups = getattr(model.get_submodule(name), "num_key_value_groups", None)
        if isinstance(groups, int) and not isinstance(groups, bool) and groups > 0:
            found[name] = groups
    return found


def block_problems(block: dict[str, Any], layouts: list[Expected],
                   groups: int | None = None, head_dim: int | None = None) -> list[str]:
    """Why ``block`` (a JSON report block) fits none of the config's layouts; [] if it fits.

    ``groups``, the query heads per KV head its module declares, also fits its KV heads;
    ``head_dim``, the head dim its module declares, also fits its head dim, and then the
    heads it runs over a config width.
    """
    h, kv, d, width = (block.get(k) for k in ("num_heads", "num_kv_heads", "head_dim", "d_model"))
    best: list[str] | None = None
    channel = block.get("score_form") == "channel"
    own = head_dim is not None and d == head_dim
    for declared in layouts:
        # channel attention: the groups are the heads, each C / groups channels wide
        e = Expected(declared.source, declared.groups, None, frozenset(), declared.widths) \
            if channel and declared.groups else declared
        problems = []
        spans = own and isinstance(h, int) and isinstance(d, int) and h * d in e.widths
        if h not in e.heads and not spans:
            problems.append(f"heads {h} (config {sorted(e.heads)})")
        want_kv = e.kv_heads if e.kv_heads is not None else h
        declared = groups is not None and isinstance(kv, int) and kv * groups == h
        if kv != want_kv and not declared and not (block.get("kind") == "cross" and kv == h):
            problems.append(f"kv heads {kv} (config {want_kv})")
        if e.head_dims and d not in e.head_dims and not own:
            problems.append(f"head dim {d} (config {sorted(e.head_dims)})")
        if not e.head_dims and not own and isinstance(h, int) and isinstance(d, int) \
                and h * d not in e.widths:
            problems.append(f"heads x head dim {h}x{d} is no config width")
        projected_in = width in e.inputs and block.get("d_out") in e.widths
        if width not in e.widths and e.widths and not projected_in:
            problems.append(f"width {width} (config {sorted(e.widths)})")
        if not problems:
            return []
        if best is None or len(problems) < len(best):
            best = [f"{e.source or 'config'}: {p}" for p in problems]
    return best or ["the config declares no attention heads"]

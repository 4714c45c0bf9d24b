"""What a block's modules declare about its layout, against what the graph shows.

Attention code usually stores its layout as integer attributes (``self.num_heads``,
``self.head_dim``, ``self.embed_dim``) or holds the config it was built from. Each
attribute whose name declares a layout quantity (a table, by exact name) is read from the
modules of a block and compared with the detected layout; every disagreement is listed in
``coverage.declared_mismatch``. That is an oracle which needs no knowledge of the model: the
code's own statement of what it computes.

The modules read are the block's own module, the modules between it and its projections,
for the model width (``embed_dim``, ``hidden_size``) the ancestors that hold this block
alone (the layer), and for what no attribute of theirs declares, the config the nearest of
them holds, at the layer's index where the config lists a value per layer. A module that
declares itself one shard of a layer (``num_heads_per_partition``) declares per-shard
values, and the model-wide config is not read for it. Booleans, tensors, lists and
non-positive values are not declarations and are skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from torch import nn

from mhaudit.data import DeclaredMismatch, Layout
from mhaudit.trace.graphs import submodule

_DETECTED: dict[str, Callable[[Layout], tuple[int, ...]]] = {
    "heads": lambda lay: (lay.num_heads,),
    "kv_heads": lambda lay: (lay.num_kv_heads,),
    "groups": lambda lay: ((lay.num_heads // lay.num_kv_heads,)
                           if lay.num_kv_heads and lay.num_heads % lay.num_kv_heads == 0
                           else ()),
    "head_dim": lambda lay: (lay.head_dim,),
    "v_head_dim": lambda lay: (lay.v_head_dim,),
    "inner": lambda lay: (lay.num_heads * lay.head_dim,),
    "width": lambda lay: (lay.d_model, lay.d_out),
}
"""Each declared quantity as the detected layout gives it, the first value the one a
mismatch names: query heads, KV heads, query heads per KV head (h / h_kv), query/key head
dim, value head dim, all heads' query width (h · d_k), and the width (d_model, the query
projection's input, or the output projection's: a layer that changes the width, as a
first layer reading features does, declares the one it keeps)."""


DECLARING_NAMES: dict[str, str] = {
    **dict.fromkeys(("num_heads", "n_heads", "n_head", "num_head", "heads", "nhead",
                     "num_attention_heads", "head_count", "num_heads_per_partition",
                     "num_attention_heads_per_partition"), "heads"),
    **dict.fromkeys(("num_key_value_heads", "num_kv_heads", "n_kv_heads", "n_kv_head",
                     "kv_heads", "num_kv_head", "num_query_groups",
                     "num_query_groups_per_partition"), "kv_heads"),
    **dict.fromkeys(("num_key_value_groups", "n_rep"), "groups"),
    **dict.fromkeys(("head_dim", "d_k", "dim_head", "head_size", "attention_head_size",
                     "d_head", "key_value_proj_dim", "qk_head_dim",
                     "hidden_size_per_attention_head"), "head_dim"),
    **dict.fromkeys(("v_head_dim", "d_v", "value_head_dim"), "v_head_dim"),
    **dict.fromkeys(("all_head_size", "inner_dim"), "inner"),
    **dict.fromkeys(("embed_dim", "hidden_size", "d_model", "n_embd"), "width"),
}
"""Attribute names that declare one quantity of a block's layout, by exact name. Names that
mean different things in different code (``h``, ``dim``, ``d_kv``, ``num_groups``) are left
out; so are global counts beside per-shard ones (``total_num_heads``)."""

CONFIG_NAMES: dict[str, str] = {
    "num_attention_heads": "heads",
    "num_key_value_heads": "kv_heads",
    "head_dim": "head_dim",
}
"""Config fields read where no module attribute declares the quantity (transformers maps
each model's own names, ``n_head`` or ``encoder_attention_heads``, onto these)."""

SHARD_MARKS = ("per_partition", "per_rank")
"""Words in an attribute name that say the module holds one shard of a layer."""


def declared_mismatches(model: nn.Module, layouts: Sequence[Layout]
                        ) -> tuple[DeclaredMismatch, ...]:
    """Every declaring attribute of each block's modules that disagrees with the block, in
    block order, each (module, attribute, declared, detected) once."""
    names = [_module_name(lay) for lay in layouts]
    found: dict[tuple[str, str, int, int], None] = {}
    for layout, name in zip(layouts, names, strict=True):
        for mismatch in _block_mismatches(model, layout, name, names):
            found.setdefault((mismatch.module, mismatch.attribute, mismatch.declared,
                              mismatch.detected))
    return tuple(DeclaredMismatch(*key) for key in found)


def _module_name(layout: Layout) -> str:
    """The module a block's name points at (a module that runs attention twice names its
    second block ``name#2``)."""
    return layout.name.split("#", 1)[0]


def _block_mismatches(model: nn.Module, layout: Layout, name: str, names: Sequence[str]
                      ) -> Iterator[DeclaredMismatch]:
    """The disagreements of one block with its own modules, its layer's and its config."""
    modules, found = _module_declarations(model, layout, name, names)
    declared: dict[str, int] = {}
    for path, attribute, quantity, value in found:
        declared.setdefault(quantity, value)
        yield from _compare(layout, path, attribute, quantity, value)
    if _sharded(modules):
        return  # the config describes the whole layer, the module one shard of it
    for path, config, index in _configs(modules)[:1]:  # the nearest config only
        values = _config_values(config, index)
        if not _describes(values, declared):
            return
        for quantity, (field, value) in values.items():
            if quantity not in declared:
                yield from _compare(layout, path, f"config.{field}", quantity, value)


_Declaration = tuple[str, str, str, int]
"""(module path, attribute, quantity, value)."""


def _module_declarations(model: nn.Module, layout: Layout, name: str, names: Sequence[str]
                         ) -> tuple[list[tuple[str, nn.Module]], list[_Declaration]]:
    """The modules read for a block and what they declare: the block's module every
    quantity, its parts (the modules down to its projections) all but the width (a part's
    ``hidden_size`` is its own inner width), its layer the width alone. A query heads per
    KV head value that contradicts the head counts the modules declare beside it is the
    factor of a repeat pattern of the code's own, not the layout, and is left out."""
    own = list(_own_modules(model, layout, name))
    if not own:
        return [], []
    parts = {path for path, _ in own} - {name}
    modules = own + list(_layer_modules(model, name, names))
    found: list[_Declaration] = []
    for path, module in modules:
        allowed = (None if path == name else set(_DETECTED) - {"width"} if path in parts
                   else {"width"})
        found.extend((path, *said) for said in _declarations(module, allowed))
    counts = {quantity: value for _, _, quantity, value in reversed(found)}
    heads, kv_heads = counts.get("heads"), counts.get("kv_heads")
    if heads and kv_heads and heads % kv_heads == 0:
        found = [d for d in found if d[2] != "groups" or d[3] == heads // kv_heads]
    return modules, found


def _describes(config: dict[str, tuple[str, int]], declared: dict[str, int]) -> bool:
    """The config agrees with every quantity the modules declare too (their head count,
    head dim, and the query heads per KV head its counts give): it is this layer's. One
    that disagrees describes another tower or the model as a whole, which the layer
    overrides."""
    values = {quantity: value for quantity, (_, value) in config.items()}
    heads, kv_heads = values.get("heads"), values.get("kv_heads")
    if heads and kv_heads and heads % kv_heads == 0:
        values["groups"] = heads // kv_heads
    return all(declared[q] == v for q, v in values.items() if q in declared)


def _sharded(modules: Sequence[tuple[str, nn.Module]]) -> bool:
    """Some module names an attribute as one shard's (``num_heads_per_partition``)."""
    return any(mark in attribute for _, module in modules for attribute in vars(module)
               for mark in SHARD_MARKS)


def _compare(layout: Layout, path: str, attribute: str, quantity: str, value: int
             ) -> Iterator[DeclaredMismatch]:
    """A mismatch when the detected values of ``quantity`` are known and none is
    ``value``."""
    detected = _DETECTED[quantity](layout)
    if detected and value not in detected:
        yield DeclaredMismatch(path, attribute, value, detected[0])


def _own_modules(model: nn.Module, layout: Layout, name: str
                 ) -> Iterator[tuple[str, nn.Module]]:
    """The block's module and every module between it and one of its projections."""
    paths = {name}
    for projection in (layout.q, layout.k, layout.v, layout.o):
        if projection is None or not _within(projection.module, name):
            continue
        parts = projection.module.split(".")
        start = len(name.split(".")) if name else 0
        paths.update(".".join(parts[:end]) for end in range(start + 1, len(parts) + 1))
    for path in sorted(paths, key=lambda p: (p.count("."), p)):
        module = submodule(model, path)
        if module is not None:
            yield path, module


def _layer_modules(model: nn.Module, name: str, names: Sequence[str]
                   ) -> Iterator[tuple[str, nn.Module]]:
    """The ancestors of the block's module that hold no other block, nearest first."""
    parts = name.split(".") if name else []
    for end in range(len(parts) - 1, -1, -1):
        path = ".".join(parts[:end])
        if sum(_within(other, path) for other in names) > 1:
            return
        module = submodule(model, path)
        if module is not None:
            yield path, module


def _within(path: str, ancestor: str) -> bool:
    """``path`` is ``ancestor`` or lies under it."""
    return ancestor == "" or path == ancestor or path.startswith(ancestor + ".")


def _declarations(module: nn.Module, allowed: set[str] | None
                  ) -> Iterator[tuple[str, str, int]]:
    """(attribute, quantity, value) for each positive integer attribute of ``module``
    whose name declares a quantity (of ``allowed`` ones, when given)."""
    for attribute, value in vars(module).items():
        quantity = DECLARING_NAMES.get(attribute)
        if quantity is None or (allowed is not None and quantity not in allowed):
            continue
        if _is_count(value):
            yield attribute, quantity, value


def _is_count(value: object) -> bool:
    """A plain positive int (not a bool, a tensor or a list)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _configs(modules: Sequence[tuple[str, nn.Module]]
             ) -> list[tuple[str, Any, int | None]]:
    """(module path, config, the module's layer index) for each module holding a config,
    in the order given."""
    found = []
    for path, module in modules:
        config = vars(module).get("config")
        if config is not None and not isinstance(config, nn.Module):
            index = vars(module).get("layer_idx")
            found.append((path, config, index if _is_index(index) else None))
    return found


def _is_index(value: object) -> bool:
    """A plain non-negative int."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _config_values(config: Any, index: int | None) -> dict[str, tuple[str, int]]:
    """Quantity to (config field, value) for each field of :data:`CONFIG_NAMES` the config
    holds as a count."""
    values = {}
    for field, quantity in CONFIG_NAMES.items():
        value = _config_value(config, field, index)
        if value is not None:
            values[quantity] = (field, value)
    return values


def _config_value(config: Any, field: str, index: int | None) -> int | None:
    """``config.field`` as a count, taken at ``index`` where the config lists one per
    layer; None when absent or not a count."""
    try:
        value = getattr(config, field, None)
    except Exception:  # a config property that raises declares nothing
        return None
    if isinstance(value, (list, tuple)):
        if index is None or not 0 <= index < len(value):
            return None
        value = value[index]
    return value if isinstance(value, int) and _is_count(value) else None

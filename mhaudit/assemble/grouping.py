"""Fold identical blocks (repeated layers) into the groups the report stores."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any, cast

from mhaudit.data import AttentionBlock, BlockGroup, Projection


def _frozen(value: Any) -> Hashable:
    """A hashable copy of a value built from dataclasses, dicts, lists and scalars."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return tuple(_frozen(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return cast(Hashable, value)


def _unplaced(projection: Projection | None) -> Projection | None:
    """The projection without the module and weight names that place it in the model."""
    return None if projection is None else replace(projection, module="", weight="")


def _signature(block: AttentionBlock) -> Hashable:
    """Everything about a block except where it sits in the model."""
    lay = block.layout
    layout = replace(lay, name="", q=_unplaced(lay.q), k=_unplaced(lay.k), v=_unplaced(lay.v),
                     o=_unplaced(lay.o))
    findings = tuple(replace(f, block=None, message="") for f in block.findings)
    return _frozen(replace(block, layout=layout, findings=findings))


def group_blocks(blocks: Sequence[AttentionBlock]) -> tuple[BlockGroup, ...]:
    """Groups of identical blocks, in order of first appearance."""
    order: list[Hashable] = []
    members: dict[Hashable, list[AttentionBlock]] = {}
    for block in blocks:
        key = _signature(block)
        if key not in members:
            order.append(key)
            members[key] = []
        members[key].append(block)
    groups = []
    for key in order:
        names = tuple(b.name for b in members[key])
        groups.append(BlockGroup(fold_names(names), names, members[key][0]))
    return tuple(groups)


_MAX_PATTERN = 80
"""Longer patterns are harder to read than a count."""


def fold_names(names: Sequence[str]) -> str:
    """``layers.{0..31}.self_attn`` for names that differ only in layer indices.

    A pattern is used only when it expands to exactly these names; otherwise the names
    are listed (``a, b`` or ``a (+n more)``).
    """
    if len(names) == 1:
        return names[0]
    split = [n.split(".") for n in names]
    if len({len(s) for s in split}) != 1:
        return _listed(names)
    parts = []
    expansion = 1
    for column in zip(*split, strict=True):
        values = list(dict.fromkeys(column))
        expansion *= len(values)
        parts.append(values[0] if len(values) == 1 else _column(values))
    pattern = ".".join(parts)
    if expansion != len(set(names)) or len(pattern) > _MAX_PATTERN:
        return _listed(names)
    return pattern


def _column(values: list[str]) -> str:
    """``{0..3}``, ``{0,2}``, ``layer_{0..3}`` or ``{a,b}`` for one varying name part."""
    stems = {v.rstrip("0123456789") for v in values}
    if len(stems) == 1 and all(v != next(iter(stems)) for v in values):
        stem = stems.pop()
        ints = sorted(int(v[len(stem):]) for v in values)
        if all(v == f"{stem}{int(v[len(stem):])}" for v in values):
            if ints == list(range(ints[0], ints[-1] + 1)):
                return f"{stem}{{{ints[0]}..{ints[-1]}}}"
            return stem + "{" + ",".join(str(i) for i in ints) + "}"
    return "{" + ",".join(values) + "}"


def _listed(names: Sequence[str]) -> str:
    return ", ".join(names) if len(names) <= 3 else f"{names[0]} (+{len(names) - 1} more)"

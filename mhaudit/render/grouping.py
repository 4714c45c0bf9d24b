"""Fold identical blocks (repeated layers) into groups and total the model."""

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


def fold_names(names: Sequence[str]) -> str:
    """``layers.{0..31}.self_attn`` for names that differ only in layer indices."""
    if len(names) == 1:
        return names[0]
    split = [n.split(".") for n in names]
    if len({len(s) for s in split}) != 1:
        return f"{names[0]} (+{len(names) - 1} more)"
    parts = []
    for column in zip(*split, strict=True):
        values = list(dict.fromkeys(column))
        if len(values) == 1:
            parts.append(values[0])
        elif all(v.isdigit() for v in values):
            ints = sorted(int(v) for v in values)
            if ints == list(range(ints[0], ints[-1] + 1)):
                parts.append(f"{{{ints[0]}..{ints[-1]}}}")
            else:
                parts.append("{" + ",".join(str(i) for i in ints) + "}")
        else:
            parts.append("{" + ",".join(values) + "}")
    return ".".join(parts)

"""Folded layers expanded: every layer a traced representative stands for gets its blocks
and its routed experts."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TypeVar

from mhaudit.data import ExpertLayer, Layout, Projection, UnreadCore
from mhaudit.trace.fold import FoldedList, plan_of, rename

_Item = TypeVar("_Item")


def _rename_projection(p: Projection | None, plan: FoldedList, pos: int, index: int
                       ) -> Projection | None:
    if p is None:
        return None
    return replace(p, module=rename(p.module, plan, pos, index),
                   weight=rename(p.weight, plan, pos, index))


def _expand(items: Sequence[_Item], name: Callable[[_Item], str],
            renamed: Callable[[_Item, FoldedList, int, int], _Item],
            plans: tuple[FoldedList, ...],
            positions: Mapping[str, int] | None = None) -> list[_Item]:
    """Every original layer's copy of its representative's items, in model order: where
    ``positions`` gives the graph position of every layer and item (a left-out layer's
    stand-in is called where the layer runs), in the order the forward ran them; else
    each list's copies together where its first representative stands."""
    placed: list[tuple[tuple[int, int, int], _Item]] = []
    by_position: list[tuple[tuple[int, int, int], _Item]] = []
    first_of_plan: dict[int, int] = {}
    for order, item in enumerate(items):
        found = plan_of(name(item), plans)
        if found is None:
            placed.append(((order, -1, 0), item))
            by_position.append(((_at(positions, name(item)), order, 0), item))
            continue
        plan_index, pos = found
        start = first_of_plan.setdefault(plan_index, order)
        plan = plans[plan_index]
        for index in plan.members[pos]:
            copy = renamed(item, plan, pos, index)
            placed.append(((start, index, order), copy))
            layer = f"{plan.path}.{plan.name_of(index)}" if plan.path else plan.name_of(index)
            by_position.append(((_at(positions, layer), order, 0), copy))
    if positions is not None and all(key[0] >= 0 for key, _ in by_position):
        placed = by_position
    placed.sort(key=lambda entry: entry[0])
    return [item for _, item in placed]


def _at(positions: Mapping[str, int] | None, path: str) -> int:
    return -1 if positions is None else positions.get(path, -1)


def expand_layouts(layouts: list[Layout], plans: tuple[FoldedList, ...],
                   positions: Mapping[str, int] | None = None) -> list[Layout]:
    """Give every original layer its own copy of its representative's blocks, in order
    (the graph's, with ``positions``: :func:`~mhaudit.trace.fold.module_positions`); a
    score-bias table that several copies read counts in the first (a model-level table)."""
    expanded = _expand(layouts, lambda layout: layout.name, _renamed, plans, positions)
    if not plans:
        return expanded
    seen: set[str] = set()
    counted = []
    for layout in expanded:
        fresh = [(name, size) for name, size in layout.score_bias_tables if name not in seen]
        seen.update(name for name, _ in fresh)
        counted.append(replace(layout, score_bias_params=sum(size for _, size in fresh))
                       if layout.score_bias_tables else layout)
    return counted


def expand_unread(cores: Sequence[UnreadCore], plans: tuple[FoldedList, ...]
                  ) -> tuple[UnreadCore, ...]:
    """Give every original layer its own copy of its representative's unread cores."""
    return tuple(_expand(cores, lambda core: core.module, lambda core, plan, pos, index:
                         replace(core, module=rename(core.module, plan, pos, index)), plans))


def expand_experts(experts: Sequence[ExpertLayer], plans: tuple[FoldedList, ...]
                   ) -> tuple[ExpertLayer, ...]:
    """Give every original layer its own copy of its representative's routed experts."""
    def renamed(layer: ExpertLayer, plan: FoldedList, pos: int, index: int) -> ExpertLayer:
        return replace(layer, module=rename(layer.module, plan, pos, index),
                       router=rename(layer.router, plan, pos, index),
                       weights=tuple(rename(w, plan, pos, index) for w in layer.weights))
    return tuple(_expand(experts, lambda layer: layer.module, renamed, plans))


def _renamed(layout: Layout, plan: FoldedList, pos: int, index: int) -> Layout:
    return replace(
        layout,
        name=rename(layout.name, plan, pos, index),
        score_bias_tables=tuple((rename(name, plan, pos, index), size)
                                for name, size in layout.score_bias_tables),
        q=_rename_projection(layout.q, plan, pos, index),
        k=_rename_projection(layout.k, plan, pos, index),
        v=_rename_projection(layout.v, plan, pos, index),
        o=_rename_projection(layout.o, plan, pos, index),
    )


def expand_names(names: set[str], plans: tuple[FoldedList, ...]) -> set[str]:
    """Traced qualified names plus their copies in every layer a representative stands for."""
    out = set(names)
    for name in names:
        found = plan_of(name, plans)
        if found is not None:
            plan = plans[found[0]]
            out.update(rename(name, plan, found[1], i) for i in plan.members[found[1]])
    return out

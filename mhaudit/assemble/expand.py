"""Folded layers expanded: every layer a traced representative stands for gets its blocks."""

from __future__ import annotations

from dataclasses import replace

from mhaudit.data import Layout, Projection
from mhaudit.trace.fold import FoldedList, plan_of, rename


def _rename_projection(p: Projection | None, plan: FoldedList, pos: int, index: int
                       ) -> Projection | None:
    if p is None:
        return None
    return replace(p, module=rename(p.module, plan, pos, index),
                   weight=rename(p.weight, plan, pos, index))


def expand_layouts(layouts: list[Layout], plans: tuple[FoldedList, ...]) -> list[Layout]:
    """Give every original layer its own copy of its representative's blocks, in order."""
    placed: list[tuple[tuple[int, int, int], Layout]] = []
    first_of_plan: dict[int, int] = {}
    for order, layout in enumerate(layouts):
        found = plan_of(layout.name, plans)
        if found is None:
            placed.append(((order, -1, 0), layout))
            continue
        plan_index, pos = found
        start = first_of_plan.setdefault(plan_index, order)
        plan = plans[plan_index]
        for index in plan.members[pos]:
            placed.append(((start, index, order), _renamed(layout, plan, pos, index)))
    placed.sort(key=lambda item: item[0])
    return [layout for _, layout in placed]


def _renamed(layout: Layout, plan: FoldedList, pos: int, index: int) -> Layout:
    return replace(
        layout,
        name=rename(layout.name, plan, pos, index),
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

"""Trace repeated identical layers once: stand-ins for the copies while tracing, then expand.

An 80-layer decoder is 80 copies of one layer. Tracing one representative of each
distinct layer and multiplying its costs gives the same report at a fraction of
the time. Layers count as identical when their classes, parameter and buffer
shapes, plain attributes (flags, window sizes, layer types) and per-layer settings
all match: an integer attribute equal to the layer's own index (``layer_idx``) is
ignored, and what that index reads in turn (``config.layer_types[layer_idx]``, an entry
of any sequence held by the layer with one entry per layer) is compared in its place.
The copies keep their positions in the list (:mod:`mhaudit.trace.left_out`), so a
forward that reads a setting by the position it is at gives each layer its own.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from mhaudit.errors import TraceError
from mhaudit.trace.export import trace
from mhaudit.trace.left_out import Watch, stand_ins
from mhaudit.trace.real import CpuTwin
from mhaudit.trace.traced import TracedGraph

MIN_LAYERS = 4
"""Lists shorter than this are traced as they are."""

_PLAIN = (int, float, str, bool, type(None))


@dataclass(frozen=True)
class FoldedList:
    """One layer list traced through representatives."""

    path: str
    """Qualified name of the list (``""`` when the model itself is the list)."""
    kept: tuple[int, ...]
    """Original indices of the representatives, in list order."""
    members: tuple[tuple[int, ...], ...]
    """For each representative, every original index it stands for."""
    names: tuple[str, ...] = ()
    """The list's child names in order (``0``, ``1``, … or a Sequential's own names)."""

    def name_of(self, index: int) -> str:
        """The child name of original layer ``index``."""
        return self.names[index] if self.names else str(index)

    @property
    def length(self) -> int:
        """Layers in the original list."""
        return sum(len(m) for m in self.members)


def _plain(value: Any) -> bool:
    """Numbers, strings, flags, None, and flat tuples or lists of them."""
    if isinstance(value, _PLAIN):
        return True
    return isinstance(value, (tuple, list)) and all(isinstance(v, _PLAIN) for v in value)


def signature(module: nn.Module, ignore: frozenset[str] = frozenset(), prefix: str = ""
              ) -> tuple[Any, ...]:
    """What must match for two layers to compute the same thing.

    ``ignore`` names attributes (dotted from the layer) left out, such as a layer index.
    """
    items: list[Any] = [type(module).__module__, type(module).__qualname__]
    for name, param in module.named_parameters(recurse=False):
        items.append(("p", name, tuple(param.shape), str(param.dtype)))
    for name, buf in module.named_buffers(recurse=False):
        items.append(("b", name, tuple(buf.shape), str(buf.dtype)))
    for key, value in sorted(_attributes(module).items()):
        if prefix + key not in ignore:
            items.append(("a", key, value))
    for name, child in module.named_children():
        items.append(("c", name, signature(child, ignore, f"{prefix}{name}.")))
    return tuple(items)


def _attributes(module: nn.Module) -> dict[str, Any]:
    """Plain public attributes (numbers, strings, flags and tuples of them)."""
    return {
        key: tuple(value) if isinstance(value, list) else value
        for key, value in vars(module).items()
        if not key.startswith("_") and _plain(value)
    }


def per_layer_settings(layer: nn.Module, index: int, length: int) -> tuple[Any, ...]:
    """Entry ``index`` of every sequence of ``length`` entries the layer can read: plain
    tuples and lists on its modules, and those on the objects they hold (a config's
    ``layer_types``, ``sliding_window_pattern`` lists, per-layer head counts)."""
    found: list[Any] = []
    for path, module in layer.named_modules():
        for name, entries in _sequences(module):
            if len(entries) == length:
                found.append((path, name, _entry(entries, index)))
    return tuple(sorted(found, key=lambda item: (item[0], item[1])))


def _sequences(module: nn.Module) -> Iterator[tuple[str, tuple[Any, ...] | list[Any]]]:
    """Public tuples and lists on ``module`` and on the plain objects it holds."""
    for key, value in vars(module).items():
        if key.startswith("_") or isinstance(value, (nn.Module, torch.Tensor)):
            continue
        if isinstance(value, (tuple, list)):
            yield key, value
        elif hasattr(value, "__dict__") and not callable(value):
            yield from ((f"{key}.{k}", v) for k, v in vars(value).items()
                        if isinstance(v, (tuple, list)))


def _entry(entries: Any, index: int) -> Any:
    """Entry ``index`` as a hashable key part: a plain list as a tuple (a config's list of
    ``[height, width]`` pairs), anything else not plain as its type."""
    value = entries[index]
    if not _plain(value):
        return repr(type(value))
    return tuple(value) if isinstance(value, list) else value


def _int_attributes(module: nn.Module, prefix: str = "") -> dict[str, int]:
    found = {
        prefix + k: v for k, v in _attributes(module).items()
        if isinstance(v, int) and not isinstance(v, bool)
    }
    for name, child in module.named_children():
        found.update(_int_attributes(child, f"{prefix}{name}."))
    return found


def index_attributes(layers: list[nn.Module]) -> frozenset[str]:
    """Integer attributes that track the layer's position (``layer_idx = i`` or ``i + 1``)."""
    per_layer = [_int_attributes(layer) for layer in layers]
    common = set(per_layer[0]).intersection(*per_layer[1:])
    return frozenset(
        key for key in common
        if len({values[key] - index for index, values in enumerate(per_layer)}) == 1
    )


def _plan(path: str, layers: nn.Module) -> FoldedList | None:
    children = list(layers.children())
    if len(children) < MIN_LAYERS or len({id(c) for c in children}) != len(children):
        return None
    shared = {id(p) for c in children for p in c.parameters()}
    if len(shared) != sum(1 for c in children for _ in c.parameters()):
        return None  # layers that share weights are counted through the real graph
    ignore = index_attributes(children)
    groups: dict[tuple[Any, ...], list[int]] = {}
    for index, child in enumerate(children):
        key = (signature(child, ignore), per_layer_settings(child, index, len(children)))
        groups.setdefault(key, []).append(index)
    if len(groups) * 2 > len(children):
        return None
    members = tuple(tuple(m) for m in groups.values())
    order = sorted(range(len(members)), key=lambda g: members[g][0])
    members = tuple(members[g] for g in order)
    names = tuple(name for name, _ in layers.named_children())
    return FoldedList(path, tuple(m[0] for m in members), members, names)


def find_lists(model: nn.Module) -> list[FoldedList]:
    """Layer lists (ModuleList or Sequential) worth folding, outermost first."""
    plans: list[FoldedList] = []
    for name, module in model.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)):
            continue
        if any(name == p.path or name.startswith(p.path + ".") for p in plans if p.path):
            continue
        plan = _plan(name, module)
        if plan is not None:
            plans.append(plan)
    return plans


def _sources(plan: FoldedList) -> dict[int, int]:
    """Each left-out layer of ``plan`` and the representative it copies."""
    return {index: kept for kept, members in zip(plan.kept, plan.members, strict=True)
            for index in members if index != kept}


@contextlib.contextmanager
def folded(model: nn.Module) -> Iterator[tuple[FoldedList, ...]]:
    """Replace every left-out layer of each foldable list by a stand-in; restore on exit."""
    with _folded(model, Watch(fresh=True)) as plans:
        yield plans


@contextlib.contextmanager
def _folded(model: nn.Module, watch: Watch) -> Iterator[tuple[FoldedList, ...]]:
    plans = [p for p in find_lists(model) if p.path]
    with stand_ins(model, {p.path: _sources(p) for p in plans}, watch):
        yield tuple(plans)


@contextlib.contextmanager
def traced_folded(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], fold: bool = True,
    twin: CpuTwin | None = None, dtype: torch.dtype | None = None,
) -> Iterator[tuple[TracedGraph, tuple[FoldedList, ...]]]:
    """Trace with repeated layers folded, or unfolded when folding would change what the
    forward sees: it indexes its own layer list by position, a repeated layer reshapes
    what it passes on, or the folded record fails (a block that concatenates every
    layer's output; a value read from the data, which the layers left out would change).
    Only the first record traces folded; the rest of the ladder, the real forward of
    ``twin`` included, runs on the whole model. The fake records run at ``dtype``
    (:func:`~mhaudit.trace.export.trace`). Yields the plans used."""
    if fold:
        watch = Watch(fresh=True)
        with _folded(model, watch) as plans:
            try:
                traced: TracedGraph | None = trace(model, args, kwargs, twin,
                                                   first_rung_only=bool(plans), dtype=dtype)
            except TraceError:
                traced = None  # traced again unfolded, which raises if it fails too
            if traced is not None and not watch.spoiled:
                yield traced, plans
                return
    yield trace(model, args, kwargs, twin, dtype=dtype), ()


def _child_pattern(path: str) -> re.Pattern[str]:
    return re.compile(rf"^{re.escape(path)}\.([^.]+)(?=\.|$)")


def rep_position(name: str, plan: FoldedList) -> int | None:
    """The representative (its position in ``plan.members``) a traced name falls under."""
    match = _child_pattern(plan.path).match(name)
    if not match:
        return None
    child = match.group(1)
    for position, index in enumerate(plan.kept):
        if plan.name_of(index) == child:
            return position
    return None


def rename(name: str, plan: FoldedList, position: int, index: int) -> str:
    """Move a traced name from representative ``position`` to original layer ``index``."""
    if rep_position(name, plan) != position:
        return name
    child = plan.name_of(index)
    return _child_pattern(plan.path).sub(lambda _: f"{plan.path}.{child}", name, count=1)


def plan_of(name: str, plans: tuple[FoldedList, ...]) -> tuple[int, int] | None:
    """The folded list and the representative position ``name`` lies under, if any."""
    for plan_index, plan in enumerate(plans):
        pos = rep_position(name, plan)
        if pos is not None and pos < len(plan.members):
            return plan_index, pos
    return None


def node_weight(module_path: str, plans: tuple[FoldedList, ...]) -> int:
    """How many original layers a traced node stands for."""
    found = plan_of(module_path, plans)
    return len(plans[found[0]].members[found[1]]) if found else 1


def module_positions(traced: TracedGraph) -> dict[str, int]:
    """Each module path (and every path above it) to the index of the first graph node
    run inside it: the order the forward ran its modules, a left-out layer's stand-in
    included."""
    positions: dict[str, int] = {}
    for index, node in enumerate(traced.graph.nodes):
        parts = traced.module_path(node).split(".")
        for depth in range(1, len(parts) + 1):
            positions.setdefault(".".join(parts[:depth]), index)
    return positions


def describe(plans: tuple[FoldedList, ...]) -> list[dict[str, Any]]:
    """The folding, for the report."""
    return [
        {"list": p.path, "layers": p.length, "traced": len(p.kept)} for p in plans
    ]

"""Trace repeated identical layers once: shorten layer lists while tracing, then expand.

An 80-layer decoder is 80 copies of one layer. Tracing one representative of each
distinct layer and multiplying its costs gives the same report at a fraction of
the time. Layers count as identical when their classes, parameter and buffer
shapes, and plain attributes (flags, window sizes, layer types) all match; an
integer attribute equal to the layer's own index (``layer_idx``) is ignored.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from mhaudit.errors import TraceError
from mhaudit.trace.export import trace
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
        groups.setdefault(signature(child, ignore), []).append(index)
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


@dataclass
class _Watch:
    """What would make a folded trace wrong: the forward read a shortened list by a layer
    it does not hold, or a representative changed the shape of what it passes on (a
    strided stack, where each copy sees a shorter sequence than the one before)."""

    indexed: bool = False
    reshaped: bool = False

    @property
    def spoiled(self) -> bool:
        """Whether the model must be traced unfolded."""
        return self.indexed or self.reshaped


def _shapes(value: Any) -> list[torch.Size]:
    return [v.shape for v in tree_flatten(value)[0] if isinstance(v, torch.Tensor)]


def _watch_shapes(layer: nn.Module, watch: _Watch) -> torch.utils.hooks.RemovableHandle:
    """A hook that flags a call whose main (first) output is shaped like none of its
    inputs: the next copy of the layer would see another shape than this one did."""
    def hook(_: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        made = _shapes(out)
        if made and made[0] not in _shapes((args, kwargs)):
            watch.reshaped = True
    return layer.register_forward_hook(hook, with_kwargs=True)


class _Short:
    """Answers positional reads of a shortened list: the forward indexes its own layers.

    The short list keeps the representatives under their own names, so traced names
    are real module paths; a positional read (``layers[i]``) is answered from the full
    list, and one that reaches past the representatives is recorded on ``watch`` so the
    model is traced unfolded.
    """

    def __init__(self, original: nn.Module, watch: _Watch) -> None:
        self.original = original
        self.watch = watch

    def get(self, short: nn.Module, index: object) -> Any:
        """``short[index]``: the whole short list for a slice over every layer (HF's
        ``layers[: config.num_hidden_layers]``), else the full list's answer; reading a
        layer that is not a representative is recorded."""
        length = len(self.original)  # type: ignore[arg-type]
        if isinstance(index, slice) and range(length)[index] == range(length):
            return short
        found = self.original[index]  # type: ignore[index]
        if not any(found is kept for kept in short.children()):
            self.watch.indexed = True  # a layer the folded trace would not account for
        return found


def _shortened(original: nn.Module, plan: FoldedList, watch: _Watch) -> nn.Module:
    """A list of the same kind holding the representatives under their original names."""
    reader = _Short(original, watch)
    base = nn.Sequential if isinstance(original, nn.Sequential) else nn.ModuleList
    short_type = type(f"Folded{base.__name__}", (base,),
                      {"__getitem__": lambda self, index: reader.get(self, index)})
    short: nn.Module = short_type()
    for index in plan.kept:
        short.add_module(plan.name_of(index), original.get_submodule(plan.name_of(index)))
    return short


@contextlib.contextmanager
def folded(model: nn.Module) -> Iterator[tuple[FoldedList, ...]]:
    """Shorten every foldable layer list to its representatives; restore on exit."""
    with _folded(model, _Watch()) as plans:
        yield plans


@contextlib.contextmanager
def _folded(model: nn.Module, watch: _Watch) -> Iterator[tuple[FoldedList, ...]]:
    plans = [p for p in find_lists(model) if p.path]
    swapped: list[tuple[nn.Module, str, nn.Module]] = []
    hooks: list[torch.utils.hooks.RemovableHandle] = []
    try:
        for plan in plans:
            parent_name, _, attr = plan.path.rpartition(".")
            parent = model.get_submodule(parent_name)
            original = parent._modules[attr]
            assert original is not None
            for kept, members in zip(plan.kept, plan.members, strict=True):
                if len(members) > 1:
                    layer = original.get_submodule(plan.name_of(kept))
                    hooks.append(_watch_shapes(layer, watch))
            parent._modules[attr] = _shortened(original, plan, watch)
            swapped.append((parent, attr, original))
        yield tuple(plans)
    finally:
        for handle in hooks:
            handle.remove()
        for parent, attr, original in reversed(swapped):
            parent._modules[attr] = original


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
        watch = _Watch()
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


def describe(plans: tuple[FoldedList, ...]) -> list[dict[str, Any]]:
    """The folding, for the report."""
    return [
        {"list": p.path, "layers": p.length, "traced": len(p.kept)} for p in plans
    ]

"""Stand-ins for layers left out of a folded run: the list keeps its length and positions.

A folded trace runs one layer of each kind. Shortening the list would renumber the layers
that run, and a forward that reads a per-layer setting by position (``config.layer_types[i]``
while it enumerates its layers, ``self.layers[i]``) would hand a representative another
layer's setting: a global layer would get the sliding window of the one it replaced. So
the list keeps every position; a layer that does not run is replaced by a stand-in that
passes its main input on unchanged, in the structure its source layer returned (the same
tuple, the same cache object), and answers attribute reads from the layer it stands for.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import TreeSpec, tree_flatten, tree_unflatten


@dataclass
class Watch:
    """What would make a run with stand-ins wrong: a layer that runs changed the shape of
    what it passes on (each copy of a strided layer sees a shorter sequence than the one
    before), a stand-in was called before its source layer ran, or the forward reached
    into a left-out layer and called a part of it (layers held in a ``ModuleDict`` that
    the forward walks instead of calling)."""

    fresh: bool = False
    """Whether a stand-in passes on a copy of its input, as a real layer's output is a
    storage of its own that the caller may keep (a cache of each layer's output) while
    the input is freed; off where the copies' outputs are counted another way."""
    reshaped: bool = False
    unordered: bool = False
    reached: bool = False
    outputs: dict[int, _Made] = field(default_factory=dict)
    """Each running layer's last output, by the layer's ``id``."""

    @property
    def spoiled(self) -> bool:
        """Whether the run must be redone with every layer."""
        return self.reshaped or self.unordered or self.reached


@dataclass(frozen=True)
class _Kept:
    """A tensor a running layer returned beside its main output, held weakly."""

    ref: weakref.ref[torch.Tensor]
    shape: torch.Size
    dtype: torch.dtype

    def get(self, like: torch.Tensor) -> torch.Tensor:
        """The tensor while the model keeps it (a cache entry), else a new one of its shape,
        as the copy would have made (attention weights the model drops)."""
        found = self.ref()
        return found if found is not None else like.new_empty(self.shape, dtype=self.dtype)


@dataclass(frozen=True)
class _Made:
    """What a running layer returned, holding no tensor alive: its structure, the shape of
    its main (first) tensor, and the other tensors held weakly."""

    spec: TreeSpec
    leaves: tuple[Any, ...]
    main: int
    main_shape: torch.Size

    @classmethod
    def of(cls, out: Any) -> _Made | None:
        leaves, spec = tree_flatten(out)
        main = next((i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)), None)
        if main is None:
            return None
        kept = tuple(None if i == main else _Kept(weakref.ref(v), v.shape, v.dtype)
                     if isinstance(v, torch.Tensor) else v for i, v in enumerate(leaves))
        return cls(spec, kept, main, leaves[main].shape)

    def rebuilt(self, main: torch.Tensor) -> Any:
        """The output with ``main`` in place of the main tensor."""
        leaves = [main if i == self.main else v.get(main) if isinstance(v, _Kept) else v
                  for i, v in enumerate(self.leaves)]
        return tree_unflatten(leaves, self.spec)


def _tensors(value: Any) -> list[torch.Tensor]:
    return [v for v in tree_flatten(value)[0] if isinstance(v, torch.Tensor)]


class LeftOutLayer(nn.Module):
    """A layer that does not run: its main input goes on in its source layer's output."""

    def __init__(self, layer: nn.Module, source: nn.Module, watch: Watch) -> None:
        super().__init__()
        # Plain attributes, not children: the stand-in holds no parameters of its own.
        object.__setattr__(self, "_mhaudit_layer", layer)
        object.__setattr__(self, "_mhaudit_source", source)
        object.__setattr__(self, "_mhaudit_watch", watch)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(object.__getattribute__(self, "_mhaudit_layer"), name)

    def __getitem__(self, key: Any) -> Any:
        return object.__getattribute__(self, "_mhaudit_layer")[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(object.__getattribute__(self, "_mhaudit_layer"))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        watch: Watch = object.__getattribute__(self, "_mhaudit_watch")
        source = object.__getattribute__(self, "_mhaudit_source")
        given = _tensors((args, kwargs))
        made = watch.outputs.get(id(source))
        if made is None:
            watch.unordered = True
            return given[0] if given else None
        passed = next((t for t in given if t.shape == made.main_shape), None)
        if passed is None:
            watch.reshaped = True  # no input of the shape to pass on
            return given[0] if given else None
        return made.rebuilt(passed.clone() if watch.fresh else passed)


def _record(layer: nn.Module, watch: Watch) -> torch.utils.hooks.RemovableHandle:
    """Keep the layer's output for its stand-ins, and flag an output whose main (first)
    tensor is shaped like none of the layer's inputs."""
    def hook(_: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        made = _Made.of(out)
        if made is None:
            return
        watch.outputs[id(layer)] = made
        if made.main_shape not in [t.shape for t in _tensors((args, kwargs))]:
            watch.reshaped = True
    return layer.register_forward_hook(hook, with_kwargs=True)


class LeftOutLayerCalled(RuntimeError):
    """The forward called a part of a layer that a stand-in replaces."""


def _flag_calls(layer: nn.Module, watch: Watch) -> list[torch.utils.hooks.RemovableHandle]:
    """Hooks that stop the run at a call into any part of a left-out layer."""
    def hook(*_: Any) -> None:
        watch.reached = True
        raise LeftOutLayerCalled("the forward calls into a layer it does not call whole")
    return [m.register_forward_pre_hook(hook) for m in layer.modules()]


def _with_stand_ins(original: nn.Module, sources: Mapping[int, int], watch: Watch
                    ) -> nn.Module:
    """A list of the same kind and length: layer ``i`` itself where it runs, else a
    stand-in fed by layer ``sources[i]``."""
    names = [name for name, _ in original.named_children()]
    children = list(original.children())
    base = nn.Sequential if isinstance(original, nn.Sequential) else nn.ModuleList
    short: nn.Module = type(f"Folded{base.__name__}", (base,), {})()
    for index, (name, child) in enumerate(zip(names, children, strict=True)):
        source = sources.get(index, index)
        short.add_module(name, child if source == index
                         else LeftOutLayer(child, children[source], watch))
    return short


@contextlib.contextmanager
def stand_ins(model: nn.Module, lists: Mapping[str, Mapping[int, int]], watch: Watch
              ) -> Iterator[None]:
    """Replace layers of the lists named in ``lists`` (path -> {left-out index: the index of
    the running layer it copies}) by stand-ins; restore the model on exit."""
    swapped: list[tuple[nn.Module, str, nn.Module]] = []
    hooks: list[torch.utils.hooks.RemovableHandle] = []
    try:
        for path, sources in lists.items():
            if not sources:
                continue
            parent_name, _, attr = path.rpartition(".")
            parent = model.get_submodule(parent_name)
            original = parent._modules[attr]
            assert original is not None
            children = list(original.children())
            for index in sorted(set(sources.values())):
                hooks.append(_record(children[index], watch))
            for index in sources:
                hooks.extend(_flag_calls(children[index], watch))
            parent._modules[attr] = _with_stand_ins(original, sources, watch)
            swapped.append((parent, attr, original))
        yield
    finally:
        for handle in hooks:
            handle.remove()
        for parent, attr, original in reversed(swapped):
            parent._modules[attr] = original

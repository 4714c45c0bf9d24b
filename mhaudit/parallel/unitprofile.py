"""What each FSDP unit saves for the backward, and which of the root's parameters run before
the layers and which after them: one fake forward of a meta copy, watched by saved-tensor
hooks and module hooks."""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

from mhaudit.fake.mode import FakeMode
from mhaudit.parallel.engine import _fake_inputs, _loss, _meta_copy, model_key, read_once

ROOT_FIRST = "<root before the layers>"
"""Key of what the root saves before the first layer runs (the embeddings' part)."""
ROOT_LAST = "<root after the layers>"
"""Key of what the root saves after the last layer (final norm, head, loss)."""


@dataclass(frozen=True)
class UnitProfile:
    """Per-unit saved bytes of one forward at the audited batch, and the root's parts."""

    saved_bytes: Mapping[str, int] | None
    """Bytes autograd keeps for the backward, by the unit that first saved each storage
    (parameters left out), the root's under :data:`ROOT_FIRST` / :data:`ROOT_LAST`; None
    when the forward could not be run."""
    first_params: frozenset[str] = field(default_factory=frozenset)
    """Root parameters the forward uses before the first layer (or never)."""
    last_params: frozenset[str] = field(default_factory=frozenset)
    """Root parameters used after the last layer; a tied weight is in both."""
    why: str | None = None
    """Why the forward was not measured, when it was not."""
    largest_bytes: Mapping[str, int] = field(default_factory=dict)
    """The largest single tensor each unit saves: a backward through that op holds its
    output's gradient and its input's at once."""
    output_bytes: int = 0
    """The model's non-scalar floating outputs (the logits), which a pipeline's last
    stage keeps per micro-batch until its backward."""


def root_owners(model: nn.Module, units: Sequence[str]) -> dict[int, tuple[str, ...]]:
    """id of each module outside the layer units that has parameters of its own → their
    names as ``named_parameters`` lists them (a tied weight under its first name). Read
    before the parameters are materialised, which unties them."""
    layers = [u for u in units if u]
    names = {id(p): n for n, p in model.named_parameters()}
    return {id(mod): tuple(names[id(p)] for p in mod.parameters(recurse=False))
            for name, mod in model.named_modules()
            if not any(name == u or name.startswith(u + ".") for u in layers)
            and any(True for _ in mod.parameters(recurse=False))}


class _Watch:
    """The state of one watched forward: the running unit and what each has saved."""

    def __init__(self, model: nn.Module, owners: dict[int, tuple[str, ...]]) -> None:
        self.stack: list[str] = []
        self.layers_ran = False
        self.saved: dict[str, int] = {}
        self.largest: dict[str, int] = {}
        self.seen: set[int] = {p.untyped_storage()._cdata for p in model.parameters()}
        self.used: dict[str, set[str]] = {ROOT_FIRST: set(), ROOT_LAST: set()}
        self.owners = owners

    def where(self) -> str:
        if self.stack:
            return self.stack[-1]
        return ROOT_LAST if self.layers_ran else ROOT_FIRST

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        key = t.untyped_storage()._cdata
        if key not in self.seen:
            self.seen.add(key)
            here, size = self.where(), t.untyped_storage().nbytes()
            self.saved[here] = self.saved.get(here, 0) + size
            self.largest[here] = max(self.largest.get(here, 0), size)
        return t

    def hooks(self, model: nn.Module, units: Sequence[str]) -> list[Any]:
        """Forward hooks: units push and pop themselves; root modules note their
        parameters as used before or after the layers."""
        handles = []
        for unit in (u for u in units if u):
            mod = model.get_submodule(unit)
            handles.append(mod.register_forward_pre_hook(
                lambda _m, _a, unit=unit: self.stack.append(unit)))
            handles.append(mod.register_forward_hook(self._pop))
        for mod in model.modules():
            if id(mod) in self.owners:
                handles.append(mod.register_forward_pre_hook(self._use))
        return handles

    def _pop(self, _mod: nn.Module, _args: Any, _out: Any) -> None:
        self.stack.pop()
        self.layers_ran = True

    def _use(self, mod: nn.Module, _args: Any) -> None:
        if not self.stack:
            self.used[ROOT_LAST if self.layers_ran else ROOT_FIRST].update(self.owners[id(mod)])


def static_profile(model: nn.Module, units: Sequence[str], why: str) -> UnitProfile:
    """Without a forward: root modules registered before the first layer unit go first, the
    rest last (a tied weight with both); no saved bytes."""
    layers = [u for u in units if u]
    owners = root_owners(model, units)
    sides: tuple[set[str], set[str]] = (set(), set())
    after = False
    for name, mod in model.named_modules():
        after = after or name in layers
        sides[after].update(owners.get(id(mod), ()))
    return UnitProfile(None, frozenset(sides[0]), frozenset(sides[1]), why)


_PROFILES: weakref.WeakKeyDictionary[nn.Module, tuple[Any, UnitProfile]] = (
    weakref.WeakKeyDictionary())
"""The last profile of each model, with what it was read from: the pipeline plans of one
search share one forward."""


def profile_units(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                  units: Sequence[str], precision: str) -> UnitProfile:
    """:func:`read_unit_profile`, read once per model, inputs, units and precision."""
    key = model_key(model, args, kwargs), tuple(units), precision
    return read_once(_PROFILES, model, key,
                     lambda: read_unit_profile(model, args, kwargs, units, precision))


def read_unit_profile(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                      units: Sequence[str], precision: str) -> UnitProfile:
    """One forward (and loss) of a fake copy of ``model`` at ``precision``, as the training
    step runs it: what each unit saves for the backward, and where the root's parameters
    run. Falls back to :func:`static_profile` when the forward fails."""
    weights = torch.bfloat16 if precision == "bf16" else torch.float32
    try:
        twin = _meta_copy(model).to(weights)
        owners = root_owners(twin, units)
        with FakeMode(allow_non_fake_inputs=True):
            twin.to_empty(device="cpu")
            watch = _Watch(twin, owners)
            handles = watch.hooks(twin, units)
            cast = torch.autocast("cpu", dtype=torch.bfloat16,
                                  enabled=precision == "bf16-mixed")
            try:
                with torch.autograd.graph.saved_tensors_hooks(watch.pack, lambda t: t), cast:
                    out = twin(*_fake_inputs(args, weights),
                               **_fake_inputs(dict(kwargs), weights))
                    _loss(out)
            finally:
                for handle in handles:
                    handle.remove()
    except Exception as exc:  # any model: its forward may refuse fake tensors in many ways
        return static_profile(model, units, f"the forward did not run on fake tensors ({exc})")
    first, last = watch.used[ROOT_FIRST], watch.used[ROOT_LAST]
    unused = {n for names in owners.values() for n in names} - first - last
    logits = sum(t.untyped_storage().nbytes() for t in tree_leaves(out)
                 if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 1)
    return UnitProfile(watch.saved, frozenset(first | unused), frozenset(last),
                       largest_bytes=watch.largest, output_bytes=logits)

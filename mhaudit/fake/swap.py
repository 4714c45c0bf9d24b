"""Swap a model's parameters, buffers and tensor attributes for stand-ins, and back."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

Role = Literal["param", "buffer", "attr"]
"""What a tensor is to its module: a parameter, a buffer or a plain tensor attribute."""


@dataclass
class Swapped:
    """The stand-ins in place while the swap lasts."""

    params: dict[int, nn.Parameter] = field(default_factory=dict)
    """Each original parameter's stand-in, by the original's ``id``."""
    buffers: list[torch.Tensor] = field(default_factory=list)
    """The buffers' stand-ins, one per distinct buffer."""


@contextlib.contextmanager
def swapped_state(model: nn.Module, make: Callable[[torch.Tensor, Role], torch.Tensor]
                  ) -> Iterator[Swapped]:
    """Put ``make(tensor, role)`` in place of every parameter, buffer and public tensor
    attribute of ``model``; a tensor held in several places gets one stand-in, so tied
    weights stay tied, and a parameter's stand-in is a parameter with its
    ``requires_grad``. The originals are untouched and put back on exit."""
    swapped: list[tuple[dict[str, Any], str, Any]] = []
    made: dict[int, torch.Tensor] = {}
    result = Swapped()
    try:
        for module in model.modules():
            tables: tuple[tuple[dict[str, Any], Role], ...] = (
                (module._parameters, "param"), (module._buffers, "buffer"))
            for table, role in tables:
                for name, value in list(table.items()):
                    if value is None:
                        continue
                    if id(value) not in made:
                        made[id(value)] = _stand_in(value, role, make, result)
                    swapped.append((table, name, value))
                    table[name] = made[id(value)]
            for name, value in list(vars(module).items()):
                if isinstance(value, torch.Tensor) and not name.startswith("_"):
                    swapped.append((vars(module), name, value))
                    vars(module)[name] = made.setdefault(id(value), make(value, "attr"))
        yield result
    finally:
        for table, name, value in reversed(swapped):
            table[name] = value


def _stand_in(value: torch.Tensor, role: Role,
              make: Callable[[torch.Tensor, Role], torch.Tensor], result: Swapped
              ) -> torch.Tensor:
    """``make``'s stand-in for one parameter or buffer, recorded on ``result``."""
    new = make(value, role)
    if role == "param":
        param = nn.Parameter(new, requires_grad=value.requires_grad)
        result.params[id(value)] = param
        return param
    result.buffers.append(new)
    return new

"""Packed weights: quantized modules hold weight and bias in a packed object, not parameters.

``torch.ao`` quantized and dynamic-quantized ``Linear`` (and ``Conv``) keep their weights in
a ``torch.ScriptObject`` (``LinearPackedParamsBase``) whose ``unpack()`` gives the
(quantized) weight and the float bias; ``model.parameters()`` does not list them. They are
the layer's parameters all the same: counted in the model's total and read as the weight
and bias of the op that takes the packed object.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Packed:
    """One packed object and what it unpacks to."""

    name: str
    """Qualified name of the packed object (``q_proj._packed_params._packed_params``)."""
    packed: torch.ScriptObject
    weight: torch.Tensor
    """The weight as stored (``qint8`` for a dynamic-quantized Linear)."""
    bias: torch.Tensor | None

    @property
    def numel(self) -> int:
        """Weight and bias elements."""
        return self.weight.numel() + (self.bias.numel() if self.bias is not None else 0)


def packed_weights(model: nn.Module) -> list[Packed]:
    """Every packed object in ``model`` whose ``unpack()`` gives (weight, bias)."""
    found: list[Packed] = []
    for prefix, module in model.named_modules():
        for attr, value in vars(module).items():
            if not isinstance(value, torch.ScriptObject) or not _unpacks(value):
                continue
            unpacked = value.unpack()  # type: ignore[attr-defined]
            if not isinstance(unpacked, tuple) or not unpacked:
                continue
            weight, bias = unpacked[0], unpacked[1] if len(unpacked) > 1 else None
            if isinstance(weight, torch.Tensor):
                name = f"{prefix}.{attr}" if prefix else attr
                found.append(Packed(name, value, weight,
                                    bias if isinstance(bias, torch.Tensor) else None))
    return found


def _unpacks(value: torch.ScriptObject) -> bool:
    try:
        return "unpack" in value._method_names()  # type: ignore[attr-defined]
    except RuntimeError:
        return False


def packed_count(model: nn.Module) -> int:
    """Elements of every packed weight and bias in ``model``."""
    return sum(p.numel for p in packed_weights(model))


def packed_note(model: nn.Module) -> str | None:
    """One line saying what the packed weights are and that they are counted; None when
    the model has none."""
    found = packed_weights(model)
    if not found:
        return None
    weights = sorted({str(p.weight.dtype).removeprefix("torch.") for p in found})
    biases = sorted({str(p.bias.dtype).removeprefix("torch.") for p in found
                     if p.bias is not None})
    kinds = f"weights {', '.join(weights)}" + (f", biases {', '.join(biases)}" if biases else "")
    return (f"{sum(p.numel for p in found):,} parameters are packed in {len(found)} quantized "
            f"layer(s) ({kinds}), counted in params_total and their blocks")


def as_linear(func: object, args: tuple[object, ...], owned: list[tuple[object, object]]
              ) -> tuple[object, tuple[object, ...]] | None:
    """A quantized linear op that takes a packed object (``quantized::linear_dynamic(X,
    W_prepack)``, ``quantized::linear(X, W_prepack, scale, zero_point)``) as ``aten.linear``
    on the packed weight and bias; None for any other op. It computes the same products,
    from int8 weights.

    ``owned`` holds the graph nodes of (weight, bias) of each packed object of the module
    that runs the op: a packed object reaches the op as a new Python wrapper each call (no
    identity to match), and the module that holds exactly one is the one it came from.
    """
    name = getattr(func, "name", lambda: "")()
    if not (isinstance(name, str) and name.startswith("quantized::") and "linear" in name):
        return None
    if len(args) < 2 or not isinstance(args[1], torch.ScriptObject) or len(owned) != 1:
        return None
    weight, bias = owned[0]
    return torch.ops.aten.linear.default, (args[0], weight, bias)

"""A second FLOP opinion from fvcore's FlopCountAnalysis, converted to 2 FLOPs per multiply-add."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from mhaudit.errors import ConfigError
from mhaudit.trace.export import output_tensors

FVCORE_FLOPS_PER_COUNT = 2
"""fvcore counts one multiply-add as one "flop" (it reports MACs); mhaudit FLOPs are 2 per MAC."""


@dataclass(frozen=True)
class FvcoreFlops:
    """fvcore's count of one forward, in mhaudit FLOPs (2 per multiply-add)."""

    flops: int
    """fvcore's total × 2. Covers only the ops fvcore has handles for."""
    operator_flops: dict[str, int] = field(default_factory=dict)
    """fvcore operator name (``linear``, ``matmul``, ``addmm``, ...) to FLOPs (× 2)."""
    unsupported_ops: dict[str, int] = field(default_factory=dict)
    """Ops fvcore skipped (``aten::softmax``, ``aten::scaled_dot_product_attention``, ...)
    to the number of calls; fvcore counts them as zero, so this is its coverage gap."""


class _Bound(nn.Module):
    """Calls ``module`` with tensor kwargs as trailing positional inputs and fixed non-tensors."""

    def __init__(self, module: nn.Module, n_args: int, tensor_keys: list[str],
                 constants: dict[str, Any]) -> None:
        super().__init__()
        self.module = module
        self.n_args = n_args
        self.tensor_keys = tensor_keys
        self.constants = constants

    def forward(self, *inputs: Any) -> tuple[torch.Tensor, ...]:
        kwargs = dict(zip(self.tensor_keys, inputs[self.n_args:], strict=True))
        out = self.module(*inputs[: self.n_args], **kwargs, **self.constants)
        return tuple(output_tensors(out))


def fvcore_flops(
    module: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None = None
) -> FvcoreFlops:
    """Run fvcore's FlopCountAnalysis on ``module(*args, **kwargs)`` and double its count.

    fvcore traces with ``torch.jit`` and so runs real compute on real tensors: the
    model and inputs must be built on CPU (or another real device), not under
    ``torch.device("meta")``. Its tracer, unsupported-op and uncalled-module
    warnings are silenced; the skipped ops are returned in ``unsupported_ops``.
    fvcore counts matmul-like ops, convolutions and a few norms and poolings only
    (no softmax, SDPA or elementwise ops), so the total is a lower bound.
    """
    tensors = [*(a for a in args if isinstance(a, torch.Tensor)),
               *(v for v in (kwargs or {}).values() if isinstance(v, torch.Tensor))]
    meta = any(t.is_meta for t in (*module.parameters(), *module.buffers(), *tensors))
    if meta:
        raise ConfigError(
            "the fvcore backend runs real compute and cannot use meta tensors",
            "Build the model and its inputs on CPU for fvcore.",
        )
    from fvcore.nn import FlopCountAnalysis

    kwargs = dict(kwargs or {})
    tensor_keys = [k for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    constants = {k: v for k, v in kwargs.items() if k not in tensor_keys}
    bound = _Bound(module, len(args), tensor_keys, constants)
    inputs = (*args, *(kwargs[k] for k in tensor_keys))
    fvcore_logger = logging.getLogger("fvcore")
    previous_level = fvcore_logger.level
    fvcore_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            analysis = FlopCountAnalysis(bound, inputs)
            analysis.unsupported_ops_warnings(False)
            analysis.uncalled_modules_warnings(False)
            analysis.tracer_warnings("none")
            total = int(analysis.total())
            by_operator = {str(k): int(v) for k, v in analysis.by_operator().items()}
            unsupported = {str(k): int(v) for k, v in analysis.unsupported_ops().items()}
    finally:
        fvcore_logger.setLevel(previous_level)
    return FvcoreFlops(
        flops=FVCORE_FLOPS_PER_COUNT * total,
        operator_flops={k: FVCORE_FLOPS_PER_COUNT * v for k, v in by_operator.items()},
        unsupported_ops=unsupported,
    )

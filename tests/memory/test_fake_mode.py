"""Grouped-mm experts at fp32 are recorded on fake tensors, as their CPU kernel runs them."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from mhaudit.api import audit
from mhaudit.trace.export import trace
from mhaudit.trace.recorder import record

EXPERTS, TOKENS, WIDTH, HIDDEN = 4, 16, 8, 16


class GroupedExperts(nn.Module):
    """Tokens sorted by expert, each group through its expert's weight, as MoE layers do."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(EXPERTS, WIDTH, HIDDEN))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        offs = torch.arange(1, EXPERTS + 1, dtype=torch.int32, device=x.device) * (
            TOKENS // EXPERTS)
        return torch._grouped_mm(x, self.weight, offs=offs)


def _grouped_mm_nodes(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    return [n for n in graph.nodes if n.target is torch.ops.aten._grouped_mm.default]


def test_fp32_grouped_mm_is_recorded_with_its_real_shape_and_dtype() -> None:
    model, x = GroupedExperts(), torch.randn(TOKENS, WIDTH)
    recorded = record(model, (x,), {}, fake=True)
    (node,) = _grouped_mm_nodes(recorded.graph)
    assert recorded.method == "dispatch-fake"
    assert tuple(node.meta["val"].shape) == (TOKENS, HIDDEN)
    assert node.meta["val"].dtype == torch.float32
    # The casts to bf16 that let the fake kernel run are not in the record.
    assert not [n for n in recorded.graph.nodes
                if n.target is torch.ops.aten._to_copy.default]


def test_the_first_rung_answers_fp32_grouped_mm() -> None:
    model, x = GroupedExperts(), torch.randn(TOKENS, WIDTH)
    assert trace(model, (x,), {}).method == "dispatch-record"
    # Each expert multiplies its 4 tokens by its 8x16 weight: 4 experts · 2·4·8·16 = 4,096
    # (FlopCounterMode counts no grouped mm, so the figure is the hand arithmetic).
    report = audit(model, (x,))
    assert report.totals.flops_by_family["matmul"] == EXPERTS * 2 * (TOKENS // EXPERTS) * (
        WIDTH * HIDDEN)


def test_modes_above_the_fake_mode_see_the_one_call() -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    from mhaudit.fake.mode import FakeMode

    class Seen(TorchDispatchMode):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[Any] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            self.ops.append(func)
            return func(*args, **(kwargs or {}))

    seen = Seen()
    with FakeMode():
        x, weight = torch.randn(TOKENS, WIDTH), torch.randn(EXPERTS, WIDTH, HIDDEN)
        offs = torch.full((EXPERTS,), TOKENS // EXPERTS, dtype=torch.int32).cumsum(0,
                                                                                dtype=torch.int32)
        with seen:
            out = torch._grouped_mm(x, weight, offs=offs)
    assert seen.ops == [torch.ops.aten._grouped_mm.default]
    assert (tuple(out.shape), out.dtype) == ((TOKENS, HIDDEN), torch.float32)

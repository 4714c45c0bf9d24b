"""The inference peak of a fake forward, with folded layers added back."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mhaudit.api import audit


class _Keeping(nn.Module):
    """A layer that leaves ``keep`` tensors of its output's size alive in ``cache``."""

    def __init__(self, keep: int) -> None:
        super().__init__()
        self.keep = keep
        self.lin = nn.Linear(8, 8)

    def forward(self, x: Tensor, cache: list[Tensor]) -> Tensor:
        y = self.lin(x)
        cache.extend(y * (i + 2) for i in range(self.keep))  # kept to the end, like K/V
        return torch.relu(y)


class _Stack(nn.Module):
    """Four layers that keep nothing, then four that keep two tensors each: the second
    group's representative is layer 4, the second in the shortened list."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([*(_Keeping(0) for _ in range(4)),
                                     *(_Keeping(2) for _ in range(4))])

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        cache: list[Tensor] = []
        for layer in self.layers:
            x = layer(x, cache)
        return (x, *cache)


def test_folded_leftovers_follow_each_group_representative() -> None:
    """Eight layers, folded to two representatives (layers 0 and 4): layer 4's kept
    tensors are added for its three copies, as if all eight had run."""
    torch.manual_seed(0)
    model = _Stack().eval()
    x = torch.randn(2, 16, 8)
    unfolded = audit(model, (x,), fold=False, dtype="fp32").totals.peak_activation_bytes
    report = audit(model, (x,), dtype="fp32")
    assert report.extras["folded_layers"] == [{"list": "layers", "layers": 8, "traced": 2}]
    assert report.totals.peak_activation_bytes == unfolded
    # 4 layers · 2 kept tensors · 2·16·8·4 B = 8 KiB alive at the end, plus what the last
    # layer holds while it runs
    assert unfolded > 4 * 2 * 2 * 16 * 8 * 4

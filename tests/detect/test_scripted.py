"""A TorchScript module is read like the module it scripts: no accessor it refuses
(``get_submodule``, ``get_parameter``) ends the audit in an internal error."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mhaudit.api import audit
from mhaudit.errors import ConfigError

D, H, N = 32, 4, 5


class Scripted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.h = H
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q = self.q(x).view(b, n, self.h, d // self.h).transpose(1, 2)  # (b, h, n, d_k)
        k = self.k(x).view(b, n, self.h, d // self.h).transpose(1, 2)
        v = self.v(x).view(b, n, self.h, d // self.h).transpose(1, 2)
        w = torch.softmax(torch.matmul(q, k.transpose(-1, -2)), dim=-1)  # (b, h, n, n)
        return self.o(torch.matmul(w, v).transpose(1, 2).reshape(b, n, d))


def test_a_script_module_is_one_block_named_after_the_scripted_class() -> None:
    report = audit(torch.jit.script(Scripted()), (torch.randn(1, N, D),))
    (block,) = report.blocks
    layout = block.layout
    assert (layout.module_type, layout.num_heads, layout.head_dim) == ("Scripted", H, D // H)
    # Each of W_Q, W_K, W_V, W_O: D·D weights + D biases = 32·32 + 32 = 1056.
    assert block.params.q == block.params.k == block.params.v == block.params.o == 1056
    assert report.coverage.unread_cores == ()


def test_a_parallel_plan_of_a_script_module_is_one_configuration_error() -> None:
    with pytest.raises(ConfigError, match="TorchScript"):
        audit(torch.jit.script(Scripted()), (torch.randn(1, N, D),), decode=True,
              parallel="tp=2")

"""A model file that does not build on meta (``.item()`` in a constructor, a sparse buffer
made with an op meta lacks) is built on CPU where it fits, and the report says so."""

from __future__ import annotations

from pathlib import Path

import pytest

import mhaudit.api
from mhaudit.api import audit_target
from mhaudit.errors import LoadError

MODEL = '''
import torch
from torch import nn
import torch.nn.functional as F

class QLinear(nn.Linear):
    def __init__(self, i, o):
        super().__init__(i, o)
        self.scale = float(self.weight.abs().max().item()) / 127  # a value: not on meta

class Attn(nn.Module):
    def __init__(self, d=32, h=4):
        super().__init__()
        self.h = h
        self.qkv = QLinear(d, 3 * d)
        self.o = QLinear(d, d)
        index = torch.tensor([[0, 1], [1, 0]])
        self.register_buffer("adj", torch.sparse_coo_tensor(index, torch.ones(2), (8, 8))
                             .coalesce())  # no SparseMeta kernel

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.o(y.transpose(1, 2).reshape(b, n, d))

def build_model():
    return Attn(d=32, h=4)

def example_inputs():
    return (torch.randn(1, 8, 32),)
'''


def _file(tmp_path: Path) -> str:
    path = tmp_path / "qmodel.py"
    path.write_text(MODEL)
    return str(path)


def test_a_model_meta_refuses_is_built_on_cpu_and_says_so(tmp_path: Path) -> None:
    report = audit_target(_file(tmp_path))
    assert report.model.device == "cpu"
    assert report.model.note.startswith("built on CPU")
    assert report.to_dict()["model"]["note"] == report.model.note
    (block,) = report.blocks
    assert (block.layout.num_heads, block.layout.head_dim) == (4, 8)  # Attn(d=32, h=4)


def test_over_the_real_forward_limit_the_meta_failure_stands(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mhaudit.api, "forward_limit", lambda: 1000)
    with pytest.raises(LoadError, match="exceed the real-forward limit"):
        audit_target(_file(tmp_path))

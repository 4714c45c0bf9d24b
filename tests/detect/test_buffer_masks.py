"""Causal masks held in buffers the constructor builds, read from their values."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fixtures import buffer_masks as bm
from torch import Tensor, nn

import mhaudit
from mhaudit.detect.patterns.mask_values import band
from mhaudit.trace.real import StateValues, weights_on_meta

FILE = bm.__file__
BF16_BYTES = 2


def test_every_buffer_style_reads_causal_from_the_file_on_meta_and_its_cache_grows() -> None:
    for style in ("tril_eq", "bool_not", "triu_fill", "indexed"):
        report = mhaudit.audit_target(f"{FILE}:build_{style}", decode=True, context=100)
        assert report.model.device == "meta"
        assert [b.layout.causal for b in report.blocks] == [True] * bm.LAYERS, style
        # 2 (K and V) · 2 layers · 2 KV heads · d_k 8 · 2 bytes (bf16) = 128 B per token
        per_token = 2 * bm.LAYERS * bm.H_KV * bm.DK * BF16_BYTES
        assert report.totals.kv_cache_bytes_per_token == per_token == 128
        assert report.decode is not None
        assert report.decode.kv_cache_bytes == per_token * 100 * 1  # context 100, batch 1


def test_a_buffer_that_keeps_every_key_is_read_as_not_causal() -> None:
    report = mhaudit.audit_target(f"{FILE}:build_all_ones")
    assert [(b.layout.causal, b.layout.mask_unknown) for b in report.blocks] == [
        (False, None)] * bm.LAYERS
    assert report.totals.kv_cache_bytes_per_token == 0


def test_a_buffer_whose_values_are_unknown_leaves_causal_unknown_and_says_why() -> None:
    with torch.device("meta"):
        model, inputs = bm.build_tril_eq(), bm.example_inputs()
    report = mhaudit.audit(model, inputs)
    (first, _) = report.blocks
    assert first.layout.causal is None
    assert first.layout.mask_unknown is not None
    assert "layers.0.mask" in first.layout.mask_unknown
    assert "constructor" in first.layout.mask_unknown
    assert report.to_dict()["blocks"][0]["mask_unknown"] == first.layout.mask_unknown


def test_a_model_built_on_cpu_gives_its_own_buffer_values() -> None:
    report = mhaudit.audit(bm.build_triu_fill(), bm.example_inputs())
    assert [b.layout.causal for b in report.blocks] == [True] * bm.LAYERS


class _Rewritten(bm.Attention):
    """A mask buffer the forward writes into before reading: its built value is not it."""

    def forward(self, x: Tensor, input_pos: Tensor) -> Tensor:
        self.mask[0, 0] = False
        return super().forward(x, input_pos)


def test_a_buffer_written_in_forward_is_not_read_from_its_built_value() -> None:
    model = _Rewritten("bool_not")
    report = mhaudit.audit(model, bm.example_inputs())
    (block,) = report.blocks
    assert block.layout.causal is None
    assert "written in forward" in (block.layout.mask_unknown or "")


def test_band_reads_offset_and_window_of_a_kept_matrix() -> None:
    i = torch.arange(5)[:, None]  # (5, 1) queries
    j = torch.arange(5)[None, :]  # (1, 5) keys
    causal = j <= i
    # j ≤ i: i − j + 0 ≥ 0; no lower bound cuts a row (every row keeps key 0)
    assert band(causal) == (((1, -1, 0),), False)
    window = (j <= i) & (j > i - 3)  # 3 keys: j ≥ i − 2, i.e. j − i + 2 ≥ 0
    assert band(window) == (((1, -1, 0), (-1, 1, 2)), False)
    padded = causal & (j < 4)  # the last key removed as well: at most the triangle
    assert band(padded) == (((1, -1, 0),), True)
    assert band(torch.ones(5, 5, dtype=torch.bool)) == ((), False)  # keeps every key
    assert band(torch.ones(1, 5, dtype=torch.bool))[0] == ()  # one row: no diagonal


def test_weights_on_meta_keeps_small_buffers_real_and_weights_on_meta() -> None:
    class Held(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8)
            self.register_buffer("mask", torch.tril(torch.ones(4, 4)))
            self.register_buffer("big", torch.zeros(65))

    with weights_on_meta(max_elements=64):
        held = Held()
    assert held.proj.weight.device.type == "meta"
    assert held.big.device.type == "meta"
    assert torch.equal(held.mask, torch.tril(torch.ones(4, 4)))
    assert Held().proj.weight.device.type == "cpu"  # the hooks are gone afterwards


PADDED = '''
import torch
from torch import nn


class Padded(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(32, 96)

    def forward(self, x, keep):
        q, k, v = self.qkv(x).view(1, 6, 3, 4, 8).permute(2, 0, 3, 1, 4)  # (3, b, h, n, d_k)
        scores = q @ k.transpose(-2, -1)  # (b, h, n, n)
        scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
        return (scores.softmax(-1) @ v).transpose(1, 2).reshape(1, 6, 32)


def build_model():
    return Padded()


def example_inputs():
    return torch.randn(1, 6, 32), torch.ones(1, 6, dtype=torch.bool)
'''


def test_a_mask_read_from_inputs_alone_builds_no_buffers(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    built: list[int] = []
    build = StateValues._build

    def counted(self: StateValues) -> object:
        built.append(1)
        return build(self)

    monkeypatch.setattr(StateValues, "_build", counted)
    path = tmp_path / "padded.py"
    path.write_text(PADDED)
    report = mhaudit.audit_target(str(path))
    assert [b.layout.causal for b in report.blocks] == [False]
    assert built == []  # an input's value is asked for only where a buffer is picked at it
    mhaudit.audit_target(f"{FILE}:build_indexed")
    assert built == [1]


class _SparseBand(nn.Module):
    """Keys within 2 positions either side, held as a sparse buffer made dense in forward."""

    def __init__(self) -> None:
        super().__init__()
        pairs = [(i, j) for i in range(8) for j in range(8) if abs(i - j) <= 2]
        indices = torch.tensor(pairs).t()  # (2, nnz)
        band = torch.sparse_coo_tensor(indices, torch.ones(indices.shape[1]), (8, 8))
        self.register_buffer("band", band.coalesce())
        self.qkv = nn.Linear(32, 96)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(x).view(1, 8, 3, 4, 8).permute(2, 0, 3, 1, 4)  # (3, b, h, n, d_k)
        scores = q @ k.transpose(-2, -1)  # (b, h, n, n)
        scores = scores.masked_fill(~(self.band.to_dense() > 0), float("-inf"))
        return (scores.softmax(-1) @ v).transpose(1, 2).reshape(1, 8, 32)


def test_a_sparse_band_buffer_reads_as_a_window_on_both_sides() -> None:
    report = mhaudit.audit(_SparseBand(), (torch.randn(1, 8, 32),))
    (block,) = report.blocks
    # |i − j| ≤ 2 keeps 2 keys either side and the query's own: 2·2 + 1 = 5, not causal
    assert (block.layout.causal, block.layout.window) == (False, 5)


REFUSES_META = '''
import torch
from torch import nn
from fixtures.buffer_masks import Decoder, example_inputs


class Orthogonal(Decoder):
    def __init__(self):
        super().__init__("bool_not")
        if self.layers[0].wq.weight.is_meta and not torch.empty(0).is_meta:
            raise RuntimeError("no meta kernel for this initialisation")  # weights on meta


def build_model():
    return Orthogonal()
'''


def test_a_constructor_that_refuses_meta_weights_gives_its_buffers_from_a_cpu_build(
        tmp_path: Path) -> None:
    path = tmp_path / "refuses.py"
    path.write_text(REFUSES_META)
    report = mhaudit.audit_target(str(path))
    assert report.model.device == "meta"
    assert [b.layout.causal for b in report.blocks] == [True] * bm.LAYERS


class _DecayBuffer(nn.Module):
    """Scores multiplied by a decay matrix held as a buffer: γ^(i−j) on and below the
    diagonal, 0 above it (retention's D), with no softmax."""

    def __init__(self) -> None:
        super().__init__()
        i, j = torch.arange(8)[:, None], torch.arange(8)[None, :]  # (8, 1), (1, 8)
        self.register_buffer("decay", 0.9 ** (i - j).clamp(min=0) * (j <= i))  # (8, 8)
        self.qkv = nn.Linear(32, 96)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(x).view(1, 8, 3, 4, 8).permute(2, 0, 3, 1, 4)  # (3, b, h, n, d_k)
        scores = (q @ k.transpose(-2, -1)) * self.decay  # (b, h, n, n)
        return (scores @ v).transpose(1, 2).reshape(1, 8, 32)


def test_a_decay_buffer_the_scores_are_multiplied_by_reads_causal_by_its_zeros() -> None:
    report = mhaudit.audit(_DecayBuffer(), (torch.randn(1, 8, 32),))
    (block,) = report.blocks
    assert (block.layout.score_form, block.layout.causal) == ("kernel", True)

"""Size-fed index arithmetic runs for real inside a fake step; everything else stays fake."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from mhaudit.phases.indices import MAX_REAL_NUMEL, RealIndices


def test_positions_are_real_and_can_be_read() -> None:
    with FakeTensorMode(allow_non_fake_inputs=True), RealIndices():
        positions = torch.arange(8).unsqueeze(0)  # (1, 8) int64
        diff = torch.diff(positions, prepend=positions[:, :1] - 1, dim=-1)
        packed = bool(((diff != 1).cumsum(-1)[:, -1] != 0).any())  # a value read
        weights = torch.empty(4, 8)
    assert not isinstance(positions, FakeTensor) and positions.tolist() == [list(range(8))]
    assert packed is False  # a fake tensor could not say: transformers assumes packing
    assert isinstance(weights, FakeTensor)  # floats never become real


def test_floats_large_random_and_fake_fed_results_stay_fake() -> None:
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    ids = mode.from_tensor(torch.zeros(2, 3, dtype=torch.long))  # an input: fake
    with mode, RealIndices():
        scaled = torch.arange(8).float()  # a float result: fake
        big = torch.arange(MAX_REAL_NUMEL + 1)
        drawn = torch.randint(0, 5, (3,))
        fed = ids + torch.arange(3)  # a fake input in it: fake
    for tensor in (scaled, big, drawn, fed):
        assert isinstance(tensor, FakeTensor) and tensor.fake_mode is mode


def test_buffers_left_unset_stay_fake() -> None:
    # torch's flex_attention backward makes its example indices with empty_strided under
    # the fake mode it found, and refuses real ones; an unset buffer has no values anyway
    with FakeTensorMode(allow_non_fake_inputs=True), RealIndices():
        unset = torch.empty_strided((), (), dtype=torch.int32)
        made = torch.zeros((), dtype=torch.int32)
    assert isinstance(unset, FakeTensor)
    assert not isinstance(made, FakeTensor)

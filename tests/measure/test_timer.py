"""The one timer and the one reference block: what they run and what they return."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from mhaudit.measure.reference import reference_block
from mhaudit.measure.timer import time_calls
from tests.fixtures.blocks import make_block


def test_time_calls_warms_up_then_times_each_repeat() -> None:
    events: list[str] = []
    done: list[tuple[int, int]] = []
    samples = time_calls(lambda: events.append("call"), "cpu", repeats=3, warmup=2,
                         after_warmup=lambda: events.append("warm"),
                         progress=lambda i, n: done.append((i, n)))
    assert events == ["call", "call", "warm", "call", "call", "call"]
    assert done == [(1, 3), (2, 3), (3, 3)]
    assert len(samples) == 3 and all(s >= 0 for s in samples)


def test_time_calls_runs_in_inference_mode() -> None:
    modes: list[bool] = []
    time_calls(lambda: modes.append(torch.is_inference_mode_enabled()), "cpu", repeats=1,
               warmup=0)
    assert modes == [True]


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("causal", [False, True])
def test_reference_block_shapes_and_agreement(implementation: str, causal: bool) -> None:
    # GQA with d_v ≠ d_k and n_q ≠ n_kv: (b, n_q, d) out of (b, n_kv, d) memory
    lay = replace(make_block(heads=4, kv_heads=2, head_dim=8, v_head_dim=4, batch=2, seq=6,
                             implementation=implementation).layout, seq_len_kv=6)
    torch.manual_seed(0)
    block = reference_block(lay, lambda *s: torch.randn(*s), causal=causal)
    x, mem, w_q, w_k, w_v, w_o = block.leaves
    assert x.shape == (2, 6, 32) and mem.shape == (2, 6, 32)
    assert w_q.shape == (32, 32) and w_k.shape == (16, 32) and w_v.shape == (8, 32)
    assert w_o.shape == (32, 16)
    out = block.forward()
    assert out.shape == (2, 6, 32)
    other = replace(lay, implementation="eager" if implementation == "sdpa" else "sdpa")
    twin = reference_block(other, _feed(block.leaves), causal=causal)
    torch.testing.assert_close(twin.forward(), out, rtol=1e-4, atol=1e-5)


def _feed(leaves: tuple[torch.Tensor, ...]) -> Callable[..., torch.Tensor]:
    """The same tensors again, in the order the block asks for them."""
    items = iter(leaves)
    return lambda *shape: next(items)


def test_reference_block_runs_on_fake_tensors() -> None:
    lay = make_block(heads=2, head_dim=4, seq=3, implementation="eager").layout
    with FakeTensorMode():
        block = reference_block(lay, lambda *s: torch.empty(*s), causal=True)
        assert block.forward().shape == (1, 3, 8)

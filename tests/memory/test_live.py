"""The one live-storage counter: its running count and its log tell the same story."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from mhaudit.data import Layout
from mhaudit.fake.live import LiveStorages, is_scores_of
from tests.fixtures.blocks import make_block


def test_running_count_and_log_agree_on_a_fake_chain() -> None:
    tracker = LiveStorages()
    with FakeTensorMode():
        x = torch.empty(4, 8)  # 128 B, made before tracking: known
        tracker.known([x])
        with tracker:
            a = x * 2  # 128 B
            b = a.view(8, 4)  # shares a's storage: not new
            c = torch.cat([a, a])  # 256 B, peak 384 B
            del a, b
            after_free = tracker.live  # a's storage gone with its last view: 256 B
            d = c.sum()  # 4 B
        del c, d
    assert [r.nbytes for r in tracker.log.records] == [128, 256, 4]
    assert after_free == 256
    assert tracker.peak == 384
    assert tracker.live == 0
    assert tracker.log.ticks >= 4  # mul, view, cat, sum (and what they decompose to)
    assert max(sum(level) for level in tracker.log.levels()) == tracker.peak


def test_new_bytes_counts_only_storages_made_after_the_mark() -> None:
    tracker = LiveStorages()
    with FakeTensorMode(), tracker:
        old = torch.ones(16)  # 64 B
        mark = tracker.serial
        new = torch.ones(32)  # 128 B
        assert tracker.new_bytes((old, new, new), mark) == 128
        assert tracker.new_bytes(old, mark) == 0


def test_op_flops_are_recorded_per_tick_when_asked() -> None:
    calls: list[str] = []

    def count(func: object, args: object, kwargs: object, out: object,
              missing: dict[str, int]) -> int:
        calls.append(str(func))
        return 7

    tracker = LiveStorages(count)
    with FakeTensorMode(), tracker:
        torch.ones(3) + 1
    assert tracker.log.tick_flops == [7, 7]
    assert len(calls) == 2


def test_score_shape_is_the_layouts_b_h_nq_nkv() -> None:
    lay: Layout = replace(make_block(heads=4, batch=2, seq=8).layout, seq_len_kv=16)
    assert is_scores_of((2, 4, 8, 16), lay)
    assert is_scores_of((8, 8, 16), lay)  # heads merged into the batch: same elements
    assert not is_scores_of((2, 4, 16, 8), lay)
    assert not is_scores_of((1, 4, 8, 16), lay)
    assert not is_scores_of((16,), lay)

"""Measured runs: latency per block and forward, peak memory; CUDA paths need a GPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mhaudit.api import audit
from mhaudit.errors import ConfigError
from mhaudit.measure.device import measure


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(32, 4, batch_first=True)
        self.out = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.attn(x, x, x, need_weights=False)[0])


def test_cpu_measurement_times_forward_and_blocks() -> None:
    model, x = _Block(), torch.randn(2, 16, 32)
    calls: list[tuple[int, int]] = []
    result = measure(model, (x,), {}, ["attn"], device="cpu", warmup=1, repeats=3,
                     progress=lambda done, total: calls.append((done, total)))
    assert result.forward.repeats == 3
    assert 0 < result.forward.min_ms <= result.forward.median_ms <= result.forward.max_ms
    assert set(result.blocks) == {"attn"} and result.blocks["attn"].repeats == 3
    assert result.blocks["attn"].median_ms <= result.forward.max_ms
    assert calls == [(1, 3), (2, 3), (3, 3)]
    # the (2, 16, 32) fp32 output alone is 4 KiB; the peak holds at least that
    assert result.peak_memory_bytes is not None and result.peak_memory_bytes >= 4096


def test_audit_on_cpu_fills_latency_and_measured_memory() -> None:
    report = audit(_Block(), (torch.randn(2, 16, 32),), device="cpu", repeats=2)
    assert report.measurement is not None
    assert report.totals.latency_ms == report.measurement.forward.median_ms
    assert report.totals.measured_peak_memory_bytes == report.measurement.peak_memory_bytes


def test_meta_cannot_be_measured() -> None:
    with pytest.raises(ConfigError, match="meta"):
        measure(_Block(), (torch.zeros(1, 2, 32),), {}, [], device="meta")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_cuda_without_a_gpu_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="CUDA is not available"):
        measure(_Block(), (torch.zeros(1, 2, 32),), {}, [], device="cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_measurement_reports_max_allocated() -> None:
    model = _Block().cuda()
    result = measure(model, (torch.randn(2, 16, 32, device="cuda"),), {}, ["attn"],
                     device="cuda", repeats=3)
    assert result.peak_memory_method == "cuda max_memory_allocated"
    assert result.peak_memory_bytes is not None and result.peak_memory_bytes > 0


def test_at_dtype_casts_a_copy() -> None:
    from mhaudit.measure.device import at_dtype

    model = torch.nn.Linear(4, 4)
    x = torch.zeros(2, 4)
    cast, (cx,), _ = at_dtype(model, (x,), {}, "bf16")
    assert cast is not model and next(cast.parameters()).dtype == torch.bfloat16
    assert cx.dtype == torch.bfloat16 and next(model.parameters()).dtype == torch.float32
    same, args, _ = at_dtype(model, (x,), {}, "fp32")
    assert same is model and args[0] is x


def test_cpu_peak_counts_live_storages() -> None:
    from mhaudit.measure.device import measure

    class Chain(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x * 2  # 4 KiB, kept as a local until the return
            z = y + 1  # 4 KiB
            return z * 3  # 4 KiB: all three alive at the end
    result = measure(Chain(), (torch.zeros(1024),), {}, [], device="cpu", repeats=1)
    assert result.peak_memory_bytes == 3 * 4096

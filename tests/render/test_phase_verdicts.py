"""The phase lines name what does not fit, and say where a peak is only a bound."""

from __future__ import annotations

import dataclasses

from fixtures.reports import hand_report

from mhaudit.data import DecodeCost, Report
from mhaudit.render.phases import phase_lines

GIB, MIB = 2**30, 2**20


def _with_decode(param_bytes: int, cache_bytes: int) -> Report:
    decode = DecodeCost(
        context=4096, batch_size=1, flops_per_step=1, weight_bytes=param_bytes,
        kv_read_bytes=cache_bytes, kv_write_bytes=0, bytes_per_step=param_bytes + cache_bytes,
        time_per_step_s=1e-3, tokens_per_s=1e3, bound="memory", kv_cache_bytes=cache_bytes,
        param_bytes=param_bytes, memory_bytes=80 * GIB,
        fits=param_bytes + cache_bytes <= 80 * GIB, blocks=())
    return dataclasses.replace(hand_report(), decode=decode)


def _decode_line(report: Report) -> str:
    return " ".join(" ".join(phase_lines(report)).split())


def test_weights_over_memory_are_named_not_the_cache() -> None:
    # 87 GiB of weights > 80 GiB: the weights do not fit, whatever the 16 MiB cache does
    line = _decode_line(_with_decode(87 * GIB, 16 * MIB))
    assert "the weights (87 GiB) alone do not fit in 80 GiB" in line
    assert "KV cache 16 MiB does not fit" not in line


def test_a_cache_that_overflows_beside_fitting_weights_is_named() -> None:
    # 70 GiB + 16 GiB = 86 GiB > 80 GiB, the weights alone fit: the cache does not
    line = _decode_line(_with_decode(70 * GIB, 16 * GIB))
    assert "KV cache 16 GiB does not fit beside the weights (70 GiB) in 80 GiB" in line

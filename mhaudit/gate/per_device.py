"""The gate per GPU: the budget's plan, and a phase's figures under it (or on one GPU)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mhaudit.data import DecodeCost, TrainingCost
from mhaudit.data.parallel import ParallelPlan, parallel_to_dict
from mhaudit.errors import ConfigError


def _number_at(data: Any, *keys: str) -> float | None:
    for key in keys:
        data = data.get(key) if isinstance(data, Mapping) else None
    return data if isinstance(data, (int, float)) and not isinstance(data, bool) else None


def phase_sections(training: TrainingCost | None, decode: DecodeCost | None
                   ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The parts of a report's phases the gate reads, shaped as their JSON sections."""
    return (
        {"peak_bytes": training.peak_bytes,
         "parallel": parallel_to_dict(training.parallel) if training.parallel else None}
        if training is not None else None,
        {"time_per_step_s": decode.time_per_step_s, "kv_cache_bytes": decode.kv_cache_bytes,
         "param_bytes": decode.param_bytes,
         "parallel": parallel_to_dict(decode.parallel) if decode.parallel else None}
        if decode is not None else None)


def per_device_metrics(training: Mapping[str, Any] | None, decode: Mapping[str, Any] | None
                        ) -> dict[str, float | None]:
    """Per-GPU metrics: ``train_peak_bytes_per_device``, ``decode_peak_bytes_per_device``
    and ``train_comm_bytes_per_step`` (all collectives a rank sends) from a phase's
    ``parallel`` figures when it ran under a plan (the budget's ``parallel``); else the
    one-GPU ones: the training peak, the weights plus the KV cache of a decode step, and
    no traffic."""
    train_par = training.get("parallel") if training else None
    decode_par = decode.get("parallel") if decode else None
    if isinstance(train_par, Mapping):
        train_peak = _number_at(train_par, "per_device_bytes", "peak")
        sent = train_par.get("comm_bytes_per_step")
        comm = (sum(v for v in sent.values() if isinstance(v, (int, float)))
                if isinstance(sent, Mapping) else None)
    else:
        train_peak = _number_at(training, "peak_bytes")
        comm = 0 if training else None
    if isinstance(decode_par, Mapping):
        decode_peak = _number_at(decode_par, "per_device_bytes", "peak")
    else:
        weights, kv = _number_at(decode, "param_bytes"), _number_at(decode, "kv_cache_bytes")
        decode_peak = weights + kv if weights is not None and kv is not None else None
    return {"train_peak_bytes_per_device": train_peak,
            "decode_peak_bytes_per_device": decode_peak,
            "train_comm_bytes_per_step": comm}


def budget_plan(value: Any, name: str, source: str) -> ParallelPlan:
    """The budget's plan, in the ``--parallel`` grammar; the error names the key."""
    from mhaudit.parallel.plan import parse_plan

    if not isinstance(value, str):
        raise ConfigError(f"{source}: {name} must be a plan string, not {value!r}",
                          'Write e.g. parallel = "tp=8,sp,fsdp=8".')
    try:
        return parse_plan(value)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {name} = {value!r}: {exc.message}", exc.tip) from None

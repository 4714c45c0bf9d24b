"""The what-if spec checked before a sweep: positive sizes, divisible head counts, one dtype."""

from __future__ import annotations

from dataclasses import replace

from mhaudit.cost.devices import canonical_dtype
from mhaudit.data.whatif import LayoutSpec
from mhaudit.errors import ConfigError

_SIZES = ("d_model", "heads", "kv_heads", "seq_len", "batch_size", "head_dim", "seq_len_kv")
_OPTIONAL = ("head_dim", "seq_len_kv")


def check_spec(spec: LayoutSpec) -> LayoutSpec:
    """``spec`` with its dtype spelled canonically; ConfigError when it names no layout."""
    for key in _SIZES:
        value = getattr(spec, key)
        if value is None and key in _OPTIONAL:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"layout spec: {key} must be a positive integer, "
                              f"got {value!r}", f"Give {key} as 1 or more.")
    if spec.head_dim is None and spec.d_model % spec.heads:
        raise ConfigError(f"layout spec: {spec.heads} heads do not divide d_model "
                          f"{spec.d_model}", "Pick a divisor of d_model, or give head_dim.")
    if spec.heads % spec.kv_heads:
        raise ConfigError(f"layout spec: {spec.kv_heads} KV heads do not divide "
                          f"{spec.heads} heads", "Pick a divisor of the head count.")
    if spec.implementation not in ("sdpa", "eager"):
        raise ConfigError(f"layout spec: unknown implementation {spec.implementation!r}",
                          "Use sdpa or eager.")
    dtype = canonical_dtype(spec.dtype)
    return spec if dtype == spec.dtype else replace(spec, dtype=dtype)

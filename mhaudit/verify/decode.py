"""A real generation step on CPU: the bytes it reads, as the reference for ``decode``.

A decoder-only transformers model prefills ``context`` tokens into its own cache, then
runs one token per sequence on it. A dispatch mode notes every parameter storage an op
of that step reads (an embedding table only by the rows it gathers), and the cache's
``update`` hands each attention the keys and values it reads, the new ones included.
Nothing is taken from the report.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from mhaudit.data import Agreement, Report, Unchecked
from mhaudit.errors import first_line
from mhaudit.verify.limits import over_limits
from mhaudit.verify.real import real_state
from mhaudit.verify.reference import cache_of

_GATHERS = frozenset({torch.ops.aten.embedding.default, torch.ops.aten.index_select.default})


class _Reads(TorchDispatchMode):  # type: ignore[misc]
    """Bytes of parameters the ops read: each storage once, gathered tables by rows."""

    def __init__(self, params: list[nn.Parameter]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.sizes = {p.untyped_storage().data_ptr(): p.nbytes for p in params}
        self.full: set[int] = set()
        self.rows: dict[int, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        out = func(*args, **(kwargs or {}))
        first = args[0] if args else None
        for leaf in tree_leaves((args, kwargs or {})):
            if not isinstance(leaf, torch.Tensor):
                continue
            ptr = leaf.untyped_storage().data_ptr()
            if ptr not in self.sizes:
                continue
            if func in _GATHERS and leaf is first and isinstance(out, torch.Tensor):
                self.rows[ptr] = self.rows.get(ptr, 0) + out.nbytes  # the rows it gathered
            else:
                self.full.add(ptr)
        return out

    def total(self) -> int:
        gathered = sum(min(b, self.sizes[p]) for p, b in self.rows.items() if p not in self.full)
        return sum(self.sizes[p] for p in self.full) + gathered


def _read_back(cache: Any, seen: list[int]) -> None:
    """Note the bytes of the keys and values each ``cache.update`` hands the attention:
    the positions it reads, the one it writes included (after the step, a sliding layer
    has already dropped its oldest)."""
    update = cache.update

    def noted(*args: Any, **kwargs: Any) -> Any:
        keys, values = update(*args, **kwargs)
        seen.append(keys.nbytes + values.nbytes)
        return keys, values

    cache.update = noted


def decode_step_bytes(model: nn.Module, context: int, batch: int, dtype: torch.dtype
                      ) -> tuple[int, int]:
    """Weight bytes and cache bytes of one real step after a real prefill of ``context``
    tokens (token 0) per sequence, on CPU copies of ``model`` at ``dtype``: the
    parameters its ops read, and the cached keys and values its attention read with the
    ones it wrote."""
    ids = torch.zeros(batch, context, dtype=torch.long)
    name = cache_argument(model) or "past_key_values"
    was_training = model.training
    model.eval()
    try:
        with real_state(model, dtype), torch.no_grad():
            out = model(input_ids=ids, use_cache=True)
            seen: list[int] = []
            cache = cache_of(out)
            _read_back(cache, seen)
            reads = _Reads(list(model.parameters()))
            with reads:
                model(input_ids=ids[:, :1], use_cache=True, **{name: cache})
    finally:
        model.train(was_training)
    return reads.total(), sum(seen)


DECODE_TOLERANCE = 0.01
"""Decode bytes per step: the same weights and cache positions in both; 1% leaves room for
a gathered row or a window's edge position (a position table shared by the batch, a
sliding layer that keeps window − 1), while a weight read twice, an encoder read each
step or a cache at the wrong context is well beyond it."""
DECODE_LIMIT_FLOPS = 10**11
"""Largest prefill the real step may compute first."""

FIGURE = "decode bytes per step"


def cache_argument(model: nn.Module) -> str | None:
    """The name ``model.forward`` takes its KV cache by (``cache``; ``past_key_values``
    before transformers 5), where it also takes ``input_ids``; None otherwise."""
    try:
        names = set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return None
    if "input_ids" not in names:
        return None
    return next((name for name in ("cache", "past_key_values") if name in names), None)


def _refused(report: Report, model: nn.Module) -> str | None:
    """Why a real generation step of this model is not run here; None when it can be."""
    config = getattr(model, "config", None)
    if cache_argument(model) is None or config is None \
            or getattr(config, "is_encoder_decoder", False):
        return ("a real generation step runs here on decoder-only transformers models "
                "(input_ids and a KV cache argument)")
    if report.experts:
        return ("the experts a real step reads depend on its routing; the report counts "
                "the expected number touched")
    if any(b.layout.latent_width is not None for b in report.blocks):
        return "transformers caches latent attention's expanded K and V, not the latent"
    return None


def decode_check(report: Report, model: nn.Module, dtype: torch.dtype | None
                 ) -> Agreement | Unchecked | None:
    """``decode.bytes_per_step`` beside the bytes one real CPU generation step reads and
    writes at the same context and batch; None without a decode step to check."""
    decode = report.decode
    if decode is None or not decode.applicable:
        return None
    if dtype is None:
        return Unchecked(FIGURE, f"the CPU computes no matmuls in {report.model.dtype}")
    why = _refused(report, model)
    seq = max((b.layout.seq_len_q for b in report.blocks), default=1) or 1
    need = (report.totals.param_bytes + decode.kv_cache_bytes
            + (report.totals.peak_activation_bytes or 0) * max(1, -(-decode.context // seq)))
    why = why or over_limits(need, decode.flops_per_step * decode.context, DECODE_LIMIT_FLOPS,
                             "a real prefill and step")
    if why is not None:
        return Unchecked(FIGURE, why)
    try:
        weights, cache = decode_step_bytes(model, decode.context, decode.batch_size, dtype)
    except Exception as exc:  # the model's code on a real cache
        return Unchecked(FIGURE, f"a real CPU step raised {first_line(exc, 160)}")
    return Agreement(FIGURE, decode.bytes_per_step, weights + cache, "real CPU step",
                     DECODE_TOLERANCE,
                     f"one real step at {report.model.dtype} after a real prefill of "
                     f"{decode.context:,} tokens × {decode.batch_size}: {weights:,} B of "
                     "parameters its ops read (each once; embedding tables by the rows "
                     f"gathered) and {cache:,} B of keys and values its cache handed the "
                     "attention, the new ones included")

"""Run a model's forward and backward on fake tensors with live-storage tracking.

The model's parameters, buffers and tensor attributes are swapped for fake CPU
tensors at the training precision (nothing is allocated, no arithmetic runs) and
put back afterwards. Layer lists can be shortened to a few members, the rest being
copied later from the timeline (:mod:`mhaudit.memory.timeline`). Integer index
arithmetic that only sizes feed runs on real values (:mod:`mhaudit.phases.indices`), so
the model takes the path a real run takes where it reads them.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.checkpoint import checkpoint

from mhaudit.errors import TraceError, first_line
from mhaudit.fake.live import LiveStorages, StepLog, tensors_in
from mhaudit.phases.backward_flops import op_flops
from mhaudit.phases.selective import ScoreRecompute
from mhaudit.phases.stepstate import RUNGS, UpperBounds, step_state
from mhaudit.phases.target_attention import TargetAttention, attention_mode
from mhaudit.trace.flex import eager_flex
from mhaudit.trace.real import seeded

PRECISIONS: dict[str, tuple[torch.dtype, torch.dtype | None]] = {
    "fp32": (torch.float32, None),
    "bf16": (torch.bfloat16, None),
    "bf16-mixed": (torch.float32, torch.bfloat16),
}
"""Preset to (weight, grad and state dtype; autocast dtype of the forward or None)."""


@dataclass(frozen=True)
class LayerRun:
    """A layer of a shortened list that runs, and the key its timeline marks use."""

    key: str
    module: nn.Module


@dataclass
class FakeRun:
    """What a tracked forward and backward left: the log and the fixed state's bytes."""

    log: StepLog
    param_bytes: int
    buffer_bytes: int
    input_bytes: int
    loss: str
    grad_params: frozenset[int]
    """``id`` of each original parameter that received a gradient."""
    forward_end: int
    """Tick at which the forward (loss included) ended."""
    bounds: tuple[str, ...] = ()
    """Data-dependent sizes the step read at their upper bound instead of their value."""


def pick_loss(output: Any) -> tuple[torch.Tensor, str]:
    """``.loss`` when the model returns one, else the first scalar output, else a sum."""
    loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        return loss, ".loss"
    floats = [t for t in tensors_in(output) if t.is_floating_point() and t.requires_grad]
    for t in floats:
        if t.numel() == 1:
            return t, "first scalar output"
    if not floats:
        raise TraceError("the model's output has no floating tensor that needs a gradient",
                         "Return a loss (or logits) from forward() to audit --train.")
    total = floats[0].sum()
    for t in floats[1:]:
        total = total + t.sum()
    return total, "sum of floating outputs"


def _first_grad_tensor(value: Any) -> torch.Tensor | None:
    for t in tensors_in(value):
        if t.is_floating_point() and t.requires_grad:
            return t
    return None


def _recomputing(tracker: LiveStorages, forward: Any, attention: TargetAttention | None
                 ) -> Any:
    """``forward``, with what it makes during the backward recorded as recomputation; with
    ``attention``, SDPA runs as the target's kernel in the recomputation too (the
    backward does not see the forward's function modes)."""

    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        if tracker.phase != "backward":
            return forward(*args, **kwargs)
        tracker.phase = "recompute"
        try:
            with attention_mode(attention):
                return forward(*args, **kwargs)
        finally:
            tracker.phase = "backward"

    return run


@contextlib.contextmanager
def layer_marks(tracker: LiveStorages, layers: Sequence[LayerRun],
                blocks: Sequence[tuple[str, nn.Module]], recompute: bool,
                attention: TargetAttention | None = None,
                policy: ScoreRecompute | None = None) -> Iterator[None]:
    """Mark each layer's forward and backward in the log; note which block makes a tensor.
    With ``recompute`` each layer is checkpointed (``attention``: SDPA recomputed as the
    target runs it); with ``policy`` too, only the ops it marks are recomputed (torch's
    selective activation checkpointing)."""
    select: dict[str, Any] = {} if policy is None else {"context_fn": policy.contexts}
    handles: list[Any] = []
    log = tracker.log

    def hook_tensor(t: torch.Tensor | None, event: str, key: str) -> None:
        def note(_grad: torch.Tensor) -> None:
            log.marks.append((event, key, log.ticks))

        if t is not None:
            t.register_hook(note)  # type: ignore[no-untyped-call]

    for layer in layers:
        def pre(_m: nn.Module, args: Any, kwargs: Any, key: str = layer.key) -> None:
            log.marks.append(("forward_start", key, log.ticks))
            hook_tensor(_first_grad_tensor((args, kwargs)), "backward_end", key)

        def post(_m: nn.Module, _a: Any, _k: Any, out: Any, key: str = layer.key) -> None:
            log.marks.append(("forward_end", key, log.ticks))
            hook_tensor(_first_grad_tensor(out), "backward_start", key)

        handles.append(layer.module.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(layer.module.register_forward_hook(post, with_kwargs=True))
        if recompute:
            layer.module.forward = functools.partial(  # type: ignore[method-assign]
                checkpoint, _recomputing(tracker, layer.module.forward, attention),
                use_reentrant=False, preserve_rng_state=False, **select)
    for name, module in blocks:
        def enter(_m: nn.Module, _a: Any, name: str = name) -> None:
            tracker.owner = name

        def leave(_m: nn.Module, _a: Any, _o: Any) -> None:
            tracker.owner = None

        handles.append(module.register_forward_pre_hook(enter))
        handles.append(module.register_forward_hook(leave))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        if recompute:
            for layer in layers:
                vars(layer.module).pop("forward", None)


def without_cache(model: nn.Module, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the KV cache turned off where ``forward`` takes ``use_cache``.

    transformers turns the cache off when it checkpoints in training: a recomputed
    layer would append its K/V to the cache a second time, and the cache keeps both.
    """
    try:
        takes = "use_cache" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        takes = False
    return {**kwargs, "use_cache": False} if takes else kwargs


class FusedAttention(TorchFunctionMode):
    """SDPA as a fused kernel (flash, cuDNN, memory-efficient) runs it on the target: with
    dropout, those keep the output, the log-sum-exp and an RNG seed, never the scores; on
    CPU tensors torch would take the math path and keep them. With dropout 0 the CPU
    runs its flash kernel, which saves what the fused GPU kernels save."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is torch.nn.functional.scaled_dot_product_attention:
            if len(args) > 4:  # (query, key, value, attn_mask, dropout_p, ...)
                args = (*args[:4], 0.0, *args[5:])
            else:
                kwargs["dropout_p"] = 0.0
        return func(*args, **kwargs)


def run_fake_step(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], *,
                  precision: str, layers: Sequence[LayerRun],
                  blocks: Sequence[tuple[str, nn.Module]], recompute: bool,
                  attention: TargetAttention | None = None, rung: str = "fake",
                  policy: ScoreRecompute | None = None) -> FakeRun:
    """Forward, loss and backward of ``model`` on fake tensors, tracked; with
    ``attention``, each SDPA call keeps what the target's kernel for it keeps; with
    ``recompute`` and ``policy``, each layer recomputes only what the policy marks. ``rung``
    ``real-cpu`` runs the step for real on CPU copies of the state (seeded), tracked
    alike; ``fake-bounded`` reads data-dependent sizes at their upper bound."""
    dtype, autocast = PRECISIONS[precision]
    if recompute:
        kwargs = without_cache(model, kwargs)
    tracker = LiveStorages(op_flops)
    was_training = model.training
    real = rung == "real-cpu"
    bounds = UpperBounds() if rung == "fake-bounded" else None
    with step_state(model, dtype, rung, bounds) as state, \
            seeded() if real else contextlib.nullcontext():
        s_args, s_kwargs = state.inputs(args), state.inputs(kwargs)
        storages = {t.untyped_storage()._cdata: t.untyped_storage().nbytes()
                    for t in tensors_in((s_args, s_kwargs))}
        tracker.known([*state.params.values(), *model.buffers(),
                       *tensors_in((s_args, s_kwargs))])
        model.train()
        try:
            if attention is not None:
                attention.owner = lambda: tracker.owner
            marks = layer_marks(tracker, layers, blocks, recompute, attention, policy)
            with state.modes(), tracker, marks, attention_mode(attention), eager_flex():
                forward_end, source, grads = _forward_backward(
                    model, s_args, s_kwargs, tracker, autocast, state.params)
        except TraceError:
            raise
        except Exception as exc:
            raise TraceError(
                f"the training step failed {RUNGS[rung]}: {first_line(exc)}",
                "Check that forward() and its loss run on CPU tensors." if real else
                "Check that forward() and its loss run under torch's FakeTensorMode "
                "(no .item() or data-dependent control flow).") from exc
        finally:
            model.train(was_training)
    return FakeRun(tracker.log, state.param_bytes, state.buffer_bytes, sum(storages.values()),
                   source, grads, forward_end, bounds.notes() if bounds is not None else ())


def _forward_backward(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                      tracker: LiveStorages, autocast: torch.dtype | None,
                      params: dict[int, nn.Parameter]) -> tuple[int, str, frozenset[int]]:
    """Forward, loss and backward, tracked: the tick the forward ended at, where the loss
    came from and the ``id`` of each original parameter that got a gradient (gradients
    and backward temporaries categorised, then dropped)."""
    cast = (torch.autocast("cpu", dtype=autocast) if autocast is not None
            else contextlib.nullcontext())
    with cast:
        output = model(*args, **kwargs)
        loss, source = pick_loss(output)
    del output
    forward_end = tracker.log.ticks
    tracker.phase = "backward"
    loss.backward()  # type: ignore[no-untyped-call]
    del loss
    grads = frozenset(k for k, p in params.items() if p.grad is not None)
    for p in params.values():
        index = tracker.storage_index(p.grad) if p.grad is not None else None
        if index is not None:
            tracker.log.records[index].category = "grads"
    for rec in tracker.log.records:
        if rec.phase == "backward" and rec.category != "grads":
            rec.category = "temporaries"
    for p in params.values():
        p.grad = None
    return forward_end, source, grads

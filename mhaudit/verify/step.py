"""One steady-state training step under torch's MemTracker: the peer the training audit meets."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from mhaudit.fake.live import tensors_in
from mhaudit.phases.fakestep import PRECISIONS, FusedAttention, pick_loss
from mhaudit.phases.optimizer_step import OPTIMIZERS
from mhaudit.phases.selective import ScoreRecompute
from mhaudit.trace.flex import eager_flex


@contextlib.contextmanager
def _no_global_module_hooks() -> Iterator[None]:
    """Global module forward hooks off: flex_attention's eager backward calls its score_mod
    gradient, a GraphModule, on vmapped tensors, which a tracker's hooks cannot read (and
    which is no module of the model)."""
    from torch.nn.modules import module

    hooks = (module._global_forward_pre_hooks, module._global_forward_hooks)
    saved = [dict(d) for d in hooks]
    for d in hooks:
        d.clear()
    try:
        yield
    finally:
        for d, kept in zip(hooks, saved, strict=True):
            d.update(kept)


@functools.cache
def _hop_tracker() -> type:
    """torch's MemTracker, higher-order ops (flex_attention and its backward) tracked as
    one op each: their outputs are counted, not the pieces their eager CPU form runs (the
    dense score matrices, which a fused kernel never holds). MemTracker refuses them."""
    from torch.distributed._tools.mem_tracker import MemTracker

    class HopMemTracker(MemTracker):  # type: ignore[misc,no-untyped-call]
        supports_higher_order_operators = True

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            dispatch = super().__torch_dispatch__
            if not isinstance(func, torch._ops.HigherOrderOperator):
                return dispatch(func, types, args, kwargs)  # type: ignore[no-untyped-call]
            with _no_global_module_hooks():
                return dispatch(func, types, args, kwargs)  # type: ignore[no-untyped-call]

    return HopMemTracker


def memory_tracker() -> Any:
    """A MemTracker that also tracks higher-order ops (see :func:`_hop_tracker`)."""
    return _hop_tracker()()


def _fused(forward: Any) -> Any:
    """``forward`` with SDPA as the target's fused kernel runs it (a recomputation in the
    backward does not see the forward's function modes)."""

    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        with FusedAttention():
            return forward(*args, **kwargs)

    return run


@contextlib.contextmanager
def checkpointed(model: nn.Module, layers: Sequence[nn.Module], framework: bool,
                 fused: bool = False, policy: ScoreRecompute | None = None) -> Iterator[None]:
    """``layers`` recomputed in the backward (torch.utils.checkpoint, non-reentrant; with
    ``fused``, SDPA recomputed as the fused kernel; with ``policy``, only the ops it marks),
    or, with ``framework``, the model's own ``gradient_checkpointing_enable()``
    (transformers, which also turns the KV cache off in training); put back afterwards."""
    select: dict[str, Any] = {} if policy is None else {"context_fn": policy.contexts}
    enabled = framework and not getattr(model, "is_gradient_checkpointing", False)
    if enabled:
        model.gradient_checkpointing_enable(  # type: ignore[operator]
            gradient_checkpointing_kwargs={"use_reentrant": False})
    for layer in layers:
        forward = _fused(layer.forward) if fused else layer.forward
        layer.forward = functools.partial(  # type: ignore[method-assign]
            checkpoint, forward, use_reentrant=False, preserve_rng_state=False, **select)
    try:
        yield
    finally:
        for layer in layers:
            vars(layer).pop("forward", None)
        if enabled:
            model.gradient_checkpointing_disable()  # type: ignore[operator]


def memtracker_step(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any], *,
                    optimizer: str = "adamw", precision: str = "fp32",
                    checkpoint_layers: Sequence[nn.Module] = (),
                    framework_checkpointing: bool = False,
                    fused_attention: bool = False,
                    policy: ScoreRecompute | None = None) -> dict[str, int]:
    """MemTracker's peak of one steady-state step of ``model``, by category and ``Total``.

    The step runs on the tensors the model and inputs hold (real CPU ones, or fake ones
    under a FakeTensorMode the caller has entered), with its parameters already at the
    precision's weight dtype: forward (under bf16 autocast for ``bf16-mixed``), backward
    from the loss the audit picks, the optimizer update (torch.optim, foreach, as the
    audit builds it) and ``zero_grad``. A first step makes the optimizer states; the
    second is tracked. ``policy`` checkpoints ``checkpoint_layers`` selectively (torch's
    selective activation checkpointing). ``fused_attention`` sets SDPA's dropout to 0, so
    that the CPU runs its flash kernel, which saves what the target's fused kernels save
    (recomputed layers too; with framework checkpointing the recomputation does not see
    it).
    """
    autocast = PRECISIONS[precision][1]
    build = OPTIMIZERS[optimizer]
    was_training = model.training
    model.train()
    opt = build(list(model.parameters())) if build is not None else None

    def step() -> None:
        cast = (torch.autocast("cpu", dtype=autocast) if autocast is not None
                else contextlib.nullcontext())
        fused = FusedAttention() if fused_attention else contextlib.nullcontext()
        with fused:
            with cast:
                loss, _ = pick_loss(model(*args, **kwargs))
            loss.backward()  # type: ignore[no-untyped-call]
            del loss
            if opt is not None:
                opt.step()
                opt.zero_grad()
            else:
                model.zero_grad(set_to_none=True)

    try:
        with checkpointed(model, checkpoint_layers, framework_checkpointing, fused_attention,
                          policy), eager_flex():
            step()
            tracker = memory_tracker()
            tracker.track_external(model, *([opt] if opt is not None else []),
                                   *tensors_in((args, dict(kwargs))))
            with tracker:
                step()
    finally:
        model.train(was_training)
    (device,) = tracker.get_tracker_snapshot("peak").values()
    return {str(getattr(k, "name", k)): int(v) for k, v in device.items()}

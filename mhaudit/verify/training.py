"""The training step's peak checked against MemTracker on one real step of CPU copies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from mhaudit.data import Agreement, Layout, TrainingCost, Unchecked
from mhaudit.phases.fakestep import PRECISIONS, without_cache
from mhaudit.phases.selective import ScoreRecompute
from mhaudit.phases.training import recomputed_layers
from mhaudit.verify.limits import over_limits
from mhaudit.verify.real import real_inputs, real_state
from mhaudit.verify.step import memtracker_step

STEP_TOLERANCE = 0.05
"""The step's peak: both count live tensor bytes without allocator rounding, and on the
models the tests check (GPT-2, Llama, BERT, T5, NeoX, MoE; AdamW, SGD, bf16-mixed,
checkpointing) the audit is within 2% of MemTracker; 5% leaves room for kernels whose
saved tensors differ on a real CPU run from the fake one the audit walks, while an
error in what a layer keeps (its scores, a cache appended twice) is well beyond it."""
STEP_LIMIT_BYTES = 4 * 2**30
"""Largest step peak a real CPU step may allocate (also at most half the free memory)."""
STEP_LIMIT_FLOPS = 5 * 10**11
"""Largest forward + backward a real CPU step may compute (two steps run: about a minute
on a few CPU cores)."""

FIGURE = "training step peak bytes"


def too_big(training: TrainingCost) -> str | None:
    """Why a real CPU step of this size is not run; None when it fits the limits."""
    return over_limits(training.peak_bytes + training.host_state_bytes, training.flops,
                       STEP_LIMIT_FLOPS, "a real CPU step (run twice)", STEP_LIMIT_BYTES)


def training_check(training: TrainingCost, model: nn.Module, args: tuple[Any, ...],
                   kwargs: Mapping[str, Any], layouts: Sequence[Layout] = ()
                   ) -> Agreement | Unchecked:
    """The report's training peak beside MemTracker's on one real steady-state step of
    CPU copies of ``model`` and its inputs, with the report's optimizer, precision,
    checkpointing and attention kernel; ``selective`` recomputes the score-shaped ops of
    ``layouts`` (the blocks'), and runs without checkpointing where there are none."""
    reason = too_big(training)
    if reason is not None:
        return Unchecked(FIGURE, reason)
    dtype = PRECISIONS[training.precision][0]
    layers: list[nn.Module] = []
    framework = False
    fused = training.attention_kernel not in (None, "math")
    policy = ScoreRecompute(layouts) if training.checkpointing == "selective" else None
    plain = real_inputs(args, dtype), real_inputs(dict(kwargs), dtype)
    if training.checkpointing != "none":
        # the model's own checkpointing where it has it; each repeated layer under
        # torch.utils.checkpoint otherwise, and where SDPA must recompute as a fused kernel
        framework = policy is None and not fused \
            and hasattr(model, "gradient_checkpointing_enable") \
            and bool(getattr(model, "supports_gradient_checkpointing", False))
        layers = [] if framework else recomputed_layers(model)
        kwargs = without_cache(model, dict(kwargs))
    with real_state(model, dtype) as invented:
        inputs = real_inputs(args, dtype), real_inputs(dict(kwargs), dtype)
        options: dict[str, Any] = {"optimizer": training.optimizer,
                                   "precision": training.precision, "fused_attention": fused}
        tracked = memtracker_step(model, *inputs, checkpoint_layers=layers,
                                  framework_checkpointing=framework, policy=policy, **options)
        if policy is not None and not policy.recomputed:  # no scores: the plain step
            tracked = memtracker_step(model, *plain, **options)
    return Agreement(FIGURE, training.peak_bytes + training.host_state_bytes,
                     tracked["Total"], "MemTracker",
                     STEP_TOLERANCE, _how(training, invented, framework, fused))


def _how(training: TrainingCost, invented: bool, framework: bool, fused: bool) -> str:
    """How the reference step ran, in words."""
    values = ("values drawn at random for the meta-built state" if invented
              else "the model's own values")
    how = (f"MemTracker's peak of one real steady-state {training.optimizer} step "
           f"({training.precision}, the states made by a first step) on CPU copies of the "
           f"model and inputs ({values})")
    if training.checkpointing == "layers":
        how += ("; checkpointing by the model's gradient_checkpointing_enable()" if framework
                else "; each repeated layer under torch.utils.checkpoint")
    if training.checkpointing == "selective":
        how += ("; each repeated layer under torch's selective activation checkpointing, "
                "the ops that make or read a block's scores recomputed")
    if fused:
        how += (f"; SDPA at dropout 0, where the CPU runs its flash kernel and keeps what "
                f"the target's {training.attention_kernel} kernel keeps")
    if training.host_state_bytes:
        how += (f"; the report's peak plus the {training.host_state_bytes:,} B of step "
                "counters a CUDA run keeps on the host and a CPU run keeps with the rest")
    return how

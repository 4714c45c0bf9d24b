"""Selective recomputation (Korthikanti et al. 2022): the attention core recomputed, the rest kept.

The paper recomputes only QKᵀ, the softmax, the softmax's dropout and the attention over
V, whose outputs grow with the square of the sequence, and keeps every other activation.
Here that is a policy for torch's selective activation checkpointing
(``torch.utils.checkpoint.checkpoint(..., context_fn=...)``): an op is recomputed when
it makes a score-shaped tensor of a detected block (QKᵀ, its scale, the mask added or
filled in, the softmax and its cast, the dropout and its mask) or when it is a matmul
that reads one (P·V); every other op's output is kept. Score-shaped means the last two
dims are a block's (n_q, n_kv) and the elements its b·h·n_q·n_kv
(:func:`~mhaudit.fake.live.is_scores_of`): read from the layouts, not from names. Where
d_k = n_kv, views of Q, K and V have that shape too and are recomputed with the core.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.utils._pytree import tree_leaves
from torch.utils.checkpoint import (
    CheckpointPolicy,
    SelectiveCheckpointContext,
    create_selective_checkpoint_contexts,
)

from mhaudit.data import Layout
from mhaudit.fake.live import is_scores_of
from mhaudit.trace.ops import MATMUL_OPS, qualified_name


class ScoreRecompute:
    """The policy: ``MUST_RECOMPUTE`` for the attention core's ops, ``PREFER_SAVE`` for the
    rest. ``recomputed`` counts the forward's ops it marked, so that a step can tell
    whether selective recomputation changed anything (with a fused SDPA kernel, which
    keeps no scores, it marks none)."""

    def __init__(self, layouts: Iterable[Layout]) -> None:
        self.layouts = tuple(layouts)
        self.recomputed = 0

    def is_scores(self, value: Any) -> bool:
        """True for a tensor of a block's score shape."""
        return isinstance(value, torch.Tensor) and any(
            is_scores_of(tuple(value.shape), lay) for lay in self.layouts)

    def is_core(self, op: Any, args: Any, out: Any) -> bool:
        """True for an op that makes a score-shaped tensor, or a matmul that reads one."""
        if any(self.is_scores(t) for t in tree_leaves(out)):
            return True
        name = qualified_name(op).rpartition(".")[2]
        return name in MATMUL_OPS and any(self.is_scores(t) for t in tree_leaves(args))

    def __call__(self, ctx: SelectiveCheckpointContext, op: Any, *args: Any, **kwargs: Any
                 ) -> CheckpointPolicy:
        if self.is_core(op, (args, kwargs), ctx.op_output):
            self.recomputed += 1
            return CheckpointPolicy.MUST_RECOMPUTE
        return CheckpointPolicy.PREFER_SAVE

    def contexts(self) -> tuple[Any, Any]:
        """The forward's and the recomputation's dispatch modes, for ``context_fn``. Cached
        outputs may be written in place after they are cached: on CPU tensors dropout makes
        its mask with ``empty_like`` and fills it with ``bernoulli_`` and ``div_``."""
        modes = create_selective_checkpoint_contexts(  # type: ignore[no-untyped-call]
            self, allow_cache_entry_mutation=True)
        return modes[0], modes[1]


def selective_words(recomputed: int, kernel: str | None) -> str:
    """What ``--checkpointing selective`` did in the step, in words."""
    if recomputed == 0:
        keeps = (f"the target's {kernel} kernel keeps output and log-sum-exp, not the scores"
                 if kernel not in (None, "math") else "no detected block makes scores")
        return ("; checkpointing: selective (Korthikanti et al. 2022) changes nothing here, "
                f"{keeps}: nothing to recompute, the figures are those without checkpointing")
    return ("; checkpointing: selective (Korthikanti et al. 2022), torch's selective "
            f"activation checkpointing on each repeated layer: {recomputed} ops of the "
            "attention core recomputed (those that make a score-shaped tensor, QKᵀ to "
            "dropout, and P·V); every other op's output kept, as torch keeps it, whether "
            "the backward reads it or not")

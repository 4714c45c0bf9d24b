"""What a ``flex_attention`` call computes beyond its shapes: the blocks its mask visits.

torch's ``flex_attention`` is a higher-order op: Q, K and V are its first operands, the
block mask arrives as ``BlockMask.as_tuple()`` (lengths, per-row block counts and
indices, block sizes, the ``mask_mod``) and the ``score_mod`` as a callable. A kernel
that reads the block mask computes only the (query block, key block) tiles it visits,
partial and full. The recorder notes these facts on the op's node
(``meta["flex"]``) while the call's values are at hand.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

FLEX_OP = "flex_attention"
"""``op_name`` of a recorded ``flex_attention`` call (a higher-order op, not aten)."""

SHAPE_POSITIONS = 1024
"""Query and key positions a ``mask_mod`` is read over for its shape (causal, window)."""

MAX_MASK_ELEMENTS = 1 << 26
"""The most (batch, head, query, key) entries a ``mask_mod`` is evaluated over."""

_LENGTHS, _KV_NUM, _FULL_KV_NUM = (0, 1), 2, 4
_BLOCK_Q, _BLOCK_KV, _MASK_MOD = -3, -2, -1


@dataclass(frozen=True)
class FlexFacts:
    """The block mask and score_mod of one ``flex_attention`` call."""

    visited_blocks: int | None
    """(batch, head, query block, key block) tiles the block mask visits, partial and full;
    None when its values could not be read or evaluated."""
    total_blocks: int
    """Every such tile: batch · heads · ⌈n_q / block_q⌉ · ⌈n_kv / block_kv⌉ of the mask."""
    block_q: int
    block_kv: int
    score_mod_ops: int | None
    """Pointwise ops ``score_mod`` runs per score (0 for none); None when it could not run."""
    how: str
    """How ``visited_blocks`` was found: ``read`` (the mask's own counts), ``evaluated``
    (its ``mask_mod`` over every position, on CPU) or why it was not."""
    causal: bool = False
    """The ``mask_mod`` keeps no key after its query and every diagonal one (query i sees
    key j only when j ≤ i), over the first :data:`SHAPE_POSITIONS` positions."""
    window: int | None = None
    """For a causal mask, the keys each query sees at most when fewer than it could
    (a sliding window, query i sees keys i − w < j ≤ i); None when unbounded."""

    @property
    def visited_fraction(self) -> float:
        """visited / total tiles (1.0 when unknown: the dense figure)."""
        if self.visited_blocks is None or not self.total_blocks:
            return 1.0
        return min(1.0, self.visited_blocks / self.total_blocks)


def flex_facts(args: tuple[Any, ...]) -> FlexFacts:
    """Facts of a ``flex_attention(q, k, v, score_mod, block_mask, ...)`` call's arguments."""
    query, mask = args[0], args[4]
    visited, total, how = _visited(mask)
    causal, window = _mask_shape(mask)
    return FlexFacts(visited, total, int(mask[_BLOCK_Q]), int(mask[_BLOCK_KV]),
                     _score_mod_ops(args[3], query), how, causal, window)


def visited_fraction(mask: tuple[Any, ...]) -> float:
    """Share of the score tiles a ``BlockMask.as_tuple()`` visits (1.0 when unknown): what
    a forward or backward kernel that reads the block mask computes of the dense work."""
    visited, total, _ = _visited(mask)
    return FlexFacts(visited, total, int(mask[_BLOCK_Q]), int(mask[_BLOCK_KV]), 0,
                     "").visited_fraction


def _visited(mask: tuple[Any, ...]) -> tuple[int | None, int, str]:
    """(visited tiles or None, every tile, how the visited ones were found) of a mask."""
    counts = [t for t in (mask[_KV_NUM], mask[_FULL_KV_NUM]) if isinstance(t, torch.Tensor)]
    dims = tuple(int(s) for s in counts[0].shape) if counts else (1, 1, 1)
    n_kv = int(mask[_LENGTHS[1]])
    kv_blocks = -(-n_kv // int(mask[_BLOCK_KV]))
    total = dims[0] * dims[1] * dims[2] * kv_blocks
    if _no_mask(mask):
        return total, total, "no block mask"
    if counts and all(_real(t) for t in counts):
        return sum(int(t.sum()) for t in counts), total, "read"
    visited, how = _evaluated(mask, dims)
    return visited, total, how


@contextlib.contextmanager
def eager_flex() -> Iterator[None]:
    """Let ``flex_attention`` call its op eagerly, its backward too, on CPU tensors.

    It otherwise wraps the call in ``torch.compile``, which refuses to run under a dispatch
    mode (a recorder, a FLOP counter, a memory tracker); and it refuses CPU inputs that
    need a gradient, though its eager forward and backward (the dense math ones, which
    keep the output and the log-sum-exp, not the scores) run there, and on fake tensors.
    """
    from torch.nn.attention import flex_attention as flex

    before = flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG, flex._validate_device
    flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
    flex._validate_device = _device_check(before[1])
    try:
        yield
    finally:
        flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG, flex._validate_device = before


def _device_check(check: Any) -> Any:
    """torch's device check of flex_attention's inputs, CPU inputs that need a gradient let
    through (the check reads nothing else of them)."""

    def checked(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        if query.device.type != "cpu":
            check(query, key, value)

    return checked


def facts_of(node: fx.Node) -> FlexFacts | None:
    """The facts the recorder noted on a ``flex_attention`` node, if any."""
    facts = node.meta.get("flex")
    return facts if isinstance(facts, FlexFacts) else None


def _no_mask(mask: tuple[Any, ...]) -> bool:
    """The block mask ``flex_attention`` makes when given none (every tile visited)."""
    from torch.nn.attention.flex_attention import noop_mask

    return mask[_MASK_MOD] is noop_mask


def _real(tensor: torch.Tensor) -> bool:
    """A tensor that holds values (not fake, not meta)."""
    from torch._subclasses.fake_tensor import FakeTensor

    return not isinstance(tensor, FakeTensor) and tensor.device.type != "meta"


def _evaluated(mask: tuple[Any, ...], dims: tuple[int, ...]) -> tuple[int | None, str]:
    """Tiles visited by the block mask that ``create_block_mask`` makes from the same
    ``mask_mod`` on CPU, outside every mode (its values are the point)."""
    from torch.nn.attention.flex_attention import create_block_mask

    n_q, n_kv = int(mask[_LENGTHS[0]]), int(mask[_LENGTHS[1]])
    if dims[0] * dims[1] * n_q * n_kv > MAX_MASK_ELEMENTS:
        return None, f"mask_mod not evaluated over more than {MAX_MASK_ELEMENTS} positions"
    try:
        with _disable_current_modes(), torch._C.DisableTorchFunction():
            made = create_block_mask(mask[_MASK_MOD], dims[0], dims[1], n_q, n_kv,
                                     device="cpu",
                                     BLOCK_SIZE=(int(mask[_BLOCK_Q]), int(mask[_BLOCK_KV])))
            parts = (made.kv_num_blocks, made.full_kv_num_blocks)
            return sum(int(t.sum()) for t in parts if t is not None), "evaluated"
    except Exception as exc:  # a mask_mod over values the trace does not hold
        return None, f"mask_mod could not be evaluated ({type(exc).__name__})"


def _mask_shape(mask: tuple[Any, ...]) -> tuple[bool, int | None]:
    """(causal, window) of the ``mask_mod`` over the first positions of batch 0, head 0."""
    from torch.nn.attention.flex_attention import create_mask

    if _no_mask(mask):
        return False, None
    size = min(int(mask[_LENGTHS[0]]), int(mask[_LENGTHS[1]]), SHAPE_POSITIONS)
    with _disable_current_modes(), torch._C.DisableTorchFunction():
        try:
            keep = create_mask(mask[_MASK_MOD], 1, 1, size, size, device="cpu")[0, 0]
        except Exception:  # a mask_mod over values the trace does not hold
            return False, None
        return _causal_window(keep)


def _causal_window(keep: torch.Tensor) -> tuple[bool, int | None]:
    """(causal, window) of a (n, n) boolean mask, real tensors."""
    size = keep.shape[0]
    lower = torch.ones(size, size, dtype=torch.bool).tril()  # (n, n): j ≤ i
    if bool((keep & ~lower).any()) or not bool(keep.diagonal().all()):
        return False, None
    seen = keep.sum(-1)  # (n,) keys each query sees
    widest = int(seen.max())
    band = lower.triu(-(widest - 1))  # (n, n): i − w < j ≤ i
    return True, widest if widest < size and bool((keep == band).all()) else None


class _Pointwise(TorchDispatchMode):  # type: ignore[misc]
    """Counts pointwise ops (the arithmetic a score_mod applies to each score)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        if torch.Tag.pointwise in getattr(func, "tags", ()):
            self.ops += 1
        return func(*args, **(kwargs or {}))


def _score_mod_ops(score_mod: Any, query: torch.Tensor) -> int | None:
    """Pointwise ops per score: ``score_mod`` run once on one score (0 for the identity)."""
    if score_mod is None or getattr(score_mod, "__name__", "") == "_identity":
        return 0
    try:
        # one score, in the mode the call ran in; indices of shape (1,), not 0-d, as a 0-d
        # index into a table is read as a Python int (a value fake tensors do not hold)
        score = query.new_zeros(1)
        index = torch.zeros(1, dtype=torch.int32, device=query.device)
        with _Pointwise() as counter:
            score_mod(score, index, index, index, index)
        return int(counter.ops)
    except Exception:  # a score_mod that reads what one score cannot stand for
        return None

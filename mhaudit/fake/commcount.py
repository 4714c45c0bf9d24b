"""Collectives as torch runs them: CommDebugMode's counts, with the bytes each rank sends."""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor.debug import CommDebugMode
from torch.utils._pytree import tree_leaves

from mhaudit.data.parallel import CollectiveBytes

_KINDS = (("all_gather", ("all_gather", "allgather")),
          ("reduce_scatter", ("reduce_scatter",)),
          ("all_reduce", ("all_reduce", "allreduce")),
          ("all_to_all", ("all_to_all", "alltoall")),
          ("send_recv", ("send", "recv")))


def collective_kind(op_name: str) -> str | None:
    """The :class:`CollectiveBytes` field of a collective op's name; None for other ops."""
    name = op_name.lower()
    return next((kind for kind, marks in _KINDS if any(m in name for m in marks)), None)


def _group_size(args: Any) -> int:
    from torch.distributed import distributed_c10d as c10d

    resolve: Any = c10d._resolve_process_group  # type: ignore[attr-defined]
    for leaf in tree_leaves(args):
        if isinstance(leaf, str):
            try:
                return int(resolve(leaf).size())
            except (RuntimeError, ValueError, KeyError):
                continue
        if isinstance(leaf, torch.ScriptObject):
            return int(c10d.ProcessGroup.unbox(leaf).size())
    return next((leaf for leaf in tree_leaves(args) if isinstance(leaf, int)
                 and not isinstance(leaf, bool) and leaf > 1), 1)


def sent_bytes(kind: str, args: Any) -> int:
    """Bytes one rank sends in one ring collective with these arguments: an all-reduce of
    S bytes 2·(g−1)/g·S, an all-gather or reduce-scatter (g−1)/g of the gathered tensor."""
    tensors = [t for t in tree_leaves(args) if isinstance(t, torch.Tensor)]
    if not tensors:
        return 0
    g = _group_size(args)
    size = max(t.numel() * t.element_size() for t in tensors)
    if kind == "all_gather" and len(tensors) == 1:
        size *= g
    if kind == "all_reduce":
        return 2 * (g - 1) * size // g
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (g - 1) * size // g
    return size


class CommBytesMode(CommDebugMode):  # type: ignore[no-untyped-call,misc]
    """CommDebugMode that also adds up the bytes each rank sends, by collective."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.sent: dict[str, int] = {}
        self.calls: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        before = sum(self.comm_counts.values())
        out = super().__torch_dispatch__(  # type: ignore[no-untyped-call]
            func, types, args, kwargs)
        if out is not NotImplemented and sum(self.comm_counts.values()) > before:
            kind = collective_kind(str(func._overloadpacket)) or "all_reduce"
            self.sent[kind] = self.sent.get(kind, 0) + sent_bytes(kind, args)
            self.calls[kind] = self.calls.get(kind, 0) + 1
        return out

    def collective_bytes(self) -> CollectiveBytes:
        """Bytes each rank sent, by collective."""
        return CollectiveBytes(**self.sent)

    def collective_calls(self) -> CollectiveBytes:
        """Calls by collective (their sum is CommDebugMode's total count)."""
        return CollectiveBytes(**self.calls)

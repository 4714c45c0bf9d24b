"""Bounded walks over an fx graph: through first arguments, or depth first with a visit cap."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Generic, TypeVar

from torch import fx

from mhaudit.trace.ops import op_name

Item = TypeVar("Item", bound=Hashable)


def chain(
    node: fx.Node, through: frozenset[str], limit: int,
    step: Callable[[fx.Node, fx.Node], bool] | None = None,
) -> list[fx.Node]:
    """``node``, then each node reached from it by following first arguments.

    A step leaves a node whose op is in ``through`` for its first argument, when that
    is a node and ``step(node, argument)`` (if given) accepts it; the walk takes at most
    ``limit`` steps. The last node of the list is where it stopped.
    """
    path = [node]
    for _ in range(limit):
        current = path[-1]
        if op_name(current) not in through or not current.args:
            break
        source = current.args[0]
        if not isinstance(source, fx.Node) or (step is not None and not step(current, source)):
            break
        path.append(source)
    return path


class Walk(Generic[Item]):
    """A depth-first walk that visits each node once and at most ``limit`` nodes.

    Iterating pops the item pushed last; the caller pushes what to visit next. Items
    are nodes, or tuples that carry a node (``key`` picks it) with what the caller
    tracks along the way (the path so far). ``cut`` turns True when the cap ends the
    walk with nodes left to visit.
    """

    def __init__(self, starts: Iterable[Item], limit: int,
                 key: Callable[[Item], Hashable] | None = None) -> None:
        self._stack = list(starts)
        self._key = key
        self.limit = limit
        self.seen: set[Hashable] = set()
        """Nodes visited so far."""
        self.cut = False

    def __iter__(self) -> Iterator[Item]:
        while self._stack:
            item = self._stack.pop()
            node = item if self._key is None else self._key(item)
            if node in self.seen:
                continue
            if len(self.seen) >= self.limit:
                self.cut = True
                return
            self.seen.add(node)
            yield item

    def push(self, items: Iterable[Item]) -> None:
        """Visit ``items`` next, the last of them first."""
        self._stack.extend(items)

"""Sizes read from a config and the configs nested in it, by attribute name."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any


def is_size(value: Any) -> bool:
    """A positive int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _is_config(value: Any) -> bool:
    return hasattr(value, "to_dict") and hasattr(value, "model_type")


def read(config: Any, name: str) -> Any:
    """``config.<name>``, or None where the config lacks it or cannot compute it."""
    try:
        return getattr(config, name, None)
    except Exception:  # a config property that raises
        return None


def subconfigs(config: Any, prefer: Sequence[str] = ()) -> Iterator[Any]:
    """The configs nested in ``config`` (``audio_config``, ``encoder``, ...), breadth
    first; those whose attribute name holds a word of ``prefer`` come first."""
    seen: set[int] = {id(config)}
    level = [config]
    while level:
        found: list[tuple[int, Any]] = []
        for parent in level:
            for key in sorted(vars(parent)) if hasattr(parent, "__dict__") else ():
                value = read(parent, key)
                if _is_config(value) and id(value) not in seen:
                    seen.add(id(value))
                    rank = next((i for i, w in enumerate(prefer) if w in key), len(prefer))
                    found.append((rank, value))
        found.sort(key=lambda pair: pair[0])
        yield from (value for _, value in found)
        level = [value for _, value in found]


def modality_config(config: Any, words: Sequence[str]) -> Any:
    """The config named with one of ``words`` (``audio_config`` for ``("audio",)``),
    nearest the root first (an encoder's own ``vision_config`` too), else ``config``."""
    level = [config]
    seen: set[int] = set()
    while level:
        for node in level:
            for key in (f"{word}_config" for word in words):
                value = read(node, key)
                if _is_config(value):
                    return value
        seen.update(id(node) for node in level)
        level = [child for node in level for child in _children(node) if id(child) not in seen]
    return config


def _children(config: Any) -> list[Any]:
    names = sorted(vars(config)) if hasattr(config, "__dict__") else []
    return [v for v in (read(config, k) for k in names) if _is_config(v)]


def find_size(config: Any, names: Sequence[str], prefer: Sequence[str] = ()) -> int | None:
    """The first positive int among ``names`` on ``config``, then on its nested configs."""
    for node in (config, *subconfigs(config, prefer)):
        for name in names:
            value = read(node, name)
            if is_size(value):
                return int(value)
    return None


def find_node(config: Any, names: Sequence[str], prefer: Sequence[str] = ()) -> Any:
    """The config or nested config that holds a positive int under one of ``names``."""
    for node in (config, *subconfigs(config, prefer)):
        if any(is_size(read(node, name)) for name in names):
            return node
    return None

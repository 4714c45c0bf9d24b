"""Stage progress: an audit names each stage it enters to a listener; silent without one."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Literal

Stage = Literal["loading", "building", "tracing", "detecting", "costing", "phases",
                "measuring"]
"""The stages of one audit (``measuring`` only on a real device or with ``verify``,
``phases`` only with ``train`` or ``decode``)."""

STAGES: tuple[Stage, ...] = ("loading", "building", "tracing", "detecting", "costing",
                             "phases", "measuring")

OnStage = Callable[[str], None]
"""Called with a stage's name as the audit enters it."""

_listener: ContextVar[OnStage | None] = ContextVar("mhaudit_on_stage", default=None)


def stage(name: Stage) -> None:
    """Tell the listener of the running audit that ``name`` begins; nothing without one."""
    listener = _listener.get()
    if listener is not None:
        listener(name)


@contextlib.contextmanager
def listening(listener: OnStage | None) -> Iterator[None]:
    """Send the stages entered in the block to ``listener`` (None: to nobody)."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)

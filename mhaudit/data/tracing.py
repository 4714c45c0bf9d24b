"""How the trace answered a data-dependent op: the rung, a real forward, or stated bounds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RealForward:
    """Whether a small real forward on CPU fixed the data-dependent values, and why."""

    ran: bool
    reason: str
    """Why it ran (the model's own weights, a CPU build that fits) or why it did not."""
    weights_bytes: int
    """Parameter and buffer bytes of the model the forward needs."""
    limit_bytes: int
    """The most weight bytes a real forward is allowed (see :mod:`mhaudit.trace.real`)."""


@dataclass(frozen=True)
class DataDependence:
    """What the tracer did when the first rungs could not hold a value read from the data.

    Present on the report only when a later rung had to answer.
    """

    rung: str
    """The rung that answered (``dispatch-real`` or ``dispatch-fake``)."""
    causes: tuple[tuple[str, str], ...]
    """Each earlier rung and the first line of why it gave up."""
    real_forward: RealForward | None = None
    """The real-forward decision; None when it was never considered."""
    bounds: tuple[str, ...] = ()
    """Data-dependent values the answer read at a stated bound instead of their value."""

    @property
    def exact(self) -> bool:
        """Whether every figure holds at the given size (no value was bounded)."""
        return not self.bounds

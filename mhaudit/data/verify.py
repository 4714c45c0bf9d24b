"""``--verify``: the audit's figures beside torch's own counters on the same model."""

from __future__ import annotations

from dataclasses import dataclass

from mhaudit.data.blocks import DeclaredMismatch


@dataclass(frozen=True)
class Agreement:
    """One figure as the audit has it and as a torch counter measures it."""

    figure: str
    """What is compared, e.g. ``matmul + conv flops``."""
    ours: int
    """The audit's figure."""
    reference: int
    """The counter's figure, taken as ``how`` says."""
    counter: str
    """Who measured ``reference``: ``FlopCounterMode``, ``MemTracker``, or ``DynamicCache``
    (the KV cache a real forward returned)."""
    tolerance: float
    """Largest relative difference that still agrees (0 for exact)."""
    how: str = ""
    """How the reference was taken, in words."""

    @property
    def difference(self) -> float:
        """(ours − reference) / reference; 0 when both are 0."""
        if self.reference == 0:
            return 0.0 if self.ours == 0 else float("inf")
        return (self.ours - self.reference) / self.reference

    @property
    def agrees(self) -> bool:
        """Within ``tolerance``."""
        return abs(self.difference) <= self.tolerance


@dataclass(frozen=True)
class Unchecked:
    """A figure ``--verify`` did not check, and why."""

    figure: str
    """What would have been compared, e.g. ``training step peak bytes``."""
    reason: str
    """Why it was not, in words (the size limit it is over, with both numbers)."""


@dataclass(frozen=True)
class Verification:
    """Every figure checked on the user's own model (a real CPU forward and training step
    of copies of it where they fit; fake tensors for FLOPs), and those left unchecked with
    the reason."""

    rows: tuple[Agreement, ...]
    unchecked: tuple[Unchecked, ...] = ()
    declared_mismatch: tuple[DeclaredMismatch, ...] = ()
    """The module attributes that declare a layout the detected block does not have
    (``coverage.declared_mismatch``): the code's own word against the audit's; any one
    fails the verification."""

    @property
    def agrees(self) -> bool:
        """Every row within its tolerance, and no declared layout the blocks contradict."""
        return all(row.agrees for row in self.rows) and not self.declared_mismatch

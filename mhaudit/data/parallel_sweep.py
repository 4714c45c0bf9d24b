"""``whatif --gpus``: the plans of a GPU count, costed per device, ranked, the best marked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mhaudit.data.parallel import ParallelCost, parallel_to_dict


@dataclass(frozen=True)
class PlanEntry:
    """One plan of the search: its cost, and whether it is offered."""

    cost: ParallelCost
    """The phase under the plan, per device."""
    checkpointing: str = "none"
    """Activation checkpointing the plan was costed with: none, selective or full."""
    best: bool = False
    """True for the one plan that fits and has the shortest step."""
    dropped: str | None = None
    """Why the plan is not offered (a rule's error, a peak over the GPU); None if it is."""


@dataclass(frozen=True)
class PhaseSweep:
    """One phase (``train`` or ``decode``) under each plan of the search: the plans offered
    by step time, the best first, then the dropped ones."""

    phase: str
    """``train`` or ``decode``."""
    entries: tuple[PlanEntry, ...]
    """One per plan (and checkpointing choice)."""

    @property
    def costs(self) -> tuple[ParallelCost, ...]:
        """The entries' costs, in the same order."""
        return tuple(e.cost for e in self.entries)

    @property
    def best(self) -> PlanEntry | None:
        """The plan marked best; None when no plan fits."""
        return next((e for e in self.entries if e.best), None)


@dataclass(frozen=True)
class ParallelSweep:
    """The plans of ``gpus`` GPUs for one model and what each costs a device."""

    source: str
    """The model audited."""
    gpus: int
    """GPUs each plan uses."""
    gpu: str
    """Target GPU profile name (memory, peak, links)."""
    memory_bytes: int
    """Memory of one GPU of the profile: what ``fits`` compares the peak with."""
    phases: tuple[PhaseSweep, ...]
    """The training step and/or the decode step."""


def entry_to_dict(entry: PlanEntry) -> dict[str, Any]:
    """One plan of the sweep: the ``parallel`` shape of a report phase, with
    ``checkpointing``, ``best`` and ``dropped``."""
    return {**parallel_to_dict(entry.cost), "checkpointing": entry.checkpointing,
            "best": entry.best, "dropped": entry.dropped}


def sweep_to_dict(sweep: ParallelSweep) -> dict[str, Any]:
    """The JSON of ``whatif --gpus``: each phase's plans, best first."""
    return {
        "source": sweep.source,
        "gpus": sweep.gpus,
        "gpu": sweep.gpu,
        "memory_bytes": sweep.memory_bytes,
        "phases": {p.phase: [entry_to_dict(e) for e in p.entries] for p in sweep.phases},
    }

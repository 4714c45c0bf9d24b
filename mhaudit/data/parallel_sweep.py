"""``whatif --gpus``: every tensor × fully-sharded split of a GPU count, costed per device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mhaudit.data.parallel import ParallelCost, parallel_to_dict


@dataclass(frozen=True)
class PhaseSweep:
    """One phase (``train`` or ``decode``) under each plan of the sweep, smallest t first."""

    phase: str
    """``train`` or ``decode``."""
    costs: tuple[ParallelCost, ...]
    """One per plan."""


@dataclass(frozen=True)
class ParallelSweep:
    """The plans of ``gpus`` GPUs for one model and what each costs a device."""

    source: str
    """The model audited."""
    gpus: int
    """GPUs the plans split: tp · fsdp of each."""
    gpu: str
    """Target GPU profile name (memory, peak, links)."""
    memory_bytes: int
    """Memory of one GPU of the profile: what ``fits`` compares the peak with."""
    phases: tuple[PhaseSweep, ...]
    """The training step and/or the decode step."""


def sweep_to_dict(sweep: ParallelSweep) -> dict[str, Any]:
    """The JSON of ``whatif --gpus``: each phase's plans in the ``parallel`` shape of a
    report phase."""
    return {
        "source": sweep.source,
        "gpus": sweep.gpus,
        "gpu": sweep.gpu,
        "memory_bytes": sweep.memory_bytes,
        "phases": {p.phase: [parallel_to_dict(c) for c in p.costs] for p in sweep.phases},
    }

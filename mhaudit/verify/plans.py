"""A training plan's per-GPU figures as the analytic model gives them, beside torch's run.

``whatif --gpus`` and every plan torch cannot run are costed by the analytic model
(:mod:`mhaudit.parallel.analytic`). Where the report's plan ran on torch's fake process
group (FSDP2, HSDP and FSDP2's replicate, DTensor TP and sequence parallelism, measured by
FSDPMemTracker or MemTracker and CommDebugMode), the same plan is costed again by the
analytic model alone and set beside what torch measured. Each figure names the plan in the
``--parallel`` grammar, every axis it uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from mhaudit.cost.devices import DEFAULT_GPU, get_profile
from mhaudit.data import Agreement, Report, Unchecked
from mhaudit.data.parallel import ParallelCost

PLAN_TOLERANCE = 0.0
"""States and collective bytes: the same shards and the same ring sends in both: exact."""


def _states(cost: ParallelCost) -> int:
    held = cost.per_device_bytes
    return held.params + held.grads + held.optimizer_states


def plan_checks(report: Report, model: nn.Module, args: tuple[Any, ...],
                kwargs: Mapping[str, Any]) -> list[Agreement | Unchecked]:
    """The training plan's per-GPU states and collective bytes, analytic beside torch's;
    a reason where the plan was not run by torch (nothing to set the analytic model
    beside); nothing without a plan."""
    training = report.training
    measured = training.parallel if training is not None else None
    if training is None or measured is None or measured.plan.world_size == 1:
        return []
    p = measured.plan
    name = p.text()
    if measured.source != "torch.distributed":
        why = next((n for n in measured.notes if n.startswith("analytic model")),
                   "torch did not run the plan")
        return [Unchecked(f"per-GPU plan figures ({name})",
                          f"the analytic model answered, torch did not run it ({why})")]
    from mhaudit.parallel import plan_costs

    analytic = plan_costs(model, args, kwargs, report.blocks, p, get_profile(DEFAULT_GPU),
                          dtype=report.model.dtype, precision=training.precision,
                          optimizer=training.optimizer, training=training, use_torch=False)
    how = ("the analytic model's figure for this plan (what whatif --gpus shows) beside "
           "what torch measured on rank 0 of a fake process group running the plan "
           "(FSDP2/HSDP or replicate, DTensor TP and SP)")
    tracker = "FSDPMemTracker" if p.fsdp * p.dp > 1 else "MemTracker"
    sent, torch_sent = analytic.comm_bytes_per_step, measured.comm_bytes_per_step
    return [
        Agreement(f"per-GPU params + grads + optimizer states ({name})", _states(analytic),
                  _states(measured), tracker, PLAN_TOLERANCE, how),
        Agreement(f"per-GPU collective bytes per step ({name})", sent.total,
                  torch_sent.total, "CommDebugMode", PLAN_TOLERANCE, how),
    ]

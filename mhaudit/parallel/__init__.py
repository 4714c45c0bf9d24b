"""Beyond one GPU: per-device cost of a phase under tensor, sequence, context, fully-sharded
and replicated data, expert and pipeline parallelism, applied by torch.distributed on a
fake process group where it can.

``plan_costs`` is the one entry point (it loads torch on first use, so importing the
package and parsing plans stays cheap); ``parse_plan`` reads the ``--parallel`` grammar;
``sweep_plans`` lists the tp × fsdp splits of a GPU count; ``whatif --gpus`` searches every
axis (:mod:`mhaudit.whatif.plan_search`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mhaudit.data.parallel import ParallelCost, ParallelPlan, parallel_to_dict
from mhaudit.lazy import lazy_attributes
from mhaudit.parallel.plan import as_plan, check_plan, parse_plan, sweep_plans

if TYPE_CHECKING:
    from mhaudit.parallel.costs import plan_costs

__all__ = ["ParallelCost", "ParallelPlan", "as_plan", "check_plan", "parallel_to_dict",
           "parse_plan", "plan_costs", "sweep_plans"]


__getattr__ = lazy_attributes(__name__, {name: "mhaudit.parallel.costs"
                                         for name in ("plan_costs",)})

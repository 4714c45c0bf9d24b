"""Beyond one GPU: per-device cost of a phase under tensor, sequence, fully-sharded data and
pipeline parallelism, applied by torch.distributed on a fake process group where it can.

``plan_costs`` is the one entry point; ``parse_plan`` reads the ``--parallel`` grammar.
"""

from __future__ import annotations

from mhaudit.data.parallel import ParallelCost, ParallelPlan, parallel_to_dict
from mhaudit.parallel.costs import plan_costs
from mhaudit.parallel.plan import check_plan, parse_plan

__all__ = ["ParallelCost", "ParallelPlan", "check_plan", "parallel_to_dict", "parse_plan",
           "plan_costs"]

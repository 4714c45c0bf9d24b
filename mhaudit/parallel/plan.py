"""The ``--parallel`` grammar: ``tp=8,sp,fsdp=8,pp=4,microbatches=8`` to a ParallelPlan,
and its checks."""

from __future__ import annotations

from typing import Any

from mhaudit.data.parallel import PP_SCHEDULES, ParallelPlan
from mhaudit.errors import ConfigError

MAX_DEGREE = 65536
"""Largest degree accepted for any axis: no job spans more GPUs than this."""

_EXAMPLE = ("Write it as e.g. tp=8,sp,fsdp=8,pp=4,microbatches=8 (sp alone switches "
            "sequence parallelism on; also cp=N, dp=N, ep=N, pp_schedule=NAME).")
_DEGREES = ("tp", "fsdp", "pp", "ep", "cp", "dp", "microbatches")
_ALIASES = {"schedule": "pp_schedule", "mb": "microbatches"}


def _degree(key: str, value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= MAX_DEGREE:
        raise ConfigError(f"parallel degree {key}={value!r} is not a whole number in "
                          f"1..{MAX_DEGREE}", _EXAMPLE)
    return int(value)


def parse_plan(text: str) -> ParallelPlan:
    """A plan from ``tp=N[,sp][,cp=N][,fsdp=M][,dp=R][,ep=E][,pp=K][,pp_schedule=S]
    [,microbatches=B]`` (any order, each key once; missing degrees are 1, and with pp > 1
    the micro-batches default to pp, the fewest that fill the pipeline); ConfigError with
    the fix for anything else."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError("the parallel plan is empty", _EXAMPLE)
    values: dict[str, Any] = {}
    for item in text.replace(" ", "").lower().split(","):
        key, eq, value = item.partition("=")
        key = _ALIASES.get(key, key)
        if key in values:
            raise ConfigError(f"parallel plan names {key!r} twice", "Give each axis once.")
        if key == "sp":
            if eq and value not in ("1", "true", "on", "yes"):
                raise ConfigError(f"sp takes no value, not {item!r}", _EXAMPLE)
            values["sp"] = True
        elif key in _DEGREES and eq:
            values[key] = _degree(key, value)
        elif key == "pp_schedule" and eq:
            values[key] = value
        else:
            raise ConfigError(f"unknown parallel axis {item!r}",
                              f"Use tp, sp, cp, fsdp, dp, ep, pp, pp_schedule and "
                              f"microbatches. {_EXAMPLE}")
    values.setdefault("microbatches", values.get("pp", 1))
    plan = ParallelPlan(**values)
    check_plan(plan)
    return plan


def check_plan(plan: Any) -> None:
    """Raise ConfigError for a plan no step can run: wrong types, degrees out of range,
    sequence parallelism without tensor parallelism."""
    if not isinstance(plan, ParallelPlan):
        raise ConfigError(f"parallel must be a ParallelPlan or a plan string, not {plan!r}",
                          _EXAMPLE)
    for key in _DEGREES:
        value = getattr(plan, key)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DEGREE:
            raise ConfigError(f"parallel degree {key} must be a whole number in 1..{MAX_DEGREE}, "
                              f"not {value!r}", _EXAMPLE)
    if not isinstance(plan.sp, bool):
        raise ConfigError(f"parallel sp must be True or False, not {plan.sp!r}", _EXAMPLE)
    if plan.sp and plan.tp == 1:
        raise ConfigError("sequence parallelism splits over the tensor-parallel group, "
                          "and tp is 1", "Add tp=N with N > 1, or drop sp.")
    if plan.pp_schedule not in PP_SCHEDULES:
        raise ConfigError(f"unknown pipeline schedule {plan.pp_schedule!r}",
                          f"Use one of {', '.join(PP_SCHEDULES)}.")
    if plan.data_ranks % plan.ep:
        raise ConfigError(f"ep={plan.ep} does not divide the data-parallel and context ranks "
                          f"(fsdp · dp · cp = {plan.data_ranks}) it carves the expert "
                          "groups from", "Make ep a divisor of fsdp · dp · cp.")
    if plan.world_size > MAX_DEGREE:
        raise ConfigError(f"the plan spans {plan.world_size} GPUs", f"Use at most {MAX_DEGREE}.")


def as_plan(value: ParallelPlan | str) -> ParallelPlan:
    """A checked plan from a plan or its text."""
    plan = parse_plan(value) if isinstance(value, str) else value
    check_plan(plan)
    return plan


def sweep_plans(gpus: int, sp: bool = False, max_tp: int = 64) -> tuple[ParallelPlan, ...]:
    """Every ``tp × fsdp = gpus`` plan with t a power of two up to ``max_tp`` (SP beside
    each t > 1 when ``sp``), smallest t first: what ``whatif --parallel`` compares."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_DEGREE:
        raise ConfigError(f"the GPU count must be a whole number in 1..{MAX_DEGREE}, "
                          f"not {gpus!r}", "Pass e.g. 64.")
    plans = []
    tp = 1
    while tp <= min(gpus, max_tp):
        if gpus % tp == 0:
            plans.append(ParallelPlan(tp=tp, sp=sp and tp > 1, fsdp=gpus // tp))
        tp *= 2
    return tuple(plans)

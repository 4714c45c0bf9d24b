"""The --parallel grammar: good strings become plans, bad ones one-line ConfigErrors with a fix."""

from __future__ import annotations

import pytest

from mhaudit.data import ParallelPlan
from mhaudit.errors import ConfigError
from mhaudit.parallel import check_plan, parse_plan


@pytest.mark.parametrize(("text", "plan"), [
    ("tp=8,sp,fsdp=8,pp=1", ParallelPlan(tp=8, sp=True, fsdp=8, pp=1)),
    ("tp=8", ParallelPlan(tp=8)),
    ("fsdp=64", ParallelPlan(fsdp=64)),
    ("pp=4, tp=2", ParallelPlan(tp=2, pp=4, microbatches=4)),
    ("TP=4,SP=on", ParallelPlan(tp=4, sp=True)),
    ("tp=2,cp=2,fsdp=4,dp=2,ep=4", ParallelPlan(tp=2, cp=2, fsdp=4, dp=2, ep=4)),
    ("pp=4,schedule=gpipe,mb=16", ParallelPlan(pp=4, pp_schedule="gpipe", microbatches=16)),
    ("pp=2,pp_schedule=interleaved-1f1b,microbatches=8",
     ParallelPlan(pp=2, pp_schedule="interleaved-1f1b", microbatches=8)),
])
def test_good_plans(text: str, plan: ParallelPlan) -> None:
    assert parse_plan(text) == plan


def test_world_size_and_text_round_trip() -> None:
    plan = parse_plan("tp=8,sp,fsdp=8,pp=2")
    assert plan.world_size == 8 * 8 * 2
    assert parse_plan(plan.text()) == plan
    # 2 (tp) · 2 (cp) · 4 (fsdp) · 2 (dp) · 3 (pp) = 96; ep borrows from fsdp · dp · cp = 16
    wide = parse_plan("tp=2,cp=2,fsdp=4,dp=2,ep=8,pp=3,pp_schedule=zero-bubble,mb=6")
    assert wide.world_size == 96 and wide.data_ranks == 16
    assert parse_plan(wide.text()) == wide


@pytest.mark.parametrize(("text", "says"), [
    ("", "empty"),
    ("tp=0", "1..65536"),
    ("tp=eight", "whole number"),
    ("tp=8,tp=4", "twice"),
    ("zz=8", "unknown parallel axis"),
    ("pp=2,pp_schedule=looped", "unknown pipeline schedule"),
    ("fsdp=4,ep=3", "does not divide"),
    ("pp=2,microbatches=0", "1..65536"),
    ("tp", "unknown parallel axis"),
    ("sp", "tp is 1"),
    ("tp=2,sp=maybe", "sp takes no value"),
    ("tp=1024,fsdp=1024", "spans"),
])
def test_bad_plans_say_what_and_how(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_plan(text)
    line = info.value.one_line()
    assert says in line and "\n" not in line and info.value.tip


def test_check_plan_refuses_wrong_types() -> None:
    with pytest.raises(ConfigError):
        check_plan("tp=8")
    with pytest.raises(ConfigError):
        check_plan(ParallelPlan(tp=True))  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        check_plan(ParallelPlan(tp=2, sp=1))  # type: ignore[arg-type]


def test_audit_options_take_a_plan_or_its_text() -> None:
    from mhaudit.options import AuditOptions, resolve_options

    opts = resolve_options(None, {"parallel": "tp=8,sp", "train": True})
    assert opts.parallel == ParallelPlan(tp=8, sp=True)
    assert opts.checked_tensor_parallel == 8
    assert AuditOptions(parallel="fsdp=8").checked_tensor_parallel is None
    assert AuditOptions(tensor_parallel=4).checked_tensor_parallel == 4
    assert resolve_options(AuditOptions(parallel=ParallelPlan(fsdp=4), decode=True), {})
    for bad, says in (({"parallel": "tp=0", "train": True}, "1..65536"),
                      ({"parallel": "tp=8"}, "neither is asked"),
                      ({"parallel": "tp=8", "train": True, "tensor_parallel": 4}, "disagrees")):
        with pytest.raises(ConfigError, match=says):
            resolve_options(None, bad)


def test_sweep_plans_covers_every_power_of_two_split() -> None:
    from mhaudit.parallel import sweep_plans

    plans = sweep_plans(64, sp=True, max_tp=8)
    assert [(p.tp, p.fsdp, p.sp) for p in plans] == [
        (1, 64, False), (2, 32, True), (4, 16, True), (8, 8, True)]
    assert all(p.world_size == 64 for p in plans)
    assert [p.tp for p in sweep_plans(12)] == [1, 2, 4]
    with pytest.raises(ConfigError):
        sweep_plans(0)

"""The plan search: which plans it tries, why it drops some, and which it calls best."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mhaudit.data.parallel import (
    CollectiveBytes,
    DeviceBytes,
    ParallelCost,
    ParallelPlan,
)
from mhaudit.data.parallel_sweep import PlanEntry
from mhaudit.whatif.plan_search import ModelShape, candidate_plans, ranked, search

GiB = 1 << 30


def _cost(plan: ParallelPlan, peak: int, step: float, notes: tuple[str, ...] = ()
          ) -> ParallelCost:
    held = DeviceBytes(peak, 0, 0, 0, 0, 0, peak, tensor_peak=peak)
    return ParallelCost(plan, "train", held, CollectiveBytes(), CollectiveBytes(), step,
                        peak <= 80 * GiB and not notes, None, "analytic", notes)


@settings(max_examples=60, deadline=None)
@given(gpus=st.sampled_from([1, 2, 8, 12, 16, 64, 96, 128]),
       layers=st.integers(1, 96), seq=st.sampled_from([128, 2048, 8192, 32768]),
       experts=st.sampled_from([0, 8, 60, 64]), batch=st.sampled_from([1, 3, 8, 64]))
def test_every_candidate_uses_exactly_the_gpus_and_runs(gpus: int, layers: int, seq: int,
                                                         experts: int, batch: int) -> None:
    shape = ModelShape(layers, seq, experts, batch)
    plans = list(candidate_plans(gpus, shape))
    assert plans and len(plans) == len(set(plans))
    for p in plans:
        assert p.world_size == gpus
        assert p.tp <= 8
        assert p.pp <= min(layers, batch) and seq // p.cp >= min(seq, 1024)
        assert p.data_ranks % p.ep == 0 and ((experts == 0 and p.ep == 1) or experts % p.ep == 0)
        # 1F1B: p ≤ m ≤ 4·p, one sequence at least per micro-batch
        assert p.microbatches == (min(4 * p.pp, batch) if p.pp > 1 else 1)
        assert p.pp == 1 or p.pp <= p.microbatches <= batch


def test_the_search_covers_every_axis_of_a_large_run() -> None:
    # 64 GPUs, 80 layers, 8,192 tokens, 8 experts: t up to a node (8), cp up to 8 (1,024
    # tokens per rank), pp, HSDP and DDP beside FSDP, ep up to the data ranks
    plans = list(candidate_plans(64, ModelShape(80, 8192, 8, batch=256)))
    assert {p.tp for p in plans} == {1, 2, 4, 8}
    assert {p.cp for p in plans} == {1, 2, 4, 8}
    assert {p.pp for p in plans} >= {1, 2, 4, 8, 16, 32, 64}
    assert any(p.dp > 1 and p.fsdp > 1 for p in plans)  # HSDP
    assert any(p.dp > 1 and p.fsdp == 1 for p in plans)  # DDP
    assert {p.ep for p in plans} == {1, 2, 4, 8}
    assert ParallelPlan(tp=8, sp=True, fsdp=8) in plans


def test_sp_only_keeps_sequence_parallelism_beside_every_t() -> None:
    plans = list(candidate_plans(16, ModelShape(4, 512), sp_only=True))
    assert all(p.sp for p in plans if p.tp > 1)


def test_ranking_drops_errors_and_misfits_and_marks_the_most_throughput_best() -> None:
    fast_misfit = PlanEntry(_cost(ParallelPlan(tp=8), 90 * GiB, 0.5))
    error = PlanEntry(_cost(ParallelPlan(tp=4, fsdp=2), GiB, 0.4,
                            ("MHA008 error on layers.0.attn: 6 heads over t = 4",)))
    # per sample: 3.0 s / 8 replicas = 0.375 s against 1.0 s / 4 replicas = 0.25 s: the
    # shorter step of fewer replicas wins only by its throughput
    slow = PlanEntry(_cost(ParallelPlan(fsdp=8), 40 * GiB, 3.0))
    quick = PlanEntry(_cost(ParallelPlan(tp=2, fsdp=4), 50 * GiB, 1.0))
    out = ranked([fast_misfit, error, slow, quick], 80 * GiB)
    assert [e.cost.plan for e in out] == [quick.cost.plan, slow.cost.plan,
                                          fast_misfit.cost.plan, error.cost.plan]
    assert [e.best for e in out] == [True, False, False, False]
    assert out[2].dropped is not None and out[2].dropped.startswith("does not fit")
    assert out[3].dropped is not None and out[3].dropped.startswith("MHA008")


def test_nothing_fits_means_no_best() -> None:
    out = ranked([PlanEntry(_cost(ParallelPlan(fsdp=2), 100 * GiB, 1.0))], 80 * GiB)
    assert not any(e.best for e in out) and out[0].dropped


def test_search_costs_each_plan_with_each_checkpointing_choice() -> None:
    seen: list[tuple[ParallelPlan, str]] = []

    def cost_of(plan: ParallelPlan, ckpt: str) -> ParallelCost:
        seen.append((plan, ckpt))
        # less memory with more recomputation, more time; more GPUs per replica, faster
        peak = {"none": 70, "selective": 60, "layers": 30}[ckpt] * GiB // plan.tp
        return _cost(plan, peak, {"none": 1.0, "selective": 1.05, "layers": 1.33}[ckpt]
                     / plan.tp)

    out = search(cost_of, 4, ModelShape(2, 128), 80 * GiB, train=True)
    assert len(seen) == len(out) == 3 * len(list(candidate_plans(4, ModelShape(2, 128))))
    best = [e for e in out if e.best]
    # step / replicas: t = 4 gives 0.25 s over 1 replica, fsdp = 4 gives 1.0 s over 4
    assert len(best) == 1 and best[0].checkpointing == "none"
    assert best[0].cost.step_time_s / (best[0].cost.plan.fsdp * best[0].cost.plan.dp) == 0.25

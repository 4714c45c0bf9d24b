"""Pipeline parallelism: each stage's peak against torch's own Schedule1F1B run under
MemTracker, its sends against the ones torch issues, the schedules' bubbles and in-flight
counts by hand and against torch's action lists, the split, the constraints, the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from click.testing import CliRunner

from mhaudit.api import audit
from mhaudit.cli import main as cli
from mhaudit.cost.devices import get_profile
from mhaudit.cost.stepspec import TRAIN, StepSpec
from mhaudit.data.parallel import CollectiveBytes, ParallelPlan
from mhaudit.errors import ConfigError
from mhaudit.parallel import analytic, plan_costs
from mhaudit.parallel import schedules as sch
from mhaudit.parallel.collectives import StepComm
from mhaudit.parallel.pipeline import balanced_split
from tests.parallel.pipeline_oracle import TinyLlama, run_1f1b
from tests.parallel.test_cli_parallel import MODEL as CLI_MODEL

H100 = get_profile("h100")


def _costed(plan: str, layers: int = 4, batch: int = 8, seq: int = 32, vocab: int = 256,
            phase: str = "train") -> tuple[TinyLlama, torch.Tensor, object]:
    torch.manual_seed(0)
    model = TinyLlama(vocab=vocab, layers=layers)
    ids = torch.zeros(batch, seq, dtype=torch.long)
    blocks = audit(model, (ids, ids)).blocks
    return model, ids, plan_costs(model, (ids, ids), {}, blocks, plan, H100, phase,
                                  precision="fp32")


@pytest.mark.parametrize(("layers", "m", "batch", "seq", "vocab"), [
    (4, 4, 8, 32, 256),   # the case: 1F1B has a steady phase on both stages
    (5, 2, 4, 16, 512),   # m = p: no steady phase; 5 layers split unevenly
])
def test_each_stage_peak_and_sends_match_torch_1f1b(layers: int, m: int, batch: int,
                                                    seq: int, vocab: int) -> None:
    model, ids, cost = _costed(f"pp=2,microbatches={m}", layers, batch, seq, vocab)
    pipe = cost.pipeline
    assert pipe is not None and pipe.schedule == "1f1b" and len(pipe.stages) == 2
    for rank, stage in enumerate(pipe.stages):
        peak, sent = run_1f1b(model, ids, [s.layers for s in pipe.stages], rank, m)
        assert abs(stage.peak_bytes - peak) <= 0.05 * peak, (rank, stage.peak_bytes, peak)
        # each rank sends m micro-batches of (b/m, s, d) fp32 over its one boundary:
        # rank 0 activations forward, rank 1 gradients back
        assert stage.sent_bytes == sent == m * (batch // m) * seq * 64 * 4
    assert cost.comm_bytes_per_step.send_recv == pipe.send_recv_bytes
    assert cost.per_device_bytes.tensors == max(s.peak_bytes for s in pipe.stages)
    assert cost.per_device_bytes.tensors == pipe.stages[pipe.worst_stage].peak_bytes
    assert any(f"rank {pipe.worst_stage}'s" in note for note in cost.notes)
    assert not dist.is_initialized()


def test_bubble_fractions_by_hand() -> None:
    # p = 4, m = 8. GPipe and 1F1B (Narayanan et al. 2021): (p−1)/(m+p−1) = 3/11, which
    # is (p−1)/m = 3/8 of the ideal time: (3/11)/(8/11) = 3/8
    for name in ("gpipe", "1f1b"):
        got = sch.bubble_fraction(name, 4, 8, True)
        assert got == pytest.approx(3 / 11)
        assert got / (1 - got) == pytest.approx(3 / 8)
    # interleaved, v = 2: (p−1)/(v·m) = 3/16 of the ideal, 3/(16+3) of the step
    assert sch.bubble_fraction("interleaved-1f1b", 4, 8, True) == pytest.approx(3 / 19)
    # zero-bubble and DualPipeV with F = W = B/2: a third of 1F1B's bubble time,
    # 3·1/(3·8 + 3) = 3/27 of the step
    for name in ("zero-bubble", "dualpipev"):
        assert sch.bubble_fraction(name, 4, 8, True) == pytest.approx(3 / 27)
    # decode runs forward only: p = 2, m = 2 → 1/3 whatever the schedule
    assert sch.bubble_fraction("interleaved-1f1b", 2, 2, False) == pytest.approx(1 / 3)
    assert sch.bubble_fraction("1f1b", 1, 8, True) == 0.0


def test_in_flight_by_hand() -> None:
    # 1F1B keeps p − s micro-batches on stage s (Narayanan et al.: the first keeps p)
    assert [sch.in_flight_chunks("1f1b", 4, 8, r, True) for r in range(4)] == [4, 3, 2, 1]
    assert [sch.in_flight_chunks("1f1b", 4, 2, r, True) for r in range(4)] == [2, 2, 2, 1]
    assert sch.in_flight_chunks("gpipe", 4, 8, 3, True) == 8


def _torch_alive(name: str, cls_name: str, p: int, m: int, rank: int) -> int:
    """Walk the action list torch's schedule class builds: +1 at F, −1 at a full B or W."""
    from torch.distributed.pipelining import schedules as ts

    rounds = max(1, m // p)
    spec = SimpleNamespace(pp_group_size=p, n_local_stages=2, _n_microbatches=m,
                           number_of_rounds=rounds, microbatches_per_round=m // rounds,
                           num_stages=2 * p, _num_stages=2 * p)
    actions = getattr(ts, cls_name)._calculate_single_rank_operations(spec, rank)
    alive = best = 0
    for action in (a for a in actions if a is not None):
        for step in getattr(action, "sub_actions", None) or (action,):
            alive += {ts.F: 1, ts.B: -1, ts.W: -1}.get(step.computation_type, 0)
            best = max(best, alive)
    return best


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (4, 16), (3, 6), (8, 32), (4, 4)])
def test_interleaved_in_flight_equals_torch_action_list(p: int, m: int) -> None:
    # e.g. p = 2, m = 4, rank 0: warm-up (v−1)·(m per round = 2) + 2·(p−1) = 4, +1 = 5
    for rank in range(p):
        assert sch.in_flight_chunks("interleaved-1f1b", p, m, rank, True) == _torch_alive(
            "interleaved-1f1b", "ScheduleInterleaved1F1B", p, m, rank)


@pytest.mark.parametrize("name", ["zero-bubble", "dualpipev"])
def test_zero_bubble_in_flight_within_dualpipe_readme_bound(name: str) -> None:
    # DualPipe README: ZB1P and DualPipeV keep about p·v (+1) chunks per device
    for p, m in ((2, 4), (4, 8), (4, 16)):
        for rank in range(p):
            assert p <= sch.in_flight_chunks(name, p, m, rank, True) <= p * 2 + 1


def test_split_balances_the_heaviest_chunk() -> None:
    # 30 equal layers on 4 stages: ⌈30/4⌉ = 8 at most, every stage at least one
    sizes = balanced_split([1] * 30, 4)
    assert sum(sizes) == 30 and max(sizes) == 8 and min(sizes) >= 1
    # the embeddings (3) on the first stage: 2 + 3 = 5 and 4 beat 3 + 3 = 6 and 3
    assert balanced_split([1] * 6, 2, first=3) == (2, 4)


def test_uneven_split_is_named() -> None:
    _, _, cost = _costed("pp=2,microbatches=2", layers=5, batch=4, seq=16)
    pipe = cost.pipeline
    assert pipe.uneven
    assert sorted(len(s.layers) for s in pipe.stages) == [2, 3]
    assert any("do not split evenly" in note for note in cost.notes)


def test_schedule_constraints_are_one_line_errors() -> None:
    # torch's ScheduleInterleaved1F1B: rounds = max(1, 5 // 2) = 2 must divide m = 5
    with pytest.raises(ConfigError, match="multiple of its rounds"):
        sch.check_schedule("interleaved-1f1b", 2, 5, 8, 8, True)
    with pytest.raises(ConfigError, match="at least as many micro-batches"):
        sch.check_schedule("1f1b", 4, 2, 8, 8, True)
    with pytest.raises(ConfigError, match="needs 8 stages"):
        sch.check_schedule("dualpipev", 4, 8, 6, 8, True)
    with pytest.raises(ConfigError, match="exceeds the batch"):
        _costed("pp=2,microbatches=4", batch=2)
    with pytest.raises(ConfigError) as err:
        _costed("pp=2,pp_schedule=interleaved-1f1b,microbatches=5", batch=10)
    assert "\n" not in str(err.value)


def test_decode_splits_the_batch_and_sends_forward_only() -> None:
    _, _, cost = _costed("pp=2,microbatches=2", phase="decode")
    pipe = cost.pipeline
    # forward only: (p−1)/(m+p−1) = 1/3; rank 0 sends m = 2 micro-batches of
    # (8/2) × 1 token × 64 × 2 B (bf16, decode's dtype) = 512 B each; rank 1 nothing
    assert pipe.bubble_fraction == pytest.approx(1 / 3)
    assert [s.sent_bytes for s in pipe.stages] == [1024, 0]
    assert cost.comm_bytes_per_step.send_recv == 1024
    assert all(s.activations == 0 for s in pipe.stages)
    assert cost.per_device_bytes.kv_cache > 0


def test_bubble_stretches_the_step_time() -> None:
    spec = StepSpec(TRAIN, 4, 4, "adamw", 1, 1, 0, None, int(989e12))
    comm = StepComm(CollectiveBytes(), CollectiveBytes(), 0, 0, 0)
    held = analytic.device_bytes(analytic.StateBytes(0, 0, 0, 0), 0, 0)
    plan = ParallelPlan(pp=2, microbatches=4)
    # 989 TFLOP on an H100 (989 TFLOP/s) is 1 s; half per stage, ÷ (1 − 1/5) = 0.625 s
    got = analytic.step_time_s(spec, comm, held, plan, H100, bubble=0.2)
    assert got == pytest.approx(0.5 / 0.8)


# the CLI tests' two-layer model, four layers deep and four sequences wide
MODEL = CLI_MODEL.replace("range(2)", "range(4)").replace("torch.zeros(2, 16, 64)",
                                                          "torch.zeros(4, 16, 64)")
assert "range(4)" in MODEL and "zeros(4, 16, 64)" in MODEL


def test_cli_report_carries_the_pipeline(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    done = CliRunner().invoke(cli, ["report", str(path), "--train", "--parallel",
                                    "tp=2,pp=2,microbatches=4", "-f", "json"])
    assert done.exit_code == 0, done.output
    section = json.loads(done.stdout)["training"]["parallel"]
    pipe = section["pipeline"]
    # p = 2, m = 4: (p−1)/(m+p−1) = 1/5
    assert pipe["bubble_fraction"] == pytest.approx(1 / 5)
    assert [len(s["layers"]) for s in pipe["stages"]] == [2, 2]
    assert all(s["peak_bytes"] > 0 for s in pipe["stages"])
    tensors = section["per_device_bytes"]["tensor_peak"]
    assert tensors == max(s["peak_bytes"] for s in pipe["stages"])
    # 4 micro-batches of (1, 16, 64) at 4 B (fp32 default) each way on one boundary
    assert section["comm_bytes_per_step"]["send_recv"] == pipe["send_recv_bytes"] == 4 * 4096
    table = CliRunner().invoke(cli, ["report", str(path), "--train", "--parallel",
                                     "tp=2,pp=2,microbatches=4", "--wide"])
    assert table.exit_code == 0, table.output
    assert "on stage 0 of 2 (2 layers; 1f1b, 4 micro-batches, bubble 20.0%)" in table.stdout


def test_tied_embeddings_are_held_on_the_first_and_the_last_stage() -> None:
    _, _, untied = _costed("pp=2,microbatches=4")
    torch.manual_seed(0)
    model = TinyLlama()
    model.head.weight = model.embed.weight  # one (256, 64) matrix, listed once
    ids = torch.zeros(8, 32, dtype=torch.long)
    blocks = audit(model, (ids, ids)).blocks
    tied = plan_costs(model, (ids, ids), {}, blocks, "pp=2,microbatches=4", H100,
                      precision="fp32")
    assert tied.pipeline.tied_parameters == ("embed.weight",)
    assert any("tied embeddings (embed.weight)" in note for note in tied.notes)
    # each stage keeps its own copy, gradient and states: the same bytes as untied
    assert [s.peak_bytes for s in tied.pipeline.stages] == [
        s.peak_bytes for s in untied.pipeline.stages]


def test_without_a_forward_the_root_splits_by_registration_order() -> None:
    from mhaudit.parallel.unitprofile import static_profile

    model = TinyLlama()
    model.head.weight = model.embed.weight
    got = static_profile(model, [f"layers.{i}" for i in range(4)] + [""], "no forward")
    # embed is registered before layers.0, norm and head after layers.3
    assert got.first_params == {"embed.weight"}
    assert got.last_params == {"embed.weight", "norm.weight"}
    assert got.saved_bytes is None


def test_sends_per_rank_by_hand() -> None:
    a, m = 100, 4
    # 1F1B, p = 3: the middle rank sends m activations forward and m gradients back
    assert sch.rank_sends("1f1b", 3, m, a, True) == (m * a, 2 * m * a, m * a)
    # interleaved, p = 2, v = 2: stages 0..3 on ranks 0, 1, 0, 1; rank 0 sends forward
    # over 0→1 and 2→3 and back over 2→1: 3·m·a; rank 1 likewise 1→2, 1→0, 3→2
    assert sch.rank_sends("interleaved-1f1b", 2, m, a, True) == (3 * m * a, 3 * m * a)
    # DualPipeV, p = 2: stages 0..3 on ranks 0, 1, 1, 0; the turn 1→2 stays on rank 1
    assert sch.rank_sends("dualpipev", 2, m, a, True) == (2 * m * a, 2 * m * a)
    assert sch.rank_sends("dualpipev", 2, m, a, False) == (m * a, m * a)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 4), (4, 8), (8, 32), (3, 5)])
@pytest.mark.parametrize("train", [True, False])
def test_the_drawn_schedule_idles_as_the_closed_form_says(schedule: str, pp: int, m: int,
                                                         train: bool) -> None:
    """The timeline is built op by op from the schedule's dependencies alone; its idle
    share on every rank equals Narayanan et al.'s (p − 1)/(m + p − 1): each rank works
    m·(F + B) of a span (m + p − 1)·(F + B), F = 1 and B = 2 (B = 0 forward-only)."""
    lines = sch.timeline(schedule, pp, m, train)
    assert len(lines) == pp
    work = m * (3.0 if train else 1.0)
    for segments in lines:
        span = sum(d for _, d in segments)
        idle = sum(d for kind, d in segments if kind == "idle")
        assert span - idle == work
        assert idle / span == pytest.approx(sch.bubble_fraction(schedule, pp, m, train))
        assert sum(1 for kind, _ in segments if kind == "forward") == m


def test_1f1b_holds_no_more_than_p_minus_r_forwards_ahead_of_their_backwards() -> None:
    # rank r of 1F1B never has more than min(m, p − r) forwards awaiting their backward
    pp, m = 4, 8
    for rank, segments in enumerate(sch.timeline("1f1b", pp, m, True)):
        ahead = most = 0
        for kind, _ in segments:
            ahead += {"forward": 1, "backward": -1}.get(kind, 0)
            most = max(most, ahead)
        assert most == min(m, pp - rank) == sch.in_flight_chunks("1f1b", pp, m, rank, True)

"""The closed-form parallel model, formula by formula, each against arithmetic done by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fixtures.blocks import make_block

from mhaudit.cost.devices import get_profile
from mhaudit.cost.stepspec import DECODE, TRAIN, StepSpec
from mhaudit.data import DeviceBytes, ParallelPlan
from mhaudit.parallel import analytic
from mhaudit.parallel.collectives import all_reduce_sent, collectives, gather_sent
from mhaudit.parallel.inventory import UnitShard
from mhaudit.parallel.roles import COLWISE, ROWWISE, TpModule
from mhaudit.parallel.shard import fsdp_shard_elements, kv_heads_per_rank, tp_local_shape

TRAIN_SPEC = StepSpec(TRAIN, 4, 4, "adamw", batch=2, tokens=64, context=0,
                      activation_bytes=None, flops=10**12)


def test_fsdp2_pads_dim0_to_a_multiple_of_the_world() -> None:
    # (100, 100) over 8: dim 0 padded to 104, 13 rows of 100 per rank = 1,300
    assert fsdp_shard_elements((100, 100), 8) == 1300
    # (100,) over 8: 13; (64, 3) over 8: 8·3 = 24; a scalar counts as one row
    assert fsdp_shard_elements((100,), 8) == 13
    assert fsdp_shard_elements((64, 3), 8) == 24
    assert fsdp_shard_elements((), 8) == 1


def test_kv_heads_per_rank_replicate_past_h_kv() -> None:
    # h_kv = 8: t = 4 → 2 heads, t = 8 → 1, t = 16 → 1 (two ranks per head), t = 3 → ⌈8/3⌉ = 3
    assert [kv_heads_per_rank(8, t) for t in (1, 4, 8, 16, 3)] == [8, 2, 1, 1, 3]


def test_tp_local_shapes() -> None:
    col = TpModule("q", COLWISE, 512, 512)
    row = TpModule("o", ROWWISE, 512, 512)
    kv = TpModule("k", COLWISE, 512, 8 * 64, kv_heads=8)
    assert tp_local_shape((512, 512), False, col, 8) == (64, 512)  # 512/8 rows
    assert tp_local_shape((512,), True, col, 8) == (64,)
    assert tp_local_shape((512, 512), False, row, 8) == (512, 64)  # 512/8 columns
    assert tp_local_shape((512,), True, row, 8) == (512,)  # row-wise bias replicated
    # K of 8 heads × 64 at t = 16: one whole head (64 rows) per rank, not 512/16 = 32
    assert tp_local_shape((512, 512), False, kv, 16) == (64, 512)
    assert tp_local_shape((512, 512), False, kv, 4) == (128, 512)
    assert tp_local_shape((512, 512), False, None, 8) == (512, 512)


def test_ring_bytes_each_rank_sends() -> None:
    # all-reduce of 800 B over 8: 2·7/8·800 = 1,400; all-gather of 800 B gathered: 7/8·800 = 700
    assert all_reduce_sent(800, 8) == 1400
    assert gather_sent(800, 8) == 700


def test_tp_collectives_without_and_with_sp() -> None:
    mods = [TpModule("q", COLWISE, 256, 256), TpModule("o", ROWWISE, 256, 256)]
    plan = ParallelPlan(tp=8)
    comm = collectives(mods, (), 256, TRAIN_SPEC, plan)
    # one tensor is b·s·d·4 B = 2·64·256·4 = 131,072; q all-reduces its input gradient in the
    # backward, o its output in the forward: 2 calls of 2·7/8·131,072 = 229,376 each
    assert comm.calls.all_reduce == 2 and comm.sent.all_reduce == 2 * 229376
    sp = collectives(mods, (), 256, TRAIN_SPEC, ParallelPlan(tp=8, sp=True))
    # with SP: q gathers forward, scatters backward; o scatters forward, gathers backward;
    # each 7/8·131,072 = 114,688
    assert sp.calls.all_gather == 2 and sp.calls.reduce_scatter == 2
    assert sp.sent.all_gather == sp.sent.reduce_scatter == 2 * 114688
    decode = collectives(mods, (), 256, replace(TRAIN_SPEC, phase=DECODE, tokens=1), plan)
    # decode: only o's forward all-reduce of 2·1·256·4 = 2,048 B: 2·7/8·2,048 = 3,584
    assert decode.calls.all_reduce == 1 and decode.sent.all_reduce == 3584


def test_fsdp_collectives_per_unit() -> None:
    shards = (UnitShard("layers.0", 1000, 8000, 2), UnitShard("", 500, 4000, 1))
    comm = collectives((), shards, 256, TRAIN_SPEC, ParallelPlan(fsdp=8))
    # layer: gathered forward and backward, 7 shards of 1,000·4 B each time = 28,000 ×2;
    # root: forward only, 7·500·4 = 14,000; reduce-scatters: 28,000 + 14,000
    assert comm.calls.all_gather == 3 and comm.sent.all_gather == 2 * 28000 + 14000
    assert comm.calls.reduce_scatter == 2 and comm.sent.reduce_scatter == 28000 + 14000
    assert comm.fsdp_bytes == comm.sent.total and comm.tp_bytes == 0


def test_sharded_states_and_gather_buffers() -> None:
    shards = (UnitShard("layers.0", 1000, 8000, 2), UnitShard("layers.1", 1000, 8000, 2),
              UnitShard("", 500, 4000, 1))
    got = analytic.state_bytes(shards, TRAIN_SPEC, ParallelPlan(fsdp=8))
    # params (1000 + 1000 + 500)·4 = 10,000 B, grads the same, AdamW 2·10,000 + 5 tensors ·
    # 4 B step counters = 20,020; buffers: the root gathered, 4,000·4 = 16,000 B, and the
    # largest layer twice (running and prefetched), 2·8,000·4 = 64,000: 80,000
    assert (got.params, got.grads, got.optimizer_states, got.temporaries) == (
        10000, 10000, 20020, 80000)
    staged = analytic.state_bytes(shards, TRAIN_SPEC, ParallelPlan(fsdp=8, pp=2))
    # two stages: the layers halve (2,000/2), the root stays whole: (1,000 + 500)·4 = 6,000
    assert staged.params == 6000


def test_activations_split_as_korthikanti() -> None:
    block = make_block(heads=8, head_dim=64, seq=128, implementation="eager", dtype="bfloat16")
    spec = replace(TRAIN_SPEC, compute_bytes=2, batch=1, tokens=128)
    # s·b·h = 128·1·512 = 65,536; scores 5·a·s²·b = 5·8·128² = 655,360 (eager keeps them)
    # split = 24·65,536 + 655,360 = 2,228,224; whole = 10·65,536 = 655,360 (16-bit bytes)
    split, whole = analytic.korthikanti_bytes(block, 1, 2)
    assert (split, whole) == (2228224, 655360)
    tp = analytic.activation_bytes([block], spec, ParallelPlan(tp=8))
    sp = analytic.activation_bytes([block], spec, ParallelPlan(tp=8, sp=True))
    assert tp == 2228224 // 8 + 655360  # 933,888
    assert sp == (2228224 + 655360) // 8  # 360,448
    # a measured single-device count is split in the same proportion
    measured = analytic.activation_bytes([block], replace(spec, activation_bytes=3_000_000),
                                         ParallelPlan(tp=8, sp=True))
    assert measured == pytest.approx(3_000_000 / 8, rel=1e-6)


def test_kv_cache_per_rank_replicates_whole_heads() -> None:
    block = make_block(heads=32, kv_heads=8, head_dim=128, causal=True, seq=1024)
    spec = StepSpec(DECODE, 2, 2, "none", batch=1, tokens=1, context=1024,
                    activation_bytes=None, flops=0)
    # one token: 2 (K, V) · 8 heads · 128 · 2 B = 4,096 B; 1,024 tokens: 4,194,304 B
    full = analytic.kv_cache_bytes([block], spec, ParallelPlan())
    assert full == 4194304
    per = {t: analytic.kv_cache_bytes([block], spec, ParallelPlan(tp=t)) for t in (8, 16)}
    # t = 8: one head each, 524,288 B; t = 16: still one whole head, 2× the even 1/16 share
    assert per[8] == per[16] == 524288 == 2 * full // 16


def test_max_batch_size_and_step_time() -> None:
    h100 = get_profile("h100")
    held = DeviceBytes(params=10 * 2**30, grads=10 * 2**30, optimizer_states=20 * 2**30,
                       activations=4 * 2**30, kv_cache=0, temporaries=2 * 2**30,
                       peak=46 * 2**30)
    # 80 GiB − 42 GiB of batch-free bytes leave 38 GiB; 4 GiB per sequence at batch 2 is
    # 2 GiB per sequence: 19 sequences
    assert analytic.max_batch_size(held, 2, h100) == 19
    empty = replace(held, activations=0, peak=42 * 2**30)
    assert analytic.max_batch_size(empty, 2, h100) is None
    comm = collectives([TpModule("o", ROWWISE, 256, 256)], (), 256, TRAIN_SPEC,
                       ParallelPlan(tp=8))
    # 10^12 FLOPs over t = 8 at 989 TFLOP/s: 1.264e-4 s; 229,376 B over 450 GB/s: 5.1e-7 s
    got = analytic.step_time_s(TRAIN_SPEC, comm, held, ParallelPlan(tp=8), h100)
    assert got == pytest.approx(1e12 / 8 / 989e12 + 229376 / 450e9)


def test_gpt2_conv1d_weights_split_along_their_stored_dims() -> None:
    import os

    import torch

    transformers = pytest.importorskip("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from mhaudit.api import audit
    from mhaudit.parallel import plan_costs

    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100)
    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(cfg)
    ids = torch.zeros((1, 32), dtype=torch.long, device="meta")
    blocks = audit(model, (ids,)).blocks
    h100 = get_profile("h100")

    def params(plan: str) -> int:
        return plan_costs(model, (ids,), {}, blocks, plan, h100, precision="fp32",
                          use_torch=False).per_device_bytes.params

    assert params("tp=1") == 4 * sum(p.numel() for p in model.parameters())
    # Conv1D stores (in, out). Per layer at t = 2: ln_1 128; c_attn (64, 192) → (64, 96) =
    # 6,144 + bias 96; attn c_proj (64, 64) → (32, 64) = 2,048 + bias 64 (row-wise, whole);
    # ln_2 128; c_fc (64, 256) → (64, 128) = 8,192 + 128; mlp c_proj (256, 64) → (128, 64) =
    # 8,192 + 64: 25,184. Two layers 50,368, ln_f 128, wte 6,400 (tied to the head) and wpe
    # 65,536 whole: 122,432 elements, 489,728 B at fp32
    assert params("tp=2") == 489728


def test_step_parts_put_each_group_on_its_link_and_say_what_overlaps() -> None:
    """1e12 FLOPs at t = 8 on H100 (989 TFLOP/s): 1e12 / 8 / 989e12 s of compute. TP's
    8·450e9 B on NVLink (450 GB/s per direction) wait in full; FSDP's 25e9 B over
    InfiniBand (25 GB/s: tp · fsdp = 64 spans nodes) hide behind the compute up to it."""
    from mhaudit.cost.stepspec import TRAIN, StepSpec
    from mhaudit.data.parallel import CollectiveBytes, DeviceBytes, ParallelPlan
    from mhaudit.parallel.analytic import step_parts, step_time_s
    from mhaudit.parallel.collectives import StepComm

    h100 = get_profile("h100")
    spec = StepSpec(TRAIN, 2, 2, "adamw", 1, 4096, 0, None, 10**12)
    comm = StepComm(CollectiveBytes(), CollectiveBytes(), 8 * 450 * 10**9, 25 * 10**9, 0)
    held = DeviceBytes(0, 0, 0, 0, 0, 0, 0)
    plan = ParallelPlan(tp=8, fsdp=8)
    parts = step_parts(spec, comm, held, plan, h100)
    compute = 10**12 / 8 / (h100.peak_tflops_bf16 * 1e12)
    assert parts.compute_s == pytest.approx(compute)
    tp, data = parts.groups
    assert (tp.group, tp.link, tp.overlapped) == ("tp", "nvlink", False)
    assert tp.seconds == pytest.approx(8 * 450e9 / (h100.nvlink_gb_s * 1e9))
    assert tp.exposed_s == tp.seconds
    assert (data.group, data.link, data.overlapped) == ("data", "infiniband", True)
    assert data.seconds == pytest.approx(25e9 / (h100.infiniband_gb_s * 1e9))
    assert data.exposed_s == pytest.approx(data.seconds - compute)
    assert step_time_s(spec, comm, held, plan, h100) == pytest.approx(
        compute + tp.seconds + data.exposed_s)

"""Sequence parallelism run by torch (SequenceParallel norms, sequence-sharded row-wise
outputs, vocabulary-split embedding and head) against the closed-form model: states and
collectives to the byte, activations against Korthikanti et al.'s /t."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

from mhaudit.api import audit
from mhaudit.cost.devices import get_profile
from mhaudit.cost.stepspec import TRAIN, StepSpec
from mhaudit.data import ParallelPlan
from mhaudit.parallel import plan_costs
from mhaudit.parallel.collectives import collectives
from mhaudit.parallel.roles import COLWISE, EMBEDDING, ROWWISE, SEQUENCE, TpModule
from tests.parallel.korthikanti import KorthikantiLM, PostNormLayer
from tests.parallel.torch_oracle import forward_activations

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

H100 = get_profile("h100")
STATES = ("params", "grads", "optimizer_states")


def _gqa_llama(**extra: object) -> torch.nn.Module:
    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=128,
                                      num_hidden_layers=2, vocab_size=128, **extra)
    with torch.device("meta"):
        return transformers.LlamaForCausalLM(config)


IDS = torch.zeros((2, 16), dtype=torch.long, device="meta")


def _both(model: torch.nn.Module, plan: str) -> tuple:  # type: ignore[type-arg]
    blocks = audit(model, (IDS,)).blocks
    analytic = plan_costs(model, (IDS,), {}, blocks, plan, H100, precision="fp32",
                          use_torch=False)
    measured = plan_costs(model, (IDS,), {}, blocks, plan, H100, precision="fp32")
    assert measured.source == "torch.distributed", measured.notes
    assert not dist.is_initialized()
    return analytic, measured


def _states(cost) -> tuple[int, ...]:  # type: ignore[no-untyped-def]
    return tuple(getattr(cost.per_device_bytes, k) for k in STATES)


def test_sp_formula_gathers_at_the_norms() -> None:
    spec = StepSpec(TRAIN, 4, 4, "adamw", batch=2, tokens=15, context=0,
                    activation_bytes=None, flops=1)
    mods = [TpModule("emb", EMBEDDING, 100, 64, transposed=True),
            TpModule("ln", SEQUENCE, 64, 128, output_gathered=True),  # weight and bias
            TpModule("q", COLWISE, 64, 64), TpModule("o", ROWWISE, 64, 64),
            TpModule("head", COLWISE, 64, 100, output_gathered=True)]
    comm = collectives(mods, (), 64, spec, ParallelPlan(tp=2, sp=True))
    # 15 positions pad to 16 over t = 2: one (2, 16, 64) fp32 tensor is 8,192 B, a ring
    # gather or scatter of it sends 1/2 · 8,192 = 4,096. emb: scatter forward, gather
    # backward; ln: gather forward, scatter backward (q reads it, gathers nothing); o:
    # scatter forward, gather backward; head: its (2, 15, 100) logits gathered, 100 columns
    # in 2 shards of 50: 1/2 · 2·15·100·4 = 6,000
    assert comm.calls.all_gather == 4 and comm.sent.all_gather == 3 * 4096 + 6000
    assert comm.calls.reduce_scatter == 3 and comm.sent.reduce_scatter == 3 * 4096
    # ln's weight and bias gradients, 64 fp32 each (256 B): 2·1/2·256 = 256 per all-reduce
    assert comm.calls.all_reduce == 2 and comm.sent.all_reduce == 512


def test_sp_on_a_gqa_llama_equals_torch() -> None:
    analytic, measured = _both(_gqa_llama(), "tp=2,sp")
    # per layer q 64·64/2, k and v 64·32/2, o 64·64/2, gate, up and down 64·128/2, two
    # norms 64: 18,560; embedding and head 128·64/2 each, final norm 64: 4 · (2·18,560 +
    # 8,256) = 181,504 B
    assert _states(analytic) == _states(measured) == (181504, 181504, 363092)
    # five norms gather (2, 16, 64) fp32 forward and scatter it backward, four row-wise
    # projections and the embedding scatter forward and gather backward: 10 of each at
    # 1/2 · 8,192 = 4,096 B; the head gathers its (2, 16, 128) logits, 8,192 B; five norm
    # weights all-reduced, 2·1/2·256 = 256 B each
    assert analytic.comm_bytes_per_step == measured.comm_bytes_per_step
    assert analytic.comm_calls_per_step == measured.comm_calls_per_step
    sent = measured.comm_bytes_per_step
    assert (sent.all_gather, sent.reduce_scatter, sent.all_reduce) == (
        10 * 4096 + 8192, 10 * 4096, 5 * 256)


def test_sp_activations_against_korthikanti() -> None:
    model = _gqa_llama()
    one = forward_activations(model, IDS)
    blocks = audit(model, (IDS,)).blocks
    tp = plan_costs(model, (IDS,), {}, blocks, "tp=2", H100, precision="fp32")
    _, sp = _both(model, "tp=2,sp")
    split = plan_costs(model, (IDS,), {}, blocks, "tp=2,sp", H100, precision="fp32",
                       activation_bytes=one, use_torch=False).per_device_bytes.activations
    assert split == one // 2  # Korthikanti et al.: with SP every activation is split by t
    got = sp.per_device_bytes.activations
    assert got < tp.per_device_bytes.activations  # SP keeps less than TP alone
    # torch saves each gathered norm output whole for the projections that read it (the
    # paper's Megatron keeps the shard and gathers again in the backward): five norms,
    # 1/2 · 8,192 B more each; and the head's gathered (2, 16, 128) logits are whole,
    # 1/2 · 16,384 B more than a split
    explained = one // 2 + 5 * 4096 + 8192
    assert abs(got - explained) <= 0.05 * explained, (got, explained)


def test_sp_on_a_hand_written_pre_norm_model_equals_torch() -> None:
    with torch.device("meta"):
        model = KorthikantiLM(2, 64, 4, 96)
    analytic, measured = _both(model, "tp=2,sp")
    assert _states(analytic) == _states(measured)
    # LayerNorm has a weight and a bias: 5 norms, 10 all-reduces of 256 B; the head
    # gathers (2, 16, 96) fp32 logits, 1/2 · 12,288 = 6,144 B
    sent = measured.comm_bytes_per_step
    assert (sent.all_gather, sent.reduce_scatter, sent.all_reduce) == (
        10 * 4096 + 6144, 10 * 4096, 10 * 256)
    assert analytic.comm_bytes_per_step == sent
    assert analytic.comm_calls_per_step == measured.comm_calls_per_step


def test_sp_falls_back_where_no_norm_feeds_the_projections() -> None:
    with torch.device("meta"):
        model = KorthikantiLM(2, 64, 4, 96)
        model.layers = torch.nn.ModuleList(PostNormLayer(64, 4) for _ in range(2))
    got = plan_costs(model, (IDS,), {}, audit(model, (IDS,)).blocks, "tp=2,sp", H100)
    assert got.source == "analytic"
    assert any("layers.0.q's input is not a norm's output" in n for n in got.notes), got.notes
    tied = _gqa_llama(tie_word_embeddings=True)
    got = plan_costs(tied, (IDS,), {}, audit(tied, (IDS,)).blocks, "tp=2,sp", H100)
    assert got.source == "analytic" and any("shares the embedding's weight" in n
                                            for n in got.notes), got.notes
    assert not dist.is_initialized()


def test_the_plans_of_a_sweep_share_one_read_of_the_layout() -> None:
    from mhaudit.parallel.roles import tp_modules
    from mhaudit.parallel.seqpar import sp_layout

    with torch.device("meta"):
        model = KorthikantiLM(2, 64, 4, 96)
    blocks = audit(model, (IDS,)).blocks
    modules = tp_modules(model, blocks)
    first = sp_layout(model, (IDS,), {}, blocks, modules)
    assert first.blocker is None and sp_layout(model, (IDS,), {}, blocks, modules) is first
    # the same object with other layers is read again
    with torch.device("meta"):
        model.layers = torch.nn.ModuleList(PostNormLayer(64, 4) for _ in range(2))
    again = sp_layout(model, (IDS,), {}, blocks, modules)
    assert again.blocker is not None and "post-norm" in again.blocker


def test_under_autocast_alone_the_stream_stays_fp32() -> None:
    mixed = StepSpec(TRAIN, 4, 2, "adamw", batch=2, tokens=16, context=0,
                     activation_bytes=None, flops=1)
    mods = [TpModule("q", COLWISE, 64, 64), TpModule("o", ROWWISE, 64, 64)]
    alone = collectives(mods, (), 64, mixed, ParallelPlan(tp=2)).sent.all_reduce
    # bf16-mixed without FSDP: fp32 weights under autocast, so the norm output Q reads and
    # its gradient stay fp32 (2·16·64·4 = 8,192 B) while O's output is bf16 (4,096 B);
    # ring all-reduces over 2 send 2·1/2 of each
    assert alone == 8192 + 4096
    # with FSDP's MixedPrecisionPolicy the weights themselves are bf16: all 4,096 B
    sharded = collectives(mods, (), 64, mixed, ParallelPlan(tp=2, fsdp=2)).sent.all_reduce
    assert sharded == 4096 + 4096


@pytest.mark.parametrize("plan", ["tp=2", "tp=2,sp", "tp=2,sp,dp=2"])
def test_bf16_mixed_collectives_equal_torch(plan: str) -> None:
    model = _gqa_llama()
    blocks = audit(model, (IDS,)).blocks
    got = plan_costs(model, (IDS,), {}, blocks, plan, H100, precision="bf16-mixed",
                     use_torch=False)
    measured = plan_costs(model, (IDS,), {}, blocks, plan, H100, precision="bf16-mixed")
    assert measured.source == "torch.distributed", measured.notes
    assert got.comm_bytes_per_step == measured.comm_bytes_per_step
    assert got.comm_calls_per_step == measured.comm_calls_per_step

"""One verdict per fact: a plan the rules call an error (MHA008) is not a plan that fits."""

from __future__ import annotations

import os

import pytest
import torch

from mhaudit.api import audit
from mhaudit.cost.devices import get_profile
from mhaudit.parallel import plan_costs, sweep_plans
from mhaudit.rules.base import RuleContext
from mhaudit.rules.parallel import HEADS_NOT_DIVISIBLE_BY_TENSOR_PARALLEL

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")


def test_a_plan_whose_heads_do_not_shard_never_fits() -> None:
    # h = 32, h_kv = 8 (Llama-3-8B's split) on a tiny body: every plan fits in memory
    cfg = transformers.LlamaConfig(hidden_size=256, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=32, num_key_value_heads=8,
                                   vocab_size=64)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    ids = torch.zeros((1, 16), dtype=torch.long, device="meta")
    blocks = audit(model, (ids,)).blocks
    h100 = get_profile("h100")
    costs = [plan_costs(model, (ids,), {}, blocks, plan, h100, use_torch=False)
             for plan in sweep_plans(64)]
    verdicts = {}
    for cost in costs:
        ctx = RuleContext.for_target(h100, "bfloat16", cost.plan.tp)
        error = any(HEADS_NOT_DIVISIBLE_BY_TENSOR_PARALLEL.check(b, ctx) for b in blocks)
        verdicts[cost.plan.tp] = (cost.fits, error)
        assert not (cost.fits and error)
        assert cost.fits == (cost.per_device_bytes.peak <= h100.memory_bytes and not error)
    # 32 % 64 ≠ 0: tp = 64 leaves half a query head per GPU; tp = 32 gives one query head
    # per GPU and replicates each of the 8 KV heads 4 times, which shards
    assert verdicts[64] == (False, True)
    assert verdicts[32] == (True, False)
    mha008 = [n for c in costs if c.plan.tp == 64 for n in c.notes if n.startswith("MHA008")]
    assert mha008

"""Parallel plans on a 70B shape: Llama-3-70B built on meta, t = 8 with FSDP over 64 ranks.

    python benchmarks/parallel_70b.py           # audit once, then every plan
    python benchmarks/parallel_70b.py plan      # tp=8,fsdp=8 training and decode steps
    python benchmarks/parallel_70b.py sweep     # every tp × fsdp = 64 plan, SP on

Times the build and audit once, then each plan_costs call (the analytic path: torch's fake
world runs the step only for models it can afford to materialise as fake tensors).
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

from runner import run_benchmarks

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SEQ = 4096


@functools.cache
def audited() -> tuple[Any, Any, Any]:
    """(model, ids, blocks) of Llama-3-70B at 1 × 4,096 tokens, built on meta and audited."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from mhaudit.api import audit

    cfg = LlamaConfig(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                      num_attention_heads=64, num_key_value_heads=8, vocab_size=128256)
    start = time.perf_counter()
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    ids = torch.zeros((1, SEQ), dtype=torch.long, device="meta")
    built = time.perf_counter()
    blocks = audit(model, (ids,)).blocks
    done = time.perf_counter()
    print(f"Llama-3-70B on meta: build {built - start:5.1f} s, audit {done - built:5.1f} s, "
          f"{len(blocks)} attention blocks")
    return model, ids, blocks


def _row(label: str, cost: Any, seconds: float) -> None:
    gib = 2**30
    held = cost.per_device_bytes
    comm = cost.comm_bytes_per_step
    print(f"  {label:<24} {seconds:5.2f} s  peak {held.peak / gib:7.1f} GiB  "
          f"params {held.params / gib:6.2f}  acts {held.activations / gib:6.2f}  "
          f"kv {held.kv_cache / gib:6.2f}  comm {comm.total / gib:7.2f} GiB  "
          f"step {cost.step_time_s:8.4f} s  fits {cost.fits!s:<5} "
          f"max batch {cost.max_batch_size}  [{cost.source}]")


def _cost(plan: Any, phase: str) -> tuple[Any, float]:
    from mhaudit.cost.devices import get_profile
    from mhaudit.parallel import plan_costs

    model, ids, blocks = audited()
    start = time.perf_counter()
    cost = plan_costs(model, (ids,), {}, blocks, plan, get_profile("h100"), phase,
                      precision="bf16-mixed", context=SEQ, use_torch=False)
    return cost, time.perf_counter() - start


def bench_plan() -> None:
    """tp=8,sp,fsdp=8 (64 H100s): one training and one decode step."""
    audited()
    print("tp=8,sp,fsdp=8 on 64 H100s, bf16-mixed AdamW, 1 × 4,096 tokens per replica")
    for phase in ("train", "decode"):
        cost, seconds = _cost("tp=8,sp,fsdp=8", phase)
        _row(phase, cost, seconds)


def bench_sweep() -> None:
    """Every tp × fsdp = 64 plan with SP, training step."""
    from mhaudit.parallel import sweep_plans

    audited()
    print("tp × fsdp = 64 H100s, training step")
    for plan in sweep_plans(64, sp=True, max_tp=16):
        cost, seconds = _cost(plan, "train")
        _row(plan.text(), cost, seconds)


if __name__ == "__main__":
    run_benchmarks({"plan": bench_plan, "sweep": bench_sweep}, __doc__.splitlines()[0])

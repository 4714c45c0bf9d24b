"""Compare the training audit's peak with torch.cuda.max_memory_allocated() over a real step.

Each case builds a model on the GPU, runs one AdamW step (foreach, which CUDA picks by
default) to make the optimizer states, resets the peak counter, runs a second step and
reads the peak. The same model and inputs are then audited on meta with ``train=True``.
Writes one JSON line per case to ``$OUT/train-peak.jsonl`` and prints a table.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

import mhaudit


def gpt2(impl: str) -> Callable[[], nn.Module]:
    return lambda: GPT2LMHeadModel(GPT2Config(
        n_layer=6, n_embd=512, n_head=8, n_positions=1024, use_cache=False,
        attn_implementation=impl, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0))


def llama(impl: str) -> Callable[[], nn.Module]:
    return lambda: LlamaForCausalLM(LlamaConfig(
        hidden_size=512, intermediate_size=1408, num_hidden_layers=8, num_attention_heads=8,
        num_key_value_heads=2, vocab_size=32000, max_position_embeddings=2048,
        attn_implementation=impl, use_cache=False))


CASES: list[tuple[str, Callable[[], nn.Module], int, int, str]] = [
    ("gpt2-eager", gpt2("eager"), 4, 512, "fp32"),
    ("gpt2-sdpa", gpt2("sdpa"), 4, 512, "fp32"),
    ("llama-gqa-eager", llama("eager"), 2, 1024, "fp32"),
    ("llama-gqa-sdpa", llama("sdpa"), 2, 1024, "fp32"),
    ("llama-gqa-sdpa-bf16-mixed", llama("sdpa"), 2, 1024, "bf16-mixed"),
]


def batch(b: int, n: int, device: str) -> dict[str, Any]:
    ids = torch.zeros(b, n, dtype=torch.long, device=device)
    return {"input_ids": ids, "labels": ids}


def measured_peak(build: Callable[[], nn.Module], b: int, n: int, precision: str) -> int:
    torch.cuda.empty_cache()
    model = build().cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inputs = batch(b, n, "cuda")

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
            loss = model(**inputs).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated())


def audited_peak(build: Callable[[], nn.Module], b: int, n: int, precision: str) -> int:
    with torch.device("meta"):
        model = build()
        inputs = batch(b, n, "meta")
    report = mhaudit.audit(model, inputs, train=True, precision=precision, gpu="h200")
    assert report.training is not None
    return report.training.peak_bytes


def main() -> None:
    out = Path(os.environ.get("OUT", "gpu-check"))
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    print(f"{'case':<28} {'cuda max allocated':>20} {'mhaudit peak':>14} {'diff':>8}")
    for name, build, b, n, precision in CASES:
        began = time.perf_counter()
        real = measured_peak(build, b, n, precision)
        ours = audited_peak(build, b, n, precision)
        diff = 100 * (ours - real) / real
        row = {"case": name, "batch": b, "seq_len": n, "precision": precision,
               "cuda_max_allocated_bytes": real, "training_peak_bytes": ours,
               "diff_percent": diff, "seconds": time.perf_counter() - began}
        lines.append(json.dumps(row))
        print(f"{name:<28} {real:>20,} {ours:>14,} {diff:>+7.2f}%")
    (out / "train-peak.jsonl").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

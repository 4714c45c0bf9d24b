"""Side-by-side benchmarks of the training and decode steps, each contender in a fresh process.

    python benchmarks/phases.py            # both
    python benchmarks/phases.py train      # GPT-2 small training audit against MemTracker
    python benchmarks/phases.py llama      # 70B-shape training and decode audits against build

"process" is the whole process's wall time (the fastest of three fresh processes for
the training step); "tool" the time after importing torch, transformers and the model
file. MemTracker runs a steady-state AdamW step (foreach) on fake tensors: a first step
makes the optimizer states, the second is tracked; SDPA runs at dropout 0, where the CPU
runs its flash kernel, the oracle for the fused kernel the target (h100) runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from runner import run_benchmarks

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import _PRELUDE, BUILD_ON_META, HEADER, LLAMA, run  # noqa: E402

GPT2_LM = HERE / "models" / "gpt2_small_lm.py"

MEMTRACKER = _PRELUDE + """
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker
from torch.overrides import TorchFunctionMode
class Flash(TorchFunctionMode):
    # the target's fused kernel keeps no scores; on CPU, SDPA at dropout 0 runs the flash
    # kernel, which keeps what the fused kernels keep (output and log-sum-exp)
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.nn.functional.scaled_dot_product_attention:
            if len(args) > 4:  # (query, key, value, attn_mask, dropout_p, ...)
                args = (*args[:4], 0.0, *args[5:])
            else:
                kwargs["dropout_p"] = 0.0
        return func(*args, **kwargs)
with FakeTensorMode():
    model = mod.build_model().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    batch = mod.example_inputs()
    def step():
        with Flash():
            loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    step()
    tracker = MemTracker()
    tracker.track_external(model, opt, *batch.values())
    with tracker:
        step()
(snap,) = tracker.get_tracker_snapshot("peak").values()
done(started, peak_bytes=int(snap["Total"]))
"""

MHAUDIT_TRAIN = _PRELUDE + """
from mhaudit.api import audit_target
report = audit_target(sys.argv[1], train=True)
t = report.training
done(started, peak_bytes=t.peak_bytes, params=t.breakdown.params,
     states=t.breakdown.optimizer_states, flops=t.flops)
"""

MHAUDIT_DECODE = _PRELUDE + """
from mhaudit.api import audit_target

report = audit_target(sys.argv[1], decode=True, context=4096)
d = report.decode
non_embedding = report.model.params_total - 32000 * 8192
done(started, flops_per_step=d.flops_per_step, bytes_per_step=d.bytes_per_step,
     time_per_step_s=d.time_per_step_s, non_embedding=non_embedding)
"""


REPEATS = 3
"""Fresh processes per contender; the fastest is shown (the others met more noise)."""


def best(name: str, script: str, model: Path) -> dict[str, float]:
    """The run with the lowest process wall time of REPEATS fresh processes."""
    return min((run(name, script, model) for _ in range(REPEATS)), key=lambda r: r["wall_s"])


def _row(name: str, r: dict[str, float], figure: str = "") -> str:
    return (f"  {name:<30} {r['wall_s']:7.2f} s {r['tool_s']:7.2f} s "
            f"{r['peak_rss_bytes'] / 2**20:6.0f} MiB  {figure:>16}")


def bench_train() -> None:
    """The training audit of GPT-2 small (LM head, 1024 tokens, fp32 AdamW) vs MemTracker."""
    print(f"GPT-2 small training step, 1024 tokens, fp32 AdamW ({GPT2_LM.name})")
    ref = best("MemTracker", MEMTRACKER, GPT2_LM)
    ours = best("mhaudit --train", MHAUDIT_TRAIN, GPT2_LM)
    print(HEADER.replace("FLOPs", "peak"))
    print(_row("torch MemTracker (fake)", ref, f"{ref['peak_bytes'] / 1e9:.3f} GB"))
    print(_row("mhaudit --train (meta)", ours, f"{ours['peak_bytes'] / 1e9:.3f} GB"))
    diff = 100 * (ours["peak_bytes"] - ref["peak_bytes"]) / ref["peak_bytes"]
    print(f"  speed-up over MemTracker: {ref['wall_s'] / ours['wall_s']:.1f}x in process wall "
          f"time (target >= 2x), {ref['tool_s'] / ours['tool_s']:.1f}x in tool time; "
          f"peak vs MemTracker {diff:+.3f}% (target within 10%)")
    print(f"  params {ours['params']:,.0f} B = 124,439,808 x 4: "
          f"{ours['params'] == 124_439_808 * 4}; optimizer states {ours['states']:,.0f} B")


def bench_llama() -> None:
    """70B-shape training and decode audits against building the model on meta."""
    print(f"Llama-2-70B shape, 4096 tokens ({LLAMA.name})")
    build = run("build on meta", BUILD_ON_META, LLAMA)
    train = run("mhaudit --train", MHAUDIT_TRAIN, LLAMA)
    dec = run("mhaudit --decode", MHAUDIT_DECODE, LLAMA)
    print(HEADER.replace("FLOPs", "figure"))
    print(_row("build only (meta)", build))
    print(_row("mhaudit --train", train, f"{train['peak_bytes'] / 2**30:.1f} GiB peak"))
    print(_row("mhaudit --decode --context 4096", dec,
               f"{dec['time_per_step_s'] * 1e3:.2f} ms/step"))
    n = dec["non_embedding"]
    flops = 2 * n + 80 * 4 * 64 * 4096 * 128
    moved = 2 * n + 80 * 2 * 8 * 128 * 2 * 4096
    time_s = max(flops / 989e12, moved / 3350e9)
    for name, ours, expected in (("flops_per_step", dec["flops_per_step"], flops),
                                 ("bytes_per_step", dec["bytes_per_step"], moved),
                                 ("time_per_step_s", dec["time_per_step_s"], time_s)):
        print(f"  decode {name}: {ours:.6g} vs closed form {expected:.6g} "
              f"({100 * (ours - expected) / expected:+.3f}%, target within 2%)")
    print(f"  --train / build: {train['wall_s'] / build['wall_s']:.2f}x, --decode / build: "
          f"{dec['wall_s'] / build['wall_s']:.2f}x in process wall time")


BENCHES = {"train": bench_train, "llama": bench_llama}


def main() -> None:
    run_benchmarks(BENCHES, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()

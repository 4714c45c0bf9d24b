"""Side-by-side benchmarks: mhaudit against building the model, fvcore and torch's flop counter.

Each contender runs in its own fresh Python process. "process" is that process's wall
time, start-up and imports included; "tool" is the time after importing torch, the
transformers model file and its dependencies, which every contender pays alike, and
"tool CPU" the CPU seconds of that part (all threads), which a busy machine inflates far
less than wall time.
Peak memory is each process's own maximum resident set.

    python benchmarks/run.py            # both benchmarks
    python benchmarks/run.py gpt2       # one of them
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from runner import run_benchmarks

HERE = Path(__file__).resolve().parent
LLAMA = HERE / "models" / "llama2_70b.py"
GPT2 = HERE / "models" / "gpt2_small.py"

_PRELUDE = """
import importlib.util, json, resource, sys, time
def load(path):
    spec = importlib.util.spec_from_file_location("bench_model", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_model"] = mod
    spec.loader.exec_module(mod)
    return mod
def done(started, **extra):
    extra["tool_s"] = time.perf_counter() - started
    extra["tool_cpu_s"] = time.process_time() - started_cpu
    extra["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print("BENCH " + json.dumps(extra))
import torch
mod = load(sys.argv[1])  # torch, transformers and the model file: every contender pays this
started, started_cpu = time.perf_counter(), time.process_time()
"""

BUILD_ON_META = _PRELUDE + """
with torch.device("meta"):
    model = mod.build_model()
    mod.example_inputs()
done(started)
"""

MHAUDIT = _PRELUDE + """
from mhaudit.api import audit_target
report = audit_target(sys.argv[1])
families = report.totals.flops_by_family
done(started, flops=report.totals.flops, blocks=report.totals.num_blocks,
     products=families["matmul"] + families["conv"])
"""

FVCORE = _PRELUDE + """
from fvcore.nn import FlopCountAnalysis
model = mod.build_model()
analysis = FlopCountAnalysis(model, mod.example_inputs())
analysis.unsupported_ops_warnings(False)
analysis.uncalled_modules_warnings(False)
with torch.no_grad():
    macs = analysis.total()
done(started, flops=2 * macs)
"""

# FlopCounterMode counts matmuls, convolutions and SDPA, but not the CPU flash kernel
# that SDPA dispatches to without grad; eager attention makes QKᵀ and PV matmuls it sees.
FLOP_COUNTER = _PRELUDE + """
from torch.utils.flop_counter import FlopCounterMode

model = mod.build_model(attn_implementation="eager")
inputs = mod.example_inputs()
counter = FlopCounterMode(display=False)
with torch.no_grad(), counter:
    model(*inputs)
done(started, flops=counter.get_total_flops())
"""


def run(name: str, script: str, model: Path) -> dict[str, float]:
    """Run one contender in a fresh process; return wall seconds, peak RSS and its figures."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", script, str(model)], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - start
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH ")]
    if proc.returncode != 0 or not lines:
        sys.exit(f"{name} failed:\n{proc.stderr[-2000:]}")
    result: dict[str, float] = json.loads(lines[-1][6:])
    result["wall_s"] = wall
    return result


HEADER = f"  {'':<30} {'process':>9} {'tool':>9} {'peak RSS':>10}  {'FLOPs':>16}"


def _row(name: str, r: dict[str, float]) -> str:
    flops = f"{r['flops'] / 1e12:10.4f} TFLOP" if "flops" in r else ""
    return (f"  {name:<30} {r['wall_s']:7.2f} s {r['tool_s']:7.2f} s "
            f"{r['peak_rss_bytes'] / 2**20:6.0f} MiB  {flops:>16}")


def bench_llama() -> None:
    """mhaudit report on a Llama-2-70B shape vs merely building it on meta."""
    print(f"Llama-2-70B shape, 4096 tokens ({LLAMA.name})")
    build = run("build on meta", BUILD_ON_META, LLAMA)
    ours = run("mhaudit", MHAUDIT, LLAMA)
    print(HEADER)
    print(_row("build only (meta)", build))
    print(_row("mhaudit audit", ours))
    ratio = ours["wall_s"] / build["wall_s"]
    print(f"  mhaudit / build, process wall time: {ratio:.2f}x (target <= 1.5x); "
          f"peak RSS {ours['peak_rss_bytes'] / 2**30:.2f} GiB (target <= 1 GiB)")


def bench_gpt2() -> None:
    """mhaudit vs fvcore vs FlopCounterMode on GPT-2 small at 1024 tokens."""
    print(f"GPT-2 small, 1024 tokens ({GPT2.name})")
    ours = run("mhaudit", MHAUDIT, GPT2)
    fv = run("fvcore", FVCORE, GPT2)
    counter = run("torch FlopCounterMode", FLOP_COUNTER, GPT2)
    print(HEADER)
    print(_row("mhaudit (meta)", ours))
    print(_row("fvcore FlopCountAnalysis x2", fv))
    print(_row("torch FlopCounterMode (eager)", counter))
    speed = fv["tool_s"] / ours["tool_s"]
    process = fv["wall_s"] / ours["wall_s"]
    memory = ours["peak_rss_bytes"] / fv["peak_rss_bytes"]
    diff = 100 * (ours["flops"] - counter["flops"]) / counter["flops"]
    products = int(ours["products"]) - int(counter["flops"])
    print(f"  speed-up over fvcore: {speed:.1f}x in tool time (target >= 4x), "
          f"{process:.1f}x in process wall time")
    print(f"  memory vs fvcore: {memory:.2f}x (target <= 0.5x); "
          f"FLOPs vs FlopCounterMode: {diff:+.3f}% (target within 0.5%)")
    print(f"  matmul + conv vs FlopCounterMode: {products:+,} FLOP (target 0, exact)")


BENCHES = {"llama": bench_llama, "gpt2": bench_gpt2}


def main() -> None:
    run_benchmarks(BENCHES, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()

"""mhaudit's own work beside the floor, fvcore, FlopCounterMode and MemTracker, per workload.

Every contender runs in a fresh Python process, the contenders alternating, so a busy
machine slows them alike. The floor imports torch and transformers, runs the model file
and builds the model on meta; "work" is a contender's wall time above the floor (the
median over repetitions), "CPU work" its CPU seconds (user and system, all threads) above
the floor's, which a busy machine inflates far less. mhaudit runs as users run it,
``mhaudit report M --format json``; FlopCounterMode and MemTracker run one forward on fake
tensors; fvcore needs real weights, so it builds the model on the CPU, and it is left out
where those would not fit.

    python benchmarks/speed.py              # every workload, 3 repetitions
    python benchmarks/speed.py --quick      # GPT-2 small and Llama-3-8B (4 layers), once
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = HERE / "models"

_PRELUDE = f"""
import importlib.util, json, resource, sys, time
sys.path.insert(0, {str(MODELS)!r})
def done(**extra):
    extra["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print("BENCH " + json.dumps(extra))
import torch, transformers
spec = importlib.util.spec_from_file_location("bench_model", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
sys.modules["bench_model"] = mod
spec.loader.exec_module(mod)
"""

FLOOR = _PRELUDE + """
with torch.device("meta"):
    model = mod.build_model()
    mod.example_inputs()
done()
"""

FVCORE = _PRELUDE + """
from fvcore.nn import FlopCountAnalysis
model = mod.build_model()
analysis = FlopCountAnalysis(model, mod.example_inputs())
analysis.unsupported_ops_warnings(False)
analysis.uncalled_modules_warnings(False)
with torch.no_grad():
    done(flops=2 * analysis.total())
"""

# Eager attention: FlopCounterMode does not count the CPU flash kernel SDPA picks.
FLOP_COUNTER = _PRELUDE + """
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode
with FakeTensorMode():
    model = mod.build_model(attn_implementation="eager")
    inputs = mod.example_inputs()
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(*inputs)
done(flops=counter.get_total_flops())
"""

MEMTRACKER = _PRELUDE + """
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker
with FakeTensorMode():
    model = mod.build_model()
    inputs = mod.example_inputs()
    tracker = MemTracker()
    tracker.track_external(model, *inputs)
    with torch.no_grad(), tracker:
        model(*inputs)
(snap,) = tracker.get_tracker_snapshot("peak").values()
done(peak_bytes=int(snap["Total"]))
"""


@dataclass(frozen=True)
class Workload:
    """One model file and whether its real weights fit in memory (for fvcore)."""

    title: str
    file: str
    real_weights: bool


WORKLOADS = (
    Workload("GPT-2 small, 1024 tokens", "gpt2_small.py", True),
    Workload("BERT-base, 512 tokens", "bert_base.py", True),
    Workload("ViT-B/16, 224x224", "vit_b16.py", True),
    Workload("Llama-3-8B shape, 4 layers, 2048 tokens", "llama3_8b_4layers.py", False),
    Workload("Llama-3-8B shape, 32 layers, 2048 tokens", "llama3_8b.py", False),
    Workload("Mixtral-8x7B shape, 2048 tokens", "mixtral_8x7b.py", False),
)
QUICK = ("gpt2_small.py", "llama3_8b_4layers.py")


def _command(tool: str, model: Path) -> list[str]:
    if tool == "mhaudit":
        return [sys.executable, "-m", "mhaudit", "report", str(model), "--format", "json"]
    script = {"floor": FLOOR, "fvcore": FVCORE, "FlopCounterMode": FLOP_COUNTER,
              "MemTracker": MEMTRACKER}[tool]
    return [sys.executable, "-c", script, str(model)]


def _time_rss() -> list[str]:
    """``/usr/bin/time`` reports the peak RSS of a process that prints no BENCH line."""
    return ["/usr/bin/time", "-f", "RSS %M"] if Path("/usr/bin/time").exists() else []


def _children_cpu_s() -> float:
    """CPU seconds (user and system, all threads) of every child process waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(tool: str, model: Path) -> dict[str, float]:
    """Wall and CPU seconds and peak RSS of one fresh process running ``tool`` on ``model``."""
    start, cpu_start = time.perf_counter(), _children_cpu_s()
    proc = subprocess.run([*_time_rss(), *_command(tool, model)], capture_output=True,
                          text=True, check=False)
    wall = time.perf_counter() - start
    result: dict[str, float] = {"wall_s": wall, "cpu_s": _children_cpu_s() - cpu_start}
    if proc.returncode not in (0, 1):  # mhaudit exits 1 when a rule flags the model
        print(f"  {tool} on {model.name} failed: {proc.stderr.strip()[-300:]}", file=sys.stderr)
        result["failed"] = 1.0
    for line in proc.stdout.splitlines():
        if line.startswith("BENCH "):
            result.update(json.loads(line[6:]))
    for line in proc.stderr.splitlines():
        if line.startswith("RSS "):
            result["peak_rss_bytes"] = int(line[4:]) * 1024
    return result


def measure(work: Workload, repeats: int) -> dict[str, dict[str, float]]:
    """Median wall and the largest peak RSS of each tool, the tools alternating."""
    tools = ["floor", "mhaudit", "FlopCounterMode", "MemTracker"]
    tools += ["fvcore"] if work.real_weights else []
    runs: dict[str, list[dict[str, float]]] = {tool: [] for tool in tools}
    for _ in range(repeats):
        for tool in tools:
            runs[tool].append(run_once(tool, MODELS / work.file))
    return {tool: {"wall_s": statistics.median(r["wall_s"] for r in rs),
                   "cpu_s": statistics.median(r["cpu_s"] for r in rs),
                   "peak_rss_bytes": max(r.get("peak_rss_bytes", 0) for r in rs)}
            for tool, rs in runs.items() if not any("failed" in r for r in rs)}


def table(work: Workload, found: dict[str, dict[str, float]]) -> list[str]:
    """The workload's rows: wall and CPU, each above the floor, and peak RSS; the ratios."""
    floor = found["floor"]
    lines = [f"{work.title} ({work.file})",
             f"  {'':<18} {'process':>9} {'work':>9} {'CPU':>9} {'CPU work':>9} "
             f"{'peak RSS':>10}"]
    for tool, r in found.items():
        lines.append(f"  {tool:<18} {r['wall_s']:7.2f} s {r['wall_s'] - floor['wall_s']:7.2f} s "
                     f"{r['cpu_s']:7.2f} s {r['cpu_s'] - floor['cpu_s']:7.2f} s "
                     f"{r['peak_rss_bytes'] / 2**20:6.0f} MiB")
    left_out = [tool for tool in ("FlopCounterMode", "MemTracker") if tool not in found]
    if left_out:
        lines.append(f"  failed on fake tensors: {', '.join(left_out)}")
    ours = found["mhaudit"]
    ratios = []
    for peer in ("fvcore", "FlopCounterMode"):
        if peer in found:
            theirs = found[peer]
            shares = []
            for key, label in (("wall_s", "work"), ("cpu_s", "CPU work")):
                above = theirs[key] - floor[key]
                share = (ours[key] - floor[key]) / above if above > 0 else None
                shares.append(f"{label} {share:.2f}" if share is not None else f"{label} n/a")
            whole = ours["wall_s"] / theirs["wall_s"]
            ratios.append(f"mhaudit/{peer}: {', '.join(shares)}, process {whole:.2f}")
    if "fvcore" in found:
        rss = ours["peak_rss_bytes"] / found["fvcore"]["peak_rss_bytes"]
        ratios.append(f"peak RSS mhaudit/fvcore {rss:.2f}")
    else:
        ratios.append("fvcore left out: it needs real weights, which do not fit")
    lines.append("  " + "; ".join(ratios))
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="two workloads, one repetition (a smoke test)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=(), help="model files to run")
    args = parser.parse_args(argv)
    works = [w for w in WORKLOADS if not args.quick or w.file in QUICK]
    works = [w for w in works if not args.only or w.file in args.only]
    repeats = 1 if args.quick else args.repeats
    for work in works:
        print("\n".join(table(work, measure(work, repeats))), flush=True)
        print()


if __name__ == "__main__":
    main()

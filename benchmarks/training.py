"""The training audit beside torch's MemTracker, above the floor both pay, in one alternating run.

    python benchmarks/training.py                      # GPT-2 small (1024 tokens), BERT-base (512)
    python benchmarks/training.py --repeats 5 benchmarks/models/bert_base_mlm.py

Each repetition runs, in turn and each in a fresh process: the floor (import torch and
transformers, run the model file, build the model on meta), mhaudit's training audit
(``audit_target(path, train=True)``, the library behind ``report --train``), and
MemTracker on a fake-tensor steady-state AdamW step of the same model (foreach; a first
step makes the states, the second is tracked; SDPA at dropout 0, the CPU's flash kernel,
as the target's fused kernel keeps no scores). A contender's work is its time after the
imports less the floor's in the same repetition, in wall seconds and in CPU seconds
(all threads; a busy machine inflates them far less); the ratios are of the medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from phases import MEMTRACKER, MHAUDIT_TRAIN  # noqa: E402
from run import BUILD_ON_META, run  # noqa: E402

MODELS = (HERE / "models" / "gpt2_small_lm.py", HERE / "models" / "bert_base_mlm.py")
GOAL = 0.25
"""mhaudit's work above the floor, as a share of MemTracker's."""
CONTENDERS = (("floor (import, build on meta)", BUILD_ON_META),
              ("mhaudit training audit", MHAUDIT_TRAIN),
              ("MemTracker fake step", MEMTRACKER))


def measure(model: Path, repeats: int) -> dict[str, list[dict[str, float]]]:
    """Every contender's runs, the contenders alternating within each repetition."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in CONTENDERS}
    for _ in range(repeats):
        for name, script in CONTENDERS:
            runs[name].append(run(name, script, model))
    return runs


def _above(runs: list[dict[str, float]], floor: list[dict[str, float]], key: str) -> float:
    """The median of a contender's ``key`` less the floor's in the same repetition."""
    return statistics.median(r[key] - f[key] for r, f in zip(runs, floor, strict=True))


def summary(model: Path, runs: dict[str, list[dict[str, float]]]) -> list[str]:
    """The table of medians, each contender's work above the floor and the ratios."""
    floor_name, ours_name, peer_name = (name for name, _ in CONTENDERS)
    floor = runs[floor_name]
    lines = [f"{model.name}, {len(floor)} repetitions (medians)",
             f"  {'':<32} {'process':>9} {'tool':>9} {'above floor':>12} "
             f"{'CPU above':>10} {'peak RSS':>10}"]
    for name, results in runs.items():
        wall = statistics.median(r["wall_s"] for r in results)
        tool = statistics.median(r["tool_s"] for r in results)
        rss = statistics.median(r["peak_rss_bytes"] for r in results) / 2**20
        shown = cpu = ""
        if name != floor_name:
            shown = f"{_above(results, floor, 'tool_s'):10.2f} s"
            cpu = f"{_above(results, floor, 'tool_cpu_s'):8.2f} s"
        lines.append(f"  {name:<32} {wall:7.2f} s {tool:7.2f} s {shown:>12} {cpu:>10} "
                     f"{rss:6.0f} MiB")
    ratios = []
    for key, label in (("tool_s", "wall"), ("tool_cpu_s", "CPU")):
        ours, peer = (_above(runs[n], floor, key) for n in (ours_name, peer_name))
        ratios.append(f"{label} {ours / peer:.2f}" if peer > 0 else f"{label} n/a")
    ours_b, peer_b = runs[ours_name][-1]["peak_bytes"], runs[peer_name][-1]["peak_bytes"]
    lines.append(f"  mhaudit / MemTracker above the floor: {', '.join(ratios)} "
                 f"(goal <= {GOAL}); peak {int(ours_b):,} B vs {int(peer_b):,} B "
                 f"({100 * (ours_b - peer_b) / peer_b:+.3f}%)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path, help="model files (default: "
                        + ", ".join(m.name for m in MODELS) + ")")
    parser.add_argument("--repeats", type=int, default=3, help="repetitions (default 3)")
    args = parser.parse_args()
    for model in args.models or MODELS:
        print("\n".join(summary(model, measure(model, args.repeats))))
        print()


if __name__ == "__main__":
    main()

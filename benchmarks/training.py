"""The training audit beside torch's MemTracker, above the floor both pay, in one alternating run.

    python benchmarks/training.py                      # GPT-2 small (1024 tokens), BERT-base (512)
    python benchmarks/training.py --repeats 5 benchmarks/models/bert_base_mlm.py

Each repetition runs, in turn and each in a fresh process: the floor (import torch and
transformers, run the model file, build the model on meta), mhaudit's training audit
(``audit_target(path, train=True)``, the library behind ``report --train``), and
MemTracker on a fake-tensor steady-state AdamW step of the same model (foreach; a first
step makes the states, the second is tracked; SDPA at dropout 0, the CPU's flash kernel,
as the target's fused kernel keeps no scores). A contender's work is its time after the
imports less the floor's in the same repetition; the ratio is of the medians.
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


def summary(model: Path, runs: dict[str, list[dict[str, float]]]) -> list[str]:
    """The table of medians, each contender's work above the floor and the ratio."""
    floor_name, ours_name, peer_name = (name for name, _ in CONTENDERS)
    floor = runs[floor_name]
    lines = [f"{model.name}, {len(floor)} repetitions (medians)",
             f"  {'':<32} {'process':>9} {'tool':>9} {'above floor':>12} {'peak RSS':>10}"]
    above: dict[str, float] = {}
    for name, results in runs.items():
        work = [r["tool_s"] - f["tool_s"] for r, f in zip(results, floor, strict=True)]
        above[name] = statistics.median(work)
        wall = statistics.median(r["wall_s"] for r in results)
        tool = statistics.median(r["tool_s"] for r in results)
        rss = statistics.median(r["peak_rss_bytes"] for r in results) / 2**20
        shown = "" if name == floor_name else f"{above[name]:10.2f} s"
        lines.append(f"  {name:<32} {wall:7.2f} s {tool:7.2f} s {shown:>12} {rss:6.0f} MiB")
    ratio = above[ours_name] / above[peer_name] if above[peer_name] > 0 else float("inf")
    ours, peer = runs[ours_name][-1]["peak_bytes"], runs[peer_name][-1]["peak_bytes"]
    lines.append(f"  mhaudit / MemTracker above the floor: {ratio:.2f} (goal <= {GOAL}); "
                 f"peak {int(ours):,} B vs {int(peer):,} B ({100 * (ours - peer) / peer:+.3f}%)")
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

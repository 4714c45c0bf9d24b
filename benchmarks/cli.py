"""CLI benchmarks: start-up without torch, and many targets in one process.

    python benchmarks/cli.py            # both
    python benchmarks/cli.py startup    # --help, --version, rules against `import torch`
    python benchmarks/cli.py many       # 20 small transformers configs against one

Each figure is the median wall time of fresh processes (start-up included).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runner import run_benchmarks

MHAUDIT = [sys.executable, "-m", "mhaudit"]


def wall(cmd: list[str], repeats: int) -> float:
    """Median wall seconds of ``cmd`` in fresh processes."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_startup(repeats: int = 5) -> None:
    """Commands that must answer without importing torch, against importing it."""
    torch_s = wall([sys.executable, "-c", "import torch"], repeats)
    print(f"CLI start-up, median of {repeats} fresh processes")
    label = 'python -c "import torch"'
    print(f"  {label:<34} {torch_s:6.2f} s")
    for args in (["--help"], ["--version"], ["rules"], ["rules", "MHA004"],
                 ["whatif", "--help"], ["report", "--help"]):
        seconds = wall([*MHAUDIT, *args], repeats)
        label = "mhaudit " + " ".join(args)
        print(f"  {label:<34} {seconds:6.2f} s   {seconds / torch_s:.2f}x import torch "
              "(target < 0.3x)")


FAMILIES = {
    "gpt2": lambda i: {"model_type": "gpt2", "n_layer": 1 + i % 3, "n_embd": 64 * (1 + i % 2),
                       "n_head": 2 * (1 + i % 2), "vocab_size": 128, "n_positions": 128},
    "llama": lambda i: {"model_type": "llama", "num_hidden_layers": 1 + i % 2,
                        "hidden_size": 64 * (1 + i % 2), "intermediate_size": 128,
                        "num_attention_heads": 4, "num_key_value_heads": 1 + i % 2 * 3,
                        "vocab_size": 128},
    "bert": lambda i: {"model_type": "bert", "num_hidden_layers": 1 + i % 2,
                       "hidden_size": 64, "intermediate_size": 128,
                       "num_attention_heads": 2 + 2 * (i % 2), "vocab_size": 128},
    "t5": lambda i: {"model_type": "t5", "num_layers": 1, "num_decoder_layers": 1,
                     "d_model": 64, "d_kv": 16 * (1 + i % 2), "d_ff": 128, "num_heads": 4,
                     "vocab_size": 128, "is_encoder_decoder": True},
}


def _configs(folder: Path, count: int) -> list[str]:
    names = list(FAMILIES)
    paths = []
    for i in range(count):
        family = names[i % len(names)]
        path = folder / f"{i:02d}_{family}" / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(FAMILIES[family](i // len(names))), encoding="utf-8")
        paths.append(str(path))
    return paths


def bench_many(repeats: int = 3) -> None:
    """One process auditing 20 small configs against one process auditing one."""
    with tempfile.TemporaryDirectory() as tmp:
        configs = _configs(Path(tmp), 20)
        args = ["report", "--seq-len", "32", "--format", "json"]
        one = wall([*MHAUDIT, *args, configs[0]], repeats)
        many = wall([*MHAUDIT, *args, *configs], repeats)
    print(f"Many targets in one process (transformers configs, median of {repeats})")
    print(f"  {'mhaudit report (1 config)':<34} {one:6.2f} s")
    print(f"  {'mhaudit report (20 configs)':<34} {many:6.2f} s   {many / one:.2f}x one "
          "(target < 3x)")


BENCHES = {"startup": bench_startup, "many": bench_many}


def main() -> None:
    run_benchmarks(BENCHES, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()

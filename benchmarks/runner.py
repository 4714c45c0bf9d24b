"""The command line every benchmark script shares: pick benchmarks by name, run each once."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping


def run_benchmarks(benches: Mapping[str, Callable[[], None]], description: str) -> None:
    """Run the benchmarks named on the command line (all of them when none is named)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("which", nargs="*", help=f"benchmarks to run: {', '.join(benches)}")
    args = parser.parse_args()
    unknown = [name for name in args.which if name not in benches]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r}; choose from {', '.join(benches)}")
    for name in args.which or list(benches):
        benches[name]()
        print()

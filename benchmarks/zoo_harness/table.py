"""The zoo table in markdown: headline counts, then one row per architecture."""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from zoo_harness.worker import STATUSES, Result


def cell(text: str) -> str:
    """``text`` as one markdown table cell: pipes escaped, newlines joined."""
    return text.replace("|", "\\|").replace("\n", " ")


RAN_BY = "transformers builds and runs from a tiny config"


def headline(results: Iterable[Result], ran_by: str = RAN_BY,
             statuses: tuple[str, ...] = STATUSES, outside: tuple[str, ...] = ("skipped",)
             ) -> str:
    """``N tried: a exact, b wrong, ...`` and the share of the first status (exact) among
    those whose status is not ``outside`` (skipped: no forward to check)."""
    results = list(results)
    counts = Counter(r.status for r in results)
    ran = len(results) - sum(counts[s] for s in outside)
    good = statuses[0]
    share = f"{100 * counts[good] / ran:.0f}%" if ran else "n/a"
    parts = ", ".join(f"{counts[s]} {s}" for s in statuses)
    return (f"{len(results)} architectures tried: {parts}. {good.capitalize()} on "
            f"{counts[good]} of the {ran} that {ran_by} ({share}).")


def render(results: Iterable[Result], title: str, preamble: str,
           ran_by: str = RAN_BY, statuses: tuple[str, ...] = STATUSES,
           outside: tuple[str, ...] = ("skipped",)) -> str:
    results = sorted(results, key=lambda r: (statuses.index(r.status), r.name))
    counts = Counter(r.status for r in results)
    lines = [f"# {title}", "", preamble, "", headline(results, ran_by, statuses, outside), "",
             "| tried | " + " | ".join(statuses) + " |",
             "|---:|" + "---:|" * len(statuses),
             f"| {len(results)} | " + " | ".join(str(counts[s]) for s in statuses) + " |",
             "", "| architecture | result | reason | seconds |", "|---|---|---|---:|"]
    lines += [f"| {r.name} | {r.status} | {cell(r.reason)} | {r.seconds:.0f} |"
              for r in results]
    return "\n".join(lines) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so a reader sees the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise

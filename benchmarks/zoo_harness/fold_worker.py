"""Folded against unfolded: one architecture audited both ways must give one report.

Each model type's tiny config is made deep enough to fold (``LAYERS`` layers, keeping one
of each kind its per-layer lists name) with sliding windows narrower than the audited
length, then audited twice through the CLI with a decode step (without one for a model
that has no block to decode): once folded (the default) and once with ``--no-fold``.
The reports must be equal but for the line that says what was folded.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from zoo_harness.worker import SEQ, Result, _exception_line, run_cli

LAYERS = 8
"""Deep enough that a list folds (mhaudit folds lists of four or more) and per-layer
patterns of up to eight layers (five sliding to one global, dense then MoE) repeat."""
DECODE = ("--decode", "--context", "64")
WINDOW = SEQ // 2
"""Sliding windows shrink below the audited length, so that a layer given another layer's
window shows in its figures."""
STATUSES = ("equal", "differ", "not folded", "exit 1", "exit 2", "exit 3", "exit 4",
            "skipped", "timeout")
"""Outcomes, the good one first (the headline's share)."""
NOT_COMPARED = ("folded_layers", ".coverage.data_dependent.real_forward.limit_bytes")
"""What says how the report was made, not what it found: the folding, and the real
forward's size limit (a quarter of the memory free at that moment)."""


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The JSON path where ``a`` and ``b`` first differ, with both values; None if equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if (key if not path else f"{path}.{key}") in NOT_COMPARED:
                continue
            found = first_difference(a.get(key), b.get(key), f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} entries folded, {len(b)} unfolded"
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{path}[{index}]")
            if found:
                return found
        return None
    return None if a == b else f"{path}: {str(a)[:60]} folded, {str(b)[:60]} unfolded"


def narrow_windows(config: dict[str, Any]) -> None:
    """Every ``*sliding_window`` size in the config tree down to ``WINDOW``, in place."""
    for key, value in config.items():
        if isinstance(value, dict):
            narrow_windows(value)
        elif str(key).endswith("sliding_window") and isinstance(value, int) \
                and not isinstance(value, bool) and value > WINDOW:
            config[key] = WINDOW


def run_one(name: str) -> Result:
    """Audit ``name`` folded and unfolded; never raises."""
    import torch

    from zoo_harness.tiny import tiny_config

    start = time.monotonic()
    torch.set_num_threads(1)
    try:
        data = tiny_config(name, LAYERS)
        narrow_windows(data)
    except Exception as exc:
        return Result(name, "skipped", f"config class: {_exception_line(exc)}")
    with tempfile.TemporaryDirectory(prefix="fold-") as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps(data, indent=1, default=str))
        runs = _both(path, Path(folder), DECODE)
        if runs[0][0] == 2:  # no block that decodes (an encoder): the forward alone
            runs = _both(path, Path(folder), ())
    result = classify(name, runs)
    result.seconds = round(time.monotonic() - start, 1)
    return result


def _both(config: Path, folder: Path, extra: tuple[str, ...]
          ) -> list[tuple[int, dict[str, Any] | None, str]]:
    """The CLI's exit code, report and first error line, folded and unfolded."""
    return [run_cli(config, folder / f"{kind}.json", folder / f"{kind}.log", (*extra, flag))
            for kind, flag in (("f", "--fold"), ("u", "--no-fold"))]


def classify(name: str, runs: list[tuple[int, dict[str, Any] | None, str]]) -> Result:
    """equal, differ, not folded, or the exit code of the run that failed."""
    (code_f, folded, line_f), (code_u, unfolded, line_u) = runs
    if code_u == 3:
        return Result(name, "skipped", f"unfolded: {line_u}")
    if folded is None or unfolded is None:
        code, line = (code_f, line_f) if folded is None else (code_u, line_u)
        return Result(name, f"exit {code}", line)
    difference = first_difference(folded, unfolded)
    if difference:
        return Result(name, "differ", difference)
    lists = folded.get("folded_layers") or []
    if not lists:
        return Result(name, "not folded", "no list of four or more repeated layers traced once")
    traced = sum(f["traced"] for f in lists)
    layers = sum(f["layers"] for f in lists)
    return Result(name, "equal", f"{layers} layers traced as {traced}")

"""``whatif --gpus`` as a table, markdown or JSON: per-device cost of each split of the GPUs."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable

from mhaudit import units
from mhaudit.data.parallel import ParallelCost
from mhaudit.data.parallel_sweep import ParallelSweep, PhaseSweep, sweep_to_dict
from mhaudit.render.escape import text_data
from mhaudit.render.fit import fitted

Column = tuple[str, Callable[[ParallelCost], str]]

_PHASE_NAMES = {"train": "training step", "decode": "decode step"}


def _bytes(field: str) -> Callable[[ParallelCost], str]:
    return lambda c: units.nbytes(getattr(c.per_device_bytes, field))


_PLAN: Column = ("plan", lambda c: c.plan.text().removesuffix(",pp=1"))
_TAIL: tuple[Column, ...] = (
    ("peak", _bytes("peak")),
    ("sends", lambda c: units.nbytes(c.comm_bytes_per_step.total)),
    ("step", lambda c: units.seconds(c.step_time_s)),
    ("fit", lambda c: "yes" if c.fits else "no"),
    ("batch", lambda c: units.count(c.max_batch_size)),
)
COLUMNS: dict[str, tuple[Column, ...]] = {
    "train": (_PLAN, ("params", _bytes("params")), ("grads", _bytes("grads")),
              ("optim", _bytes("optimizer_states")), ("acts", _bytes("activations")),
              ("temps", _bytes("temporaries")), *_TAIL),
    "decode": (_PLAN, ("params", _bytes("params")), ("KV", _bytes("kv_cache")),
               ("temps", _bytes("temporaries")), *_TAIL),
}
"""The columns of each phase: the per-device parts the phase holds, then the totals."""

LEGEND = ("per GPU: params, grads, optimizer states (optim), activations (acts), KV cache and "
          "gather buffers (temps); peak: their sum; sends: bytes each rank sends per step; "
          "step: a lower bound on the target; batch: largest micro-batch that fits")


def _title(sweep: ParallelSweep) -> str:
    return (f"Parallel what-if: {sweep.source} on {sweep.gpus:,} × {sweep.gpu} "
            f"({units.nbytes(sweep.memory_bytes)} each)")


def _sources(phase: PhaseSweep) -> str:
    found = sorted({c.source for c in phase.costs})
    return " and ".join(found) or "no plans"


def _cells(phase: PhaseSweep) -> tuple[list[str], list[list[str]]]:
    columns = COLUMNS[phase.phase]
    return [h for h, _ in columns], [[cell(c) for _, cell in columns] for c in phase.costs]


DROP_ORDER: dict[str, tuple[str, ...]] = {
    "train": ("temps", "grads", "optim", "params", "acts", "sends", "step"),
    "decode": ("temps", "params", "sends", "KV", "step"),
}
"""Columns given up first to last when a phase's table is wider than the terminal: the
plan, its peak per device, whether it fits and the largest batch stay."""


def _table_phase(phase: PhaseSweep, width: int | None) -> list[str]:
    head, rows = _cells(phase)
    title = f"{_PHASE_NAMES[phase.phase].capitalize()} per device ({_sources(phase)}):"
    return [*_wrapped(title, width, ""), fitted(rows, head, DROP_ORDER[phase.phase], width)]


def _wrapped(text: str, width: int | None, indent: str, hang: str = "  ") -> list[str]:
    return textwrap.wrap(text, width or 100, initial_indent=indent,
                         subsequent_indent=indent + hang, break_on_hyphens=False)


def render_parallel_sweep_table(sweep: ParallelSweep, width: int | None = None) -> str:
    """Plain text, one table per phase, each row one plan; with ``width``, every line fits
    it (columns dropped as in ``report``, then one record per plan; text wrapped)."""
    lines = [*_wrapped(_title(sweep), width, ""), ""]
    for phase in sweep.phases:
        lines += [*_table_phase(phase, width), ""]
    lines += _wrapped(f"{LEGEND}.", width, " ", hang="")
    return "\n".join(lines) + "\n"


def render_parallel_sweep_markdown(sweep: ParallelSweep, width: int | None = None) -> str:
    """Markdown: a heading and one table per phase (``width`` is for the table's sake:
    a markdown table is never cut)."""
    lines = [f"## {_title(sweep)}", ""]
    for phase in sweep.phases:
        head, rows = _cells(phase)
        lines += [f"### {_PHASE_NAMES[phase.phase].capitalize()} per device "
                  f"({_sources(phase)})", "", "| " + " | ".join(head) + " |",
                  "|" + "|".join(["---", *["---:"] * (len(head) - 1)]) + "|"]
        lines += ["| " + " | ".join([f"`{row[0]}`", *row[1:]]) + " |" for row in rows]
        lines.append("")
    lines.append(f"{LEGEND[0].upper()}{LEGEND[1:]}.")
    return "\n".join(lines) + "\n"


def render_parallel_sweep_json(sweep: ParallelSweep, width: int | None = None) -> str:
    """JSON: ``{source, gpus, gpu, memory_bytes, phases: {train|decode: [parallel, ...]}}``
    (``width`` unused)."""
    return json.dumps(text_data(sweep_to_dict(sweep)), indent=2) + "\n"


RENDERERS: dict[str, Callable[[ParallelSweep, int | None], str]] = {
    "table": render_parallel_sweep_table,
    "markdown": render_parallel_sweep_markdown,
    "json": render_parallel_sweep_json,
}
"""The formats ``whatif --gpus`` writes."""

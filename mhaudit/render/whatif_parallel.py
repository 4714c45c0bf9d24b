"""``whatif --gpus`` as a table, markdown or JSON: per-device cost of each split of the GPUs."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable

from mhaudit import units
from mhaudit.data.parallel import ParallelCost
from mhaudit.data.parallel_sweep import ParallelSweep, PhaseSweep, PlanEntry, sweep_to_dict
from mhaudit.render.escape import text_data
from mhaudit.render.fit import fitted

Column = tuple[str, Callable[[ParallelCost], str]]

SHOWN = 12
"""Plans a table shows per phase: the best and the next that fit; the JSON has all."""

_PHASE_NAMES = {"train": "training step", "decode": "decode step"}


def _bytes(field: str) -> Callable[[ParallelCost], str]:
    return lambda c: units.nbytes(getattr(c.per_device_bytes, field))


_PLAN: Column = ("plan", lambda c: c.plan.text().removesuffix(",pp=1").replace(
    "pp_schedule=", "").replace("microbatches=", "m="))
_TAIL: tuple[Column, ...] = (
    ("peak", _bytes("peak")),
    ("sends", lambda c: units.nbytes(c.comm_bytes_per_step.total)),
    ("step", lambda c: units.seconds(c.step_time_s)),
    ("MFU", lambda c: "—" if c.mfu is None else units.percent(c.mfu, 0)),
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
          "gather buffers (temps); peak: their sum plus NCCL buffers, workspace, CUDA context "
          "and fragmentation; ckpt: activation checkpointing; sends: bytes each rank sends per "
          "step; step: a lower bound on the target; MFU: model FLOPs utilisation at that "
          "step; batch: largest micro-batch that fits; best: the plan that fits with the "
          "most throughput (step time per sample across the GPUs)")


def _title(sweep: ParallelSweep) -> str:
    return (f"Parallel what-if: {sweep.source} on {sweep.gpus:,} × {sweep.gpu} "
            f"({units.nbytes(sweep.memory_bytes)} each)")


def _sources(phase: PhaseSweep) -> str:
    found = sorted({c.source for c in phase.costs})
    return " and ".join(found) or "no plans"


def _shown(phase: PhaseSweep) -> list[PlanEntry]:
    """The plans a table lists: those offered, best first, up to :data:`SHOWN`; all of
    them when none is offered, so the reasons show."""
    offered = [e for e in phase.entries if e.dropped is None]
    return offered[:SHOWN] if offered else list(phase.entries[:SHOWN])


def _cells(phase: PhaseSweep) -> tuple[list[str], list[list[str]]]:
    columns = COLUMNS[phase.phase]
    head = ["", columns[0][0], "ckpt", *(h for h, _ in columns[1:])]
    rows = [["best" if e.best else "", columns[0][1](e.cost), e.checkpointing,
             *(cell(e.cost) for _, cell in columns[1:])] for e in _shown(phase)]
    return head, rows


def dropped_summary(phase: PhaseSweep) -> str | None:
    """How many plans were tried and why the others were dropped, by reason kind."""
    dropped = [e.dropped for e in phase.entries if e.dropped]
    offered = len(phase.entries) - len(dropped)
    if not phase.entries:
        return None
    kinds: dict[str, int] = {}
    for why in dropped:
        kind = "do not fit" if why.startswith("does not fit") else why.split(" on ")[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    why = "; ".join(f"{n:,} {k}" for k, n in kinds.items())
    shown = min(offered, SHOWN) if offered else min(len(phase.entries), SHOWN)
    return (f"{len(phase.entries):,} plans tried: {offered:,} fit (the {shown:,} best "
            f"shown), {len(dropped):,} dropped" + (f" ({why})" if why else ""))


DROP_ORDER: dict[str, tuple[str, ...]] = {
    "train": ("temps", "grads", "optim", "params", "acts", "sends", "MFU", "batch", "step"),
    "decode": ("temps", "params", "sends", "KV", "MFU", "batch", "step"),
}
"""Columns given up first to last when a phase's table is wider than the terminal: the
plan, its peak per device, whether it fits and the largest batch stay."""


def _table_phase(phase: PhaseSweep, width: int | None) -> list[str]:
    head, rows = _cells(phase)
    title = f"{_PHASE_NAMES[phase.phase].capitalize()} per device ({_sources(phase)}):"
    summary = dropped_summary(phase)
    return [*_wrapped(title, width, ""), fitted(rows, head, DROP_ORDER[phase.phase], width),
            *(_wrapped(summary + ".", width, "") if summary else [])]


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
        lines += ["| " + " | ".join([row[0], f"`{row[1]}`", *row[2:]]) + " |" for row in rows]
        summary = dropped_summary(phase)
        lines += ["", f"{summary}."] if summary else []
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

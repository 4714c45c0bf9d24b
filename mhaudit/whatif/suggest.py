"""What would make a failing per-GPU budget pass: the smallest change to the checkpointing,
the micro-batch or the plan (the same GPUs), found on the analytic model and confirmed by
running the gate again with the change applied.

Changes are tried smallest first: checkpointing (selective, then every layer), then a smaller
micro-batch, then plans of the same GPU count that change the fewest axes (fastest first
among equals). The first whose analytic peak is within every failing limit is applied, the
audit rerun with it, and the budget judged again: ``passes`` is that verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from typing import Any

from mhaudit.data import Report
from mhaudit.data.gate import GateOutcome, Suggestion
from mhaudit.data.parallel import ParallelCost, ParallelPlan
from mhaudit.whatif.plan_search import ModelShape, candidate_plans

PER_DEVICE = {"train_peak_bytes_per_device": "train", "decode_peak_bytes_per_device": "decode"}
"""Budget metrics a plan's per-GPU peak answers, and the phase each reads."""
CONFIRMATIONS = 3
"""Changes at most rerun in full to confirm one; the analytic model orders them."""
_AXES = ("tp", "sp", "cp", "fsdp", "dp", "ep", "pp")


@dataclass(frozen=True)
class Change:
    """One candidate: its text, the audit options it sets, its analytic peak by phase."""

    text: str
    options: dict[str, Any]
    peaks: dict[str, int]


def failing_limits(outcome: GateOutcome) -> dict[str, float]:
    """Phase -> the per-GPU peak limit it failed."""
    return {PER_DEVICE[r.metric]: r.limit for r in outcome.results
            if r.metric in PER_DEVICE and not r.passed and r.limit is not None}


def actual_peaks(outcome: GateOutcome) -> dict[str, float]:
    """Phase -> the per-GPU peak the gate read, for the failing phases."""
    return {PER_DEVICE[r.metric]: r.actual for r in outcome.results
            if r.metric in PER_DEVICE and not r.passed and r.actual is not None}


def _distance(plan: ParallelPlan, current: ParallelPlan) -> int:
    return sum(getattr(plan, a) != getattr(current, a) for a in _AXES)


def scaled_peak(cost: ParallelCost, share: float) -> int:
    """The per-GPU peak with the batch scaled by ``share``: activations, KV cache and the
    fragmentation margin over them scale, states and the fixed terms do not."""
    held = cost.per_device_bytes
    grows = held.activations + held.kv_cache
    margin = held.fragmentation / held.tensors if held.tensors else 0.0
    return int(held.peak - (1 - share) * grows * (1 + margin))


def candidate_changes(cost_of: Callable[[str, ParallelPlan, str], ParallelCost],
                      actual: dict[str, float], current: ParallelPlan, checkpointing: str,
                      batch: int, shape: ModelShape) -> Iterator[Change]:
    """Changes in the order tried, each with its estimated peak per phase: the analytic
    peak from ``cost_of(phase, plan, checkpointing)`` (at the audited batch, then scaled),
    times the ratio of the ``actual`` per-GPU peak to the analytic one of the current
    setting, so that the analytic model gives the change and the audit the level."""
    level = {p: actual[p] / max(1, cost_of(p, current, checkpointing).per_device_bytes.peak)
             for p in actual}

    def peaks(plan: ParallelPlan, ckpt: str, b: int) -> dict[str, int]:
        return {p: int(scaled_peak(cost_of(p, plan, ckpt), b / batch) * level[p])
                for p in actual}

    if "train" in actual:
        for ckpt in ("selective", "layers"):
            if ckpt != checkpointing:
                yield Change(f"--checkpointing {ckpt}", {"checkpointing": ckpt},
                             peaks(current, ckpt, batch))
    b = batch // 2
    while b >= 1:
        yield Change(f"--batch-size {b}", {"batch_size": b}, peaks(current, checkpointing, b))
        b //= 2
    plans = [p for p in candidate_plans(current.world_size, shape) if p != current]
    plans.sort(key=lambda p: _distance(p, current))
    for plan in plans:
        yield Change(f'parallel = "{plan.text()}"', {"parallel": plan},
                     peaks(plan, checkpointing, batch))


def smallest_change(changes: Iterator[Change], limits: dict[str, float],
                    confirm: Callable[[Change], tuple[bool, int | None]]) -> Suggestion | None:
    """The first change whose analytic peaks are within ``limits`` and that ``confirm``
    (the gate rerun with it) passes; after :data:`CONFIRMATIONS` reruns that do not, the
    last one tried with ``passes`` False; None when no change is within the limits."""
    tried: Suggestion | None = None
    reruns = 0
    for change in changes:
        if any(change.peaks.get(p, 0) > limit for p, limit in limits.items()):
            continue
        passed, peak = confirm(change)
        reruns += 1
        tried = Suggestion(change.text, passed, peak)
        if passed or reruns >= CONFIRMATIONS:
            return tried
    return tried


def options_with(options: Any, change: Change) -> Any:
    """``options`` (AuditOptions) with ``change`` applied."""
    known = {f.name for f in fields(options)}
    return replace(options, **{k: v for k, v in change.options.items() if k in known})


def suggest(target: str, options: Any, budget: Any, outcome: GateOutcome,
            audited: Report | None = None) -> Suggestion | None:
    """The smallest change that makes ``outcome``'s failing per-GPU limits pass for
    ``target`` audited with ``options`` (AuditOptions) under ``budget``; None when no
    per-GPU limit failed or no change is within them on the analytic model. ``audited``
    is the report the gate judged, when the caller has it (the target is then loaded
    again, not audited again)."""
    from mhaudit.api import audit_loaded, audit_target
    from mhaudit.contain.capture import captured_logs
    from mhaudit.contain.contain import preserved_state, process_guard
    from mhaudit.contain.offline import hub_offline
    from mhaudit.gate.budget import evaluate
    from mhaudit.load.target import load_target, model_folder
    from mhaudit.parallel import as_plan
    from mhaudit.whatif.parallel_sweep import model_shape, phase_cost

    limits = failing_limits(outcome)
    if not limits:
        return None
    plan = as_plan(options.parallel) if options.parallel is not None else ParallelPlan()
    with preserved_state(model_folder(target)), hub_offline(), captured_logs(), \
            process_guard(target):
        loaded = load_target(target, device=options.device, batch_size=options.batch_size,
                             seq_len=options.seq_len, input_shape=options.input_shape,
                             input_shapes=options.input_shapes)
        report = audited if audited is not None else audit_loaded(loaded, options)
        shape = model_shape(report, loaded)
    batch = max((b.layout.batch_size for b in report.blocks), default=1)

    def cost_of(phase: str, candidate: ParallelPlan, ckpt: str) -> ParallelCost:
        return phase_cost(report, loaded, options, phase, candidate, ckpt)

    def confirm(change: Change) -> tuple[bool, int | None]:
        again = evaluate(audit_target(target, options_with(options, change)), budget)
        results = [r for r in again.results if r.metric in PER_DEVICE]
        peak = max((int(r.actual) for r in results if r.actual is not None), default=None)
        return all(r.passed for r in results), peak

    changes = candidate_changes(cost_of, actual_peaks(outcome), plan,
                                str(options.checkpointing), batch, shape)
    return smallest_change(changes, limits, confirm)

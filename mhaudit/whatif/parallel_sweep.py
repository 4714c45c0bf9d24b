"""``whatif --gpus``: load a model once, cost one or both phases under every plan of the
GPUs (:mod:`mhaudit.whatif.plan_search`), the best marked."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mhaudit.cost.devices import get_profile
from mhaudit.data import Report
from mhaudit.data.parallel import ParallelCost, ParallelPlan
from mhaudit.data.parallel_sweep import ParallelSweep, PhaseSweep
from mhaudit.options import AuditOptions
from mhaudit.whatif.plan_search import ModelShape, search


def model_shape(report: Report, loaded: Any) -> ModelShape:
    """Layers, tokens and experts of the audited model, as the search reads them."""
    from mhaudit.parallel.roles import fsdp_units

    layers = sum(1 for unit in fsdp_units(loaded.module, report.blocks) if unit)
    seq = max((b.layout.seq_len_q for b in report.blocks), default=1)
    experts = min((x.num_experts for x in report.experts), default=0)
    batch = max((b.layout.batch_size for b in report.blocks), default=1)
    return ModelShape(max(1, layers), seq, experts, batch)


def phase_cost(report: Report, loaded: Any, opts: AuditOptions, phase: str,
               plan: ParallelPlan, checkpointing: str) -> ParallelCost:
    """``phase`` of the audited model under ``plan`` on the analytic model, fed the
    single-device phase of the same run; ``checkpointing`` applies to training."""
    from mhaudit.parallel import plan_costs

    single: dict[str, Any] = ({"training": report.training, "checkpointing": checkpointing}
                              if phase == "train" else {"decode": report.decode})
    return plan_costs(loaded.module, loaded.args, loaded.kwargs, report.blocks, plan,
                      get_profile(opts.gpu), phase, dtype=report.model.dtype,
                      precision=str(opts.precision), optimizer=str(opts.optimizer),
                      context=opts.context, use_torch=False, reserve=dict(opts.reserve),
                      experts=report.experts, **single)


def _phase(report: Report, loaded: Any, opts: AuditOptions, phase: str, gpus: int,
           sp: bool) -> PhaseSweep:
    profile = get_profile(opts.gpu)

    def cost_of(plan: ParallelPlan, checkpointing: str) -> ParallelCost:
        return phase_cost(report, loaded, opts, phase, plan, checkpointing)

    entries = search(cost_of, gpus, model_shape(report, loaded), profile.memory_bytes,
                     train=phase == "train", gpus_per_node=profile.gpus_per_node, sp_only=sp)
    return PhaseSweep(phase, entries)


def parallel_whatif(target: str, options: AuditOptions, gpus: int, *, sp: bool = False
                    ) -> ParallelSweep:
    """Audit ``target`` with the phases ``options`` ask for (the training step when neither
    is), then cost each of them under every plan of ``gpus`` GPUs the search tries (``sp``:
    tensor-parallel plans with sequence parallelism only) on the analytic model, fed the
    single-device phase figures of the same run, and rank them."""
    from mhaudit.api import audit_loaded
    from mhaudit.contain.capture import captured_logs
    from mhaudit.contain.contain import preserved_state, process_guard, time_limit
    from mhaudit.contain.offline import hub_offline
    from mhaudit.load.target import load_target, model_folder
    from mhaudit.parallel import sweep_plans

    sweep_plans(gpus, sp=sp)  # a bad count fails before the model is built
    if not (options.train or options.decode):
        options = replace(options, train=True)
    with preserved_state(model_folder(target)), hub_offline(), captured_logs(), \
            time_limit(options.timeout), process_guard(target):
        loaded = load_target(target, device=options.device, batch_size=options.batch_size,
                             seq_len=options.seq_len, input_shape=options.input_shape,
                             input_shapes=options.input_shapes)
        report = audit_loaded(loaded, options)
        phases = tuple(_phase(report, loaded, options, phase, gpus, sp)
                       for phase, asked in (("train", options.train),
                                            ("decode", options.decode)) if asked)
    profile = get_profile(options.gpu)
    return ParallelSweep(loaded.source, gpus, profile.name, profile.memory_bytes, phases)

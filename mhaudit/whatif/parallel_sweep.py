"""``whatif --gpus``: load a model once, cost one or both phases under every split of the GPUs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mhaudit.cost.devices import get_profile
from mhaudit.data import Report
from mhaudit.data.parallel_sweep import ParallelSweep, PhaseSweep
from mhaudit.options import AuditOptions


def _phase(report: Report, loaded: Any, opts: AuditOptions, phase: str, gpus: int,
           sp: bool) -> PhaseSweep:
    from mhaudit.parallel import sweep_costs

    single: dict[str, Any] = ({"training": report.training} if phase == "train"
                              else {"decode": report.decode})
    costs = sweep_costs(loaded.module, loaded.args, loaded.kwargs, report.blocks, gpus,
                        get_profile(opts.gpu), phase, sp=sp, dtype=report.model.dtype,
                        precision=str(opts.precision), optimizer=str(opts.optimizer),
                        context=opts.context, **single)
    return PhaseSweep(phase, costs)


def parallel_whatif(target: str, options: AuditOptions, gpus: int, *, sp: bool = False
                    ) -> ParallelSweep:
    """Audit ``target`` with the phases ``options`` ask for (the training step when neither
    is), then cost each of them under every ``tp × fsdp = gpus`` plan on the analytic
    model, fed the single-device phase figures of the same run."""
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

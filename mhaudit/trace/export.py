"""Trace stage: a module and its inputs become an aten-level fx graph, no real compute."""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
)
from torch.fx.experimental.symbolic_shapes import (
    GuardOnDataDependentSymNode,
    free_unbacked_symbols,
)

from mhaudit.data.tracing import DataDependence
from mhaudit.errors import TraceError, first_line, type_name
from mhaudit.trace.guards import (
    NESTED_LIMITATION,
    NESTED_TIP,
    move_stray_tensors,
    nested_failure,
    nested_inputs,
    plain_autocast,
)
from mhaudit.trace.ran import (
    missing_input,
    raised_in_model_code,
    require_plain_forward,
    require_ran,
)
from mhaudit.trace.real import CpuTwin, plan_real_forward, real_record
from mhaudit.trace.recorder import record
from mhaudit.trace.traced import TracedGraph, output_tensors, strip_wrapper

__all__ = ["TRACERS", "CpuTwin", "Subject", "TracedGraph", "output_tensors", "strip_wrapper",
           "trace"]


@dataclass(frozen=True)
class Subject:
    """What every rung traces: the model, its inputs, and how to build it on CPU."""

    model: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    twin: CpuTwin | None = None
    """The same model built again on CPU (for the real rung); None when unknown."""
    dtype: torch.dtype | None = None
    """Floating dtype of the fake records' state and inputs (the audited one; None keeps
    the model's own); export and the real rung trace at the model's own."""


Tracer = Callable[[Subject], TracedGraph]


class _FlatOutputs(nn.Module):
    """Runs the model and returns only the tensors in its output.

    Outputs such as key/value cache objects are not traceable containers; the
    audit needs the computation, not the output structure.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.m = model

    def forward(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, ...]:
        return tuple(output_tensors(self.m(*args, **kwargs)))


def refuse_unbacked(graph: torch.fx.Graph) -> None:
    """Raise TraceError when a value in ``graph`` has a data-dependent (unbacked) size:
    costs read off such a graph would be guesses, so the later rungs answer instead."""
    for node in graph.nodes:
        value = node.meta.get("val")
        if value is None:
            continue
        symbols = free_unbacked_symbols(value)
        if symbols:
            names = ", ".join(sorted(str(s) for s in symbols))
            raise TraceError(f"{node.target} gives a size or value that depends on the "
                             f"data ({names})",
                             "A real forward or a stated bound answers on a later rung.")


def _export(strict: bool) -> Tracer:
    def run(subject: Subject) -> TracedGraph:
        program = torch.export.export(_FlatOutputs(subject.model), subject.args,
                                      subject.kwargs, strict=strict)
        refuse_unbacked(program.graph_module.graph)
        sig = program.graph_signature
        return TracedGraph(
            graph=program.graph_module.graph,
            method="torch.export" + ("-strict" if strict else ""),
            params={k: strip_wrapper(v) for k, v in sig.inputs_to_parameters.items()},
            buffers={k: strip_wrapper(v) for k, v in sig.inputs_to_buffers.items()},
            user_inputs=tuple(sig.user_inputs),
        )

    return run


def _first_record(subject: Subject) -> TracedGraph:
    """The recorder over fake tensors, where its graph answers as export's would.

    It refuses (so export runs next) where the record is not a faithful graph: a value
    read from the data (``.item()``, a branch on a tensor) that fake tensors cannot hold.
    """
    return record(subject.model, subject.args, subject.kwargs, fake=True, guess=False,
                  method="dispatch-record", dtype=subject.dtype)


def _real(subject: Subject) -> TracedGraph:
    """A real forward: the model's own weights, or its CPU twin where that fits."""
    traced, decision = real_record(subject.model, subject.args, subject.kwargs, subject.twin)
    return replace(traced, data_dependent=DataDependence(traced.method, (), decision))


def _bounded(subject: Subject) -> TracedGraph:
    """The recorder over fake tensors, data-dependent values at stated bounds (meta only)."""
    on_meta = any(p.device.type == "meta" for p in subject.model.parameters())
    return record(subject.model, subject.args, subject.kwargs, fake=True, guess=on_meta,
                  dtype=subject.dtype)


TRACERS: tuple[tuple[str, Tracer], ...] = (
    ("dispatch-record", _first_record),
    ("torch.export", _export(strict=False)),
    ("torch.export-strict", _export(strict=True)),
    ("dispatch-real", _real),
    ("dispatch-fake", _bounded),
)
"""The ladder, tried in order until one succeeds: a dispatch recorder over fake tensors
that refuses data-dependent values, export, strict export (both refusing data-dependent
sizes), a real forward (the model's own weights, or the model built again on CPU where it
fits; next after the first record when that met a value read from the data), and the
fake recorder reading data-dependent values at stated bounds."""

DATA_DEPENDENT = (DataDependentOutputException, DynamicOutputShapeException,
                  GuardOnDataDependentSymNode)
"""What fake tensors raise at a value read from the data. When the first record raises
one, the real rung runs next: export would meet the same value (and fail, or give sizes
that are guesses), where a real forward gives every shape exactly."""

MODEL_CODE_ERRORS = (AttributeError, KeyError, IndexError, NameError, TypeError, ValueError)
"""Errors of the model's own Python code (a config without a field, a wrong argument).
Fake tensors and export raise torch's own errors (runtime, unsupported, data-dependent)."""

_TENSOR_KIND_WORDS = ("meta", "fake", "symbolic", "symint")
"""Words of an error about the tensors a rung ran on, not about the model's code."""

_REAL_REFUSED = ("the record and export both raised {} in the model's code, "
                 "which a real forward raises too")


class NotRun(Exception):
    """A rung left out: why the ladder did not run it."""


def _raised_by_the_model(failures: list[tuple[str, BaseException]]) -> bool:
    """The record and export, which run the model's Python code in two different ways,
    raised the same error of that code: it raises on any tensors, so a real forward (and
    building the model again on CPU for it, the ladder's one costly rung) would too."""
    found = dict(failures)
    record, export = found.get("dispatch-record"), found.get("torch.export")
    if not isinstance(record, MODEL_CODE_ERRORS) or export is None:
        return False
    if any(word in str(record).lower() for word in _TENSOR_KIND_WORDS):
        return False  # about the tensors both ran on (".numpy() of a meta tensor")
    return type(record) is type(export) and str(record) == str(export)


TRACER_ENV = "MHAUDIT_TRACER"
"""Environment variable naming the first rung to try (``torch.export`` skips the record);
the rungs after it stay as fallbacks."""


def _ladder() -> tuple[tuple[str, Tracer], ...]:
    first = os.environ.get(TRACER_ENV, "").strip()
    names = [name for name, _ in TRACERS]
    if not first:
        return TRACERS
    if first not in names:
        raise TraceError(f"{TRACER_ENV}={first!r} names no tracer",
                         f"Use one of: {', '.join(names)}.")
    return TRACERS[names.index(first):]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    loggers = [logging.getLogger(n) for n in ("torch._dynamo", "torch.export", "torch._export")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def trace(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
          twin: CpuTwin | None = None, first_rung_only: bool = False,
          dtype: torch.dtype | None = None) -> TracedGraph:
    """Run the tracer ladder; raise TraceError naming each rung's first cause.

    ``dtype`` is the floating dtype the fake records run at (the audited one).
    ``twin`` builds the same model on CPU for a real forward when the model is on meta.
    ``first_rung_only`` tries only the ladder's first rung (a folded model, which is
    traced whole when that fails).
    A graph from a forward that did not run (see :func:`mhaudit.trace.ran.require_ran`)
    is refused, whichever rung produced it.
    """
    require_plain_forward(model)
    if nested_inputs((args, kwargs)):
        raise TraceError(NESTED_LIMITATION, NESTED_TIP)
    was_training = model.training
    model.eval()
    move_stray_tensors(model, (args, kwargs))
    subject = Subject(model, args, kwargs, twin, dtype)
    failures: list[tuple[str, BaseException]] = []
    try:
        with _quiet(), plain_autocast():
            pending = list(_ladder())
            while pending:
                name, tracer = pending.pop(0)
                try:
                    traced = tracer(subject)
                except Exception as exc:
                    failures.append((name, exc))
                    if first_rung_only:
                        pending.clear()
                    elif name == "dispatch-record" and isinstance(exc, DATA_DEPENDENT):
                        pending.sort(key=lambda rung: rung[0] != "dispatch-real")
                    elif _raised_by_the_model(failures):
                        failures.extend((rung, NotRun(_REAL_REFUSED.format(first_line(exc))))
                                        for rung, _ in pending if rung == "dispatch-real")
                        pending = [rung for rung in pending if rung[0] != "dispatch-real"]
                else:
                    require_ran(model, traced)
                    return _with_causes(traced, failures, subject)
    finally:
        model.train(was_training)
    if nested_failure(failures):
        raise TraceError(NESTED_LIMITATION, NESTED_TIP) from failures[0][1]
    raise _failed(model, args, kwargs, failures) from _furthest(failures)[1]


def _failed(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
            failures: list[tuple[str, BaseException]]) -> TraceError:
    """One line for a ladder where every rung failed: the input that forward raised on
    because the inputs left it out, else the rung that got furthest and its first error;
    each rung's own error goes to ``detail`` (shown with --verbose)."""
    name, furthest = _furthest(failures)
    detail = "\n".join(f"{rung}: {first_line(exc)}" for rung, exc in failures)
    missing = next(filter(None, (missing_input(model, args, kwargs, exc)
                                 for exc in (furthest, *(e for _, e in failures)))), None)
    if missing is not None:
        return TraceError(
            f"could not trace {type_name(model)}: forward() needs {missing}, which the "
            f"inputs leave out ({RUNG_WORDS.get(name, name)} raised {first_line(furthest, 80)})",
            "Write a model file with build_model() and an example_inputs() that gives it "
            "(see the README).", detail=detail)
    return TraceError(
        f"could not trace {type_name(model)}: {RUNG_WORDS.get(name, name)} got furthest and "
        f"raised {first_line(furthest, 120)}"
        + (f" ({len(failures) - 1} other tracers failed too)" if len(failures) > 1 else ""),
        "Make example_inputs() match forward(); --verbose shows each tracer's error.",
        detail=detail,
    )


RUNG_WORDS = {
    "dispatch-record": "the fake-tensor record",
    "torch.export": "torch.export",
    "torch.export-strict": "strict torch.export",
    "dispatch-real": "the real forward",
    "dispatch-fake": "the fake-tensor record at stated bounds",
}
"""Each rung in plain words, as an error line names it."""

_FAITHFUL = ("dispatch-real", "dispatch-record", "dispatch-fake", "torch.export",
             "torch.export-strict")
"""Rungs from the one whose error says most about the model to the one that says least:
a real forward raises what the model raises; export raises its own limits too."""


def _furthest(failures: list[tuple[str, BaseException]]) -> tuple[str, BaseException]:
    """The rung that got furthest: one whose error was raised while the model's own code
    ran (a frame outside torch and mhaudit on its traceback), the most faithful first; a
    rung left out (:class:`NotRun`) never counts."""
    ran = [(name, exc) for name, exc in failures if not isinstance(exc, NotRun)] or failures

    def rank(failure: tuple[str, BaseException]) -> tuple[bool, int]:
        name, exc = failure
        order = _FAITHFUL.index(name) if name in _FAITHFUL else len(_FAITHFUL)
        return (not raised_in_model_code(exc), order)

    return min(ran, key=rank)


def _with_causes(traced: TracedGraph, failures: list[tuple[str, BaseException]],
                 subject: Subject) -> TracedGraph:
    """The graph with the earlier rungs' causes on its data-dependence record, and with
    why the real rung did not answer where a later one did."""
    dependence = traced.data_dependent
    if dependence is None:
        return traced
    causes = tuple((name, first_line(exc)) for name, exc in failures)
    real = dependence.real_forward
    refused = [exc for name, exc in failures if name == "dispatch-real"]
    if real is None and refused:
        real = plan_real_forward(subject.model, subject.twin)
        if real.ran:  # allowed, but the forward itself failed
            real = replace(real, ran=False,
                           reason=f"the real forward failed: {first_line(refused[0])}")
    return replace(traced, data_dependent=replace(dependence, causes=causes,
                                                  real_forward=real))

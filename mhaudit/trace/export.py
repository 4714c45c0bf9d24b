"""Trace stage: a module and its inputs become an aten-level fx graph, no real compute."""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from mhaudit.errors import TraceError, first_line
from mhaudit.trace.guards import move_stray_tensors, plain_autocast
from mhaudit.trace.ran import require_plain_forward, require_ran
from mhaudit.trace.recorder import record
from mhaudit.trace.traced import TracedGraph, output_tensors, strip_wrapper

__all__ = ["TRACERS", "TracedGraph", "output_tensors", "strip_wrapper", "trace"]

Tracer = Callable[[nn.Module, tuple[Any, ...], dict[str, Any]], "TracedGraph"]


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


def _export(strict: bool) -> Tracer:
    def run(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TracedGraph:
        program = torch.export.export(_FlatOutputs(model), args, kwargs, strict=strict)
        sig = program.graph_signature
        return TracedGraph(
            graph=program.graph_module.graph,
            method="torch.export" + ("-strict" if strict else ""),
            params={k: strip_wrapper(v) for k, v in sig.inputs_to_parameters.items()},
            buffers={k: strip_wrapper(v) for k, v in sig.inputs_to_buffers.items()},
            user_inputs=tuple(sig.user_inputs),
        )

    return run


def _first_record(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
                  ) -> TracedGraph:
    """The recorder over fake tensors, where its graph answers as export's would.

    It refuses (so export runs next) where the record is not a faithful graph: a value
    read from the data (``.item()``, a branch on a tensor) that fake tensors cannot hold.
    """
    return record(model, args, kwargs, fake=True, guess=False, method="dispatch-record")


def _dispatch(fake: bool) -> Tracer:
    def run(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TracedGraph:
        on_meta = any(p.device.type == "meta" for p in model.parameters())
        if not fake and on_meta:
            raise TraceError("a real forward needs real weights", "Build with --device cpu.")
        return record(model, args, kwargs, fake=fake, guess=on_meta)

    return run


TRACERS: tuple[tuple[str, Tracer], ...] = (
    ("dispatch-record", _first_record),
    ("torch.export", _export(strict=False)),
    ("torch.export-strict", _export(strict=True)),
    ("dispatch-fake", _dispatch(fake=True)),
    ("dispatch-real", _dispatch(fake=False)),
)
"""The ladder, tried in order until one succeeds: a dispatch recorder over fake tensors
that refuses data-dependent values, export, strict export, the recorder again reading
data-dependent values as 0, and (with real weights only) one over a real forward."""

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


def trace(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TracedGraph:
    """Run the tracer ladder; raise TraceError naming each rung's first cause.

    A graph from a forward that did not run (see :func:`mhaudit.trace.ran.require_ran`)
    is refused, whichever rung produced it.
    """
    require_plain_forward(model)
    was_training = model.training
    model.eval()
    move_stray_tensors(model, (args, kwargs))
    failures: list[tuple[str, BaseException]] = []
    try:
        with _quiet(), plain_autocast():
            for name, tracer in _ladder():
                try:
                    traced = tracer(model, args, kwargs)
                except Exception as exc:
                    failures.append((name, exc))
                else:
                    require_ran(model, traced)
                    return traced
    finally:
        model.train(was_training)
    causes = "; ".join(f"{name}: {first_line(exc)}" for name, exc in failures)
    raise TraceError(
        f"could not trace {type(model).__name__} ({causes})",
        "Check that example_inputs() match forward() and that forward has no "
        "data-dependent Python control flow on tensor values.",
    ) from failures[0][1]

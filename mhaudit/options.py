"""Audit options: every option of an audit, the values it takes, and the checks on them."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, TypeVar

from mhaudit.cost.devices import DEFAULT_GPU, canonical_dtype, get_profile
from mhaudit.data.parallel import ParallelPlan
from mhaudit.errors import ConfigError
from mhaudit.load.device import parse_device
from mhaudit.parallel.plan import as_plan, parse_plan
from mhaudit.progress import OnStage
from mhaudit.rules import RuleConfig

MAX_SIZE = 2**40
"""Largest batch, length, context or dimension accepted: beyond it no shape is meant."""

MAX_TRACED_DIM = 2**24
"""Largest size of one dimension of a traced input (the batch, the first ``--seq-len``, each
``--input-shape`` size): 16,777,216. Lengths beyond it are costed by arithmetic (a further
``--seq-len`` item, ``--context``), never traced."""
MAX_TRACED_ELEMENTS = 2**28
"""Most elements of one traced input (batch × length, or an input shape's product). With
each dimension at most ``MAX_TRACED_DIM``, a b·h·n² score tensor stays far inside torch's
64-bit storage size, so no size the user gives can overflow it."""

Progress = Callable[[int, int], None]
"""Called with (done, total) while a long step runs."""

C = TypeVar("C", bound="Choice")


class Choice(str, Enum):
    """A closed set of option values; members compare and print as their text."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @classmethod
    def values(cls) -> tuple[str, ...]:
        """The accepted spellings, in declaration order."""
        return tuple(member.value for member in cls)

    @classmethod
    def parse(cls: type[C], value: Any, what: str) -> C:
        """``value`` as a member, or a ConfigError that lists the accepted values."""
        try:
            return cls(value)
        except ValueError:
            raise ConfigError(f"unknown {what} {value!r}",
                              f"Use one of: {', '.join(cls.values())}.") from None


class Optimizer(Choice):
    """The optimizer of a training step."""

    ADAMW = "adamw"
    ADAM = "adam"
    SGD = "sgd"
    SGD_MOMENTUM = "sgd-momentum"
    NONE = "none"


class Precision(Choice):
    """How a training step holds weights and computes: fp32, pure bf16, or bf16 autocast."""

    FP32 = "fp32"
    BF16 = "bf16"
    BF16_MIXED = "bf16-mixed"


class Checkpointing(Choice):
    """Activation checkpointing in the backward."""

    NONE = "none"
    LAYERS = "layers"


class FlopsBackend(Choice):
    """Who counts whole-model FLOPs: mhaudit's formulas, or fvcore beside them."""

    GRAPH = "graph"
    FVCORE = "fvcore"


_CHOICES: dict[str, type[Choice]] = {
    "optimizer": Optimizer,
    "precision": Precision,
    "checkpointing": Checkpointing,
    "flops_backend": FlopsBackend,
}
_WHAT = {"optimizer": "optimizer", "precision": "precision",
         "checkpointing": "checkpointing", "flops_backend": "FLOPs backend"}
_TEXT_EXAMPLES = {"device": "meta", "dtype": "bfloat16", "gpu": DEFAULT_GPU}


@dataclass(frozen=True)
class AuditOptions:
    """How to build, trace and cost a model."""

    batch_size: int = 1
    """Batch size for inferred inputs."""
    seq_len: int = 128
    """Sequence length for inferred inputs."""
    device: str = "meta"
    """Where to build the model: ``meta`` (nothing allocated), ``cpu`` or ``cuda[:i]``."""
    dtype: str = "bfloat16"
    """Element type that bytes and kernels are costed at."""
    gpu: str = DEFAULT_GPU
    """Target GPU profile for kernels and roofline estimates (a name or an alias)."""
    tensor_parallel: int | None = None
    """Tensor-parallel degree for MHA008."""
    input_shape: tuple[int, ...] | None = None
    """Shape of a single unnamed input tensor, overriding example_inputs()."""
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """Inputs by name and shape (a mapping is accepted), e.g.
    ``{"input_features": (1, 80, 3000)}``: added to, or replacing, the other inputs."""
    rule_config: RuleConfig | None = None
    """Rule selection, severities and thresholds; None for the defaults."""
    scaling_seq_lens: tuple[int, ...] = ()
    """Sequence lengths to project block costs to."""
    flops_backend: FlopsBackend | str = FlopsBackend.GRAPH
    """``graph`` (mhaudit's formulas), or ``fvcore`` to add fvcore's figure for comparison."""
    fold: bool = True
    """Trace one representative of repeated identical layers and multiply its costs."""
    repeats: int = 10
    """Timed forwards when measuring on cpu or cuda."""
    progress: Progress | None = None
    """Called with (done, total) while measuring."""
    on_stage: OnStage | None = None
    """Called with each stage's name as the audit enters it (``loading``, ``building``,
    ``tracing``, ``detecting``, ``costing``, ``phases``, ``measuring``)."""
    timeout: float | None = None
    """Seconds building and tracing may take before the audit gives up (None: no limit)."""
    train: bool = False
    """Add a ``training`` section: one optimizer step measured on fake tensors."""
    optimizer: Optimizer | str = Optimizer.ADAMW
    """``adamw``, ``adam``, ``sgd``, ``sgd-momentum`` or ``none`` (with ``train``)."""
    precision: Precision | str = Precision.FP32
    """``fp32``, ``bf16`` or ``bf16-mixed`` (with ``train``)."""
    checkpointing: Checkpointing | str = Checkpointing.NONE
    """``none`` or ``layers``: recompute each repeated layer in the backward (with ``train``)."""
    decode: bool = False
    """Add a ``decode`` section: one generation step at ``context``."""
    context: int | None = None
    """Cached tokens for the decode step; None means the audited sequence length."""
    verify: bool = False
    """Check the FLOPs and the inference peak against torch's FlopCounterMode and
    MemTracker on fake tensors of the same model (``report.verification``)."""
    parallel: ParallelPlan | str | None = None
    """Parallel plan the training and decode steps are costed under per device, a plan or
    its text (``tp=8,sp,fsdp=8,pp=1``); None for one GPU."""
    reserve: tuple[tuple[str, str], ...] = ()
    """Sizes of the memory beyond tensors under ``parallel``, by term: ``{"cuda_context":
    "600MiB", "fragmentation": "8%"}`` (a mapping is accepted); terms left out come from
    the environment or the libraries' defaults."""

    def __post_init__(self) -> None:
        if isinstance(self.input_shapes, Mapping):
            object.__setattr__(self, "input_shapes", tuple(
                (name, tuple(shape) if isinstance(shape, (list, tuple)) else shape)
                for name, shape in self.input_shapes.items()))
        # Accepted spellings become their enum member; anything else is left for validate()
        # to refuse with a message, so that building options never raises.
        for name, kind in _CHOICES.items():
            value = getattr(self, name)
            if isinstance(value, str) and value in kind.values():
                object.__setattr__(self, name, kind(value))
        if isinstance(self.reserve, Mapping):
            object.__setattr__(self, "reserve", tuple(
                (str(k), str(v)) for k, v in self.reserve.items()))
        if isinstance(self.parallel, str):
            with contextlib.suppress(ConfigError):  # validate() refuses it with the message
                object.__setattr__(self, "parallel", parse_plan(self.parallel))

    @property
    def checked_tensor_parallel(self) -> int | None:
        """The degree the rules check (MHA008, MHA011): ``tensor_parallel``, else the plan's
        ``tp`` when it is above 1."""
        if self.tensor_parallel is not None:
            return self.tensor_parallel
        plan = self.parallel
        return plan.tp if isinstance(plan, ParallelPlan) and plan.tp > 1 else None

    def validate(self) -> None:
        """Raise ConfigError for values no stage can use: wrong types, ranges, empty lists."""
        check_options(self)


def resolve_options(options: AuditOptions | None, overrides: dict[str, Any]) -> AuditOptions:
    """``options`` with ``overrides`` applied and validated; unknown names are refused."""
    if options is not None and not isinstance(options, AuditOptions):
        raise ConfigError(f"options must be an AuditOptions, not {type(options).__name__}",
                          "Pass options=AuditOptions(...) or the fields as keywords.")
    fields = [f.name for f in dataclasses.fields(AuditOptions)]
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ConfigError(f"unknown audit option {unknown[0]!r}",
                          f"Valid options: {', '.join(fields)}.")
    opts = replace(options or AuditOptions(), **overrides)
    opts.validate()
    return opts


def check_size(name: str, value: Any) -> None:
    """Refuse anything but a whole number in 1..MAX_SIZE."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer, not {value!r}",
                          f"Pass {name} as a whole number, e.g. 1.")
    if not 1 <= value <= MAX_SIZE:
        raise ConfigError(f"{name} {value} is out of range", f"Use 1 to {MAX_SIZE:,}.")


def check_phase_options(optimizer: Any, precision: Any, checkpointing: Any) -> None:
    """Raise ConfigError for a training step no optimizer, precision or recompute can run."""
    Optimizer.parse(optimizer, "optimizer")
    Precision.parse(precision, "precision")
    Checkpointing.parse(checkpointing, "checkpointing")


def _check_reserve(reserve: Any) -> None:
    from mhaudit.cost.overhead import parse_reserve

    pairs = isinstance(reserve, tuple) and all(
        isinstance(p, tuple) and len(p) == 2 and all(isinstance(x, str) for x in p)
        for p in reserve)
    if not pairs:
        raise ConfigError(f"reserve must map memory terms to sizes, not {reserve!r}",
                          "Pass e.g. reserve={\"cuda_context\": \"600MiB\"}.")
    parse_reserve(dict(reserve))


def check_options(opts: AuditOptions) -> None:
    """Raise ConfigError for option values no stage can use."""
    _check_sizes(opts)
    for name, example in _TEXT_EXAMPLES.items():
        if not isinstance(getattr(opts, name), str):
            raise ConfigError(f"{name} must be a string, not {getattr(opts, name)!r}",
                              f"Pass {name} as text, e.g. {name}={example!r}.")
    for name, kind in _CHOICES.items():
        kind.parse(getattr(opts, name), _WHAT[name])
    if opts.timeout is not None and (
        isinstance(opts.timeout, bool) or not isinstance(opts.timeout, (int, float))
        or not 0 < opts.timeout <= 86400
    ):
        raise ConfigError(f"timeout must be a number of seconds in (0, 86400], "
                          f"not {opts.timeout!r}", "Pass e.g. timeout=60.")
    for name in ("train", "decode", "fold", "verify"):
        if not isinstance(getattr(opts, name), bool):
            raise ConfigError(f"{name} must be True or False, not {getattr(opts, name)!r}",
                              f"Pass {name}=True or {name}=False.")
    if opts.rule_config is not None and not isinstance(opts.rule_config, RuleConfig):
        raise ConfigError("rule_config must be a RuleConfig", "Build one with RuleConfig(...).")
    if opts.progress is not None and not callable(opts.progress):
        raise ConfigError("progress must be callable with (done, total)", "Pass a function.")
    if opts.on_stage is not None and not callable(opts.on_stage):
        raise ConfigError("on_stage must be callable with a stage name", "Pass a function.")
    _check_parallel(opts)
    _check_reserve(opts.reserve)
    if opts.flops_backend == FlopsBackend.FVCORE and opts.device == "meta":
        raise ConfigError("the fvcore backend runs real compute and cannot use meta tensors",
                          "Add --device cpu to compare against fvcore.")
    canonical_dtype(opts.dtype)
    get_profile(opts.gpu)
    parse_device(opts.device)


def _check_parallel(opts: AuditOptions) -> None:
    """A plan parses, costs a phase that runs, and agrees with ``tensor_parallel``."""
    if opts.parallel is None:
        return
    plan = as_plan(opts.parallel)
    if not (opts.train or opts.decode):
        raise ConfigError("a parallel plan costs the training or the decode step, and "
                          "neither is asked", "Add train=True or decode=True (--train, --decode).")
    if opts.tensor_parallel is not None and opts.tensor_parallel != plan.tp:
        raise ConfigError(f"tensor_parallel {opts.tensor_parallel} disagrees with the plan's "
                          f"tp={plan.tp}", "Give the degree once, in the plan.")


def _check_sizes(opts: AuditOptions) -> None:
    check_size("batch_size", opts.batch_size)
    check_size("seq_len", opts.seq_len)
    check_size("repeats", opts.repeats)
    if opts.tensor_parallel is not None:
        check_size("tensor_parallel", opts.tensor_parallel)
    if opts.context is not None and (isinstance(opts.context, bool)
                                     or not isinstance(opts.context, int)
                                     or not 0 <= opts.context <= MAX_SIZE):
        raise ConfigError(f"context must be a whole number of cached tokens in 0..{MAX_SIZE:,}, "
                          f"not {opts.context!r}", "Pass e.g. context=4096.")
    if not isinstance(opts.scaling_seq_lens, (tuple, list)):
        raise ConfigError("scaling_seq_lens must be a tuple of lengths",
                          "Pass e.g. scaling_seq_lens=(512, 2048).")
    for n in opts.scaling_seq_lens:
        check_size("scaling_seq_lens item", n)
    _check_traced(opts)
    if opts.input_shape is not None:
        if not isinstance(opts.input_shape, (tuple, list)) or not opts.input_shape:
            raise ConfigError("input_shape must be a non-empty tuple of sizes",
                              "Pass e.g. input_shape=(1, 128).")
        for dim in opts.input_shape:
            check_size("input_shape item", dim)
    _check_named_shapes(opts.input_shapes)


def _check_named_shapes(shapes: Any) -> None:
    tip = "Pass e.g. input_shapes={\"input_features\": (1, 80, 3000)}."
    if not isinstance(shapes, (tuple, list)):
        raise ConfigError("input_shapes must map input names to shapes", tip)
    names: set[str] = set()
    for item in shapes:
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise ConfigError("input_shapes must map input names to shapes", tip)
        name, shape = item
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"input name {name!r} is not an identifier", tip)
        if name in names:
            raise ConfigError(f"input {name!r} is given two shapes", "Give each input once.")
        names.add(name)
        if not isinstance(shape, (tuple, list)) or not shape:
            raise ConfigError(f"the shape of input {name!r} must be a non-empty tuple of sizes",
                              tip)
        for dim in shape:
            check_size(f"input_shapes[{name!r}] item", dim)


def _check_traced(opts: AuditOptions) -> None:
    """The sizes the traced forward is built from, within what torch can hold."""
    if not (opts.input_shape or opts.input_shapes):
        check_traced_shape(("batch_size", "seq_len"), (opts.batch_size, opts.seq_len))
    if opts.input_shape:
        check_traced_shape(("input_shape",), tuple(opts.input_shape))
    for name, shape in opts.input_shapes:
        check_traced_shape((f"input_shapes[{name!r}]",), tuple(shape))


def check_traced_shape(names: tuple[str, ...], shape: tuple[int, ...]) -> None:
    """Refuse a shape torch would be asked to build beyond :data:`MAX_TRACED_DIM` per
    dimension or :data:`MAX_TRACED_ELEMENTS` in all; ``names`` name its dimensions (one
    name: the whole shape)."""
    for i, dim in enumerate(shape):
        if dim > MAX_TRACED_DIM:
            name = names[i] if len(names) == len(shape) else names[0]
            raise ConfigError(f"{name} {dim:,} is over {MAX_TRACED_DIM:,}, the largest size a "
                              "traced input takes", "Longer lengths go in --seq-len after the "
                              "first (4096,N): those are costed by arithmetic.")
    if math.prod(shape) > MAX_TRACED_ELEMENTS:
        raise ConfigError(f"{' × '.join(names)} is {math.prod(shape):,} elements, over "
                          f"{MAX_TRACED_ELEMENTS:,}, the most a traced input takes",
                          "Trace a smaller batch or length; --seq-len items after the first "
                          "are costed by arithmetic.")

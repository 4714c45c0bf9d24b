"""What a step is made of before any plan: phase, element sizes, batch, tokens and work."""

from __future__ import annotations

from dataclasses import dataclass

TRAIN = "train"
DECODE = "decode"
PHASES = (TRAIN, DECODE)

STATES_PER_PARAM = {"adamw": 2, "adam": 2, "sgd-momentum": 1, "sgd": 0, "none": 0}
"""Optimizer state tensors per parameter element (AdamW: exp_avg and exp_avg_sq)."""

STEP_COUNTER_BYTES = {"adamw": 4, "adam": 4}
"""Bytes of the per-tensor step counter (a float32 scalar) the optimizer keeps."""


@dataclass(frozen=True)
class StepSpec:
    """One step on one device with no parallelism: the figures a plan then splits."""

    phase: str
    """``train`` or ``decode``."""
    param_bytes: int
    """Bytes per stored parameter element (fp32 master weights under bf16-mixed)."""
    compute_bytes: int
    """Bytes per element of gathered parameters, activations and exchanged tensors."""
    optimizer: str
    """Optimizer name (training), ``none`` for decode."""
    batch: int
    """Micro-batch per data-parallel replica."""
    tokens: int
    """Positions per sequence the step processes: the sequence length in training, 1 in
    decode."""
    context: int
    """Cached positions per sequence in decode; 0 in training."""
    activation_bytes: int | None
    """Single-device bytes saved for the backward at ``batch`` (measured, e.g. by the
    training phase); None to use Korthikanti et al.'s per-layer count."""
    flops: int
    """Single-device FLOPs of the whole step at ``batch`` (2 per multiply-add)."""
    read_share: float = 1.0
    """Share of the resident parameters a decode step reads: the generating part's (an
    encoder's or a tower's ran once, in prefill); 1 for a decoder-only model."""
    model_flops: int | None = None
    """The step's FLOPs without recomputation (what MFU counts); None when ``flops`` is."""

    @property
    def useful_flops(self) -> int:
        """FLOPs of the step's model work, recomputation left out."""
        return self.flops if self.model_flops is None else self.model_flops

    @property
    def states_per_param(self) -> int:
        """Optimizer state tensors per parameter element."""
        return STATES_PER_PARAM.get(self.optimizer, 0) if self.phase == TRAIN else 0

    @property
    def step_counter_bytes(self) -> int:
        """Bytes of each parameter tensor's step counter."""
        return STEP_COUNTER_BYTES.get(self.optimizer, 0) if self.phase == TRAIN else 0


def precision_bytes(precision: str, dtype_bytes: int) -> tuple[int, int]:
    """(stored, compute) bytes per element: fp32 (4, 4); bf16 (2, 2); bf16-mixed (4, 2);
    anything else stores and computes at ``dtype_bytes``."""
    return {"fp32": (4, 4), "bf16": (2, 2), "bf16-mixed": (4, 2)}.get(
        precision, (dtype_bytes, dtype_bytes))

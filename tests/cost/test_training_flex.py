"""The training step of a model whose attention is torch's flex_attention, against a real CPU
step: MemTracker's peak and FlopCounterMode's step FLOPs (forward and backward)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch.utils import flop_counter

import mhaudit
from mhaudit.cost.devices import get_profile
from mhaudit.data import TrainingCost
from mhaudit.phases import fakestep
from mhaudit.phases.backward_flops import op_flops
from mhaudit.phases.training import training_step
from mhaudit.trace.flex import eager_flex
from mhaudit.verify.reference import flop_counter as real_flop_counter
from mhaudit.verify.step import memtracker_step

D, HEADS, N, VOCAB, LAYERS = 32, 4, 256, 100, 2
PEAK_TOLERANCE = 1e-3
"""Both count the same live storages without allocator rounding; they differ by a few
scalar tensors (20 to 72 B on these models). One dense score matrix kept per layer
(b·h·n²·4 = 1 MiB here) is more than the whole step's peak (about 0.7 MB)."""


def causal(b: object, h: object, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    return q >= kv


def bias(score: torch.Tensor, b: object, h: object, q: torch.Tensor,
         kv: torch.Tensor) -> torch.Tensor:
    return score + (q - kv) * 0.5


class FlexLayer(nn.Module):
    def __init__(self, kv_heads: int, masked: bool, score_mod: Any) -> None:
        super().__init__()
        self.kv_heads, self.d_k = kv_heads, D // HEADS
        self.q = nn.Linear(D, D)
        self.kv = nn.Linear(D, 2 * kv_heads * self.d_k)
        self.o = nn.Linear(D, D)
        self.masked, self.score_mod = masked, score_mod

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q(x).view(b, n, HEADS, self.d_k).transpose(1, 2)  # (b, h, n, d_k)
        k, v = self.kv(x).view(b, n, 2, self.kv_heads, self.d_k).permute(2, 0, 3, 1, 4)
        mask = create_block_mask(causal, None, None, n, n, device=x.device) \
            if self.masked else None
        y = flex_attention(q, k, v, score_mod=self.score_mod, block_mask=mask,
                           enable_gqa=self.kv_heads != HEADS)
        return x + self.o(y.transpose(1, 2).reshape(b, n, D))  # type: ignore[union-attr]


class FlexLM(nn.Module):
    def __init__(self, kv_heads: int = HEADS, masked: bool = True, score_mod: Any = None
                 ) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList(FlexLayer(kv_heads, masked, score_mod)
                                    for _ in range(LAYERS))
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


CASES: dict[str, tuple[Callable[[], FlexLM], float]] = {
    # 256 tokens, 128×128 tiles: 2 × 2 tiles, the causal mask visits 1 + 2 = 3 of 4
    "causal block mask": (lambda: FlexLM(), 3 / 4),
    "causal, grouped K/V": (lambda: FlexLM(kv_heads=2), 3 / 4),
    "score_mod bias, no mask": (lambda: FlexLM(masked=False, score_mod=bias), 1.0),
}


def _ids() -> torch.Tensor:
    return torch.zeros(1, N, dtype=torch.long)


def _ours(build: Callable[[], FlexLM], **options: Any) -> TrainingCost:
    with torch.device("meta"):
        model = build()
    return training_step(model, (_ids(),), {}, [], get_profile("h100"), **options)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_peak_matches_memtracker_on_a_real_cpu_step(case: str) -> None:
    build, _ = CASES[case]
    torch.manual_seed(0)
    reference = memtracker_step(build(), (_ids(),), {})
    ours = _ours(build)
    # MemTracker counts the step counters a CUDA run keeps on the host with the states
    assert ours.peak_bytes + ours.host_state_bytes == pytest.approx(
        reference["Total"], rel=PEAK_TOLERANCE)
    assert ours.ops_without_formula == {}


def test_bf16_autocast_matches_memtracker() -> None:
    torch.manual_seed(0)
    reference = memtracker_step(FlexLM(), (_ids(),), {}, precision="bf16-mixed")
    ours = _ours(FlexLM, precision="bf16-mixed")
    assert ours.peak_bytes + ours.host_state_bytes == pytest.approx(
        reference["Total"], rel=PEAK_TOLERANCE)


def test_checkpointed_layers_match_memtracker() -> None:
    torch.manual_seed(0)
    model = FlexLM()
    reference = memtracker_step(model, (_ids(),), {}, checkpoint_layers=list(model.layers))
    ours = _ours(FlexLM, checkpointing="layers")
    assert ours.peak_bytes + ours.host_state_bytes == pytest.approx(
        reference["Total"], rel=PEAK_TOLERANCE)


def _flopcountermode_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    """Our step counts only the ops torch's FlopCounterMode has formulas for (matmuls,
    flex_attention and its backward), each by our own formula."""

    def counted(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
                missing: dict[str, int]) -> int:
        packet = getattr(func, "overloadpacket", func)
        if packet not in flop_counter.flop_registry:
            return 0
        return op_flops(func, args, kwargs, out, missing)

    monkeypatch.setattr(fakestep, "op_flops", counted)


@pytest.mark.parametrize("case", sorted(CASES))
def test_step_flops_are_flopcountermodes_over_the_visited_tiles(
        case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    build, visited = CASES[case]
    model = build()
    counter = real_flop_counter()
    with eager_flex(), counter:
        model(_ids()).sum().backward()
    real = counter.get_total_flops()
    _flopcountermode_ops(monkeypatch)
    ours = _ours(build).flops
    # FlopCounterMode counts flex_attention densely: forward P = 4·b·h·n²·d_k
    # = 4·1·4·256²·8 = 8,388,608 (QKᵀ and PV, GQA heads repeated), backward 5 products
    # of n²·d_k (scores recomputed, dP, dV, dQ, dK) = 2.5·P = 20,971,520. Ours counts
    # both over the visited tiles, and the forward's softmax too, 3 FLOPs per visited
    # score: 3·b·h·n² = 786,432 dense.
    forward, backward, softmax = 8_388_608, 20_971_520, 786_432
    per_layer = round(visited * (forward + backward + softmax)) - (forward + backward)
    assert ours == real + LAYERS * per_layer


def test_the_report_keeps_no_scores_and_counts_every_op() -> None:
    with torch.device("meta"):
        model = FlexLM()
    report = mhaudit.audit(model, (_ids(),), train=True)
    assert report.training is not None
    assert [b.scores_saved_bytes for b in report.training.blocks] == [0] * LAYERS
    assert report.training.ops_without_formula == {}
    assert report.coverage.ops_without_formula == {}  # create_block_mask's sorts: no FLOPs

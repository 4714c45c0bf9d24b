"""The training step against torch's MemTracker, and what folding, kernels and options change."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch
from torch import nn

import mhaudit
from mhaudit.cost.devices import get_profile
from mhaudit.data import TrainingCost
from mhaudit.errors import ConfigError, TraceError
from mhaudit.phases.training import training_step
from tests.cost.memtracker_oracle import memtracker_peak
from tests.fixtures.small_models import LayerEncoder, TinyGPT

transformers = pytest.importorskip("transformers")

H100 = get_profile("h100")


def _ours(build: Callable[[], nn.Module], inputs: Callable[[], dict[str, Any]],
          **options: Any) -> TrainingCost:
    with torch.device("meta"):
        model, batch = build(), inputs()
    return training_step(model, (), batch, [], H100, **options)


def _lm_batch(batch: int, n: int) -> Callable[[], dict[str, Any]]:
    def make() -> dict[str, Any]:
        ids = torch.zeros(batch, n, dtype=torch.long)
        return {"input_ids": ids, "labels": ids}

    return make


def _gpt2() -> nn.Module:
    # attention dropout 0: with it, a CPU step runs SDPA's math path and keeps the scores,
    # which the target's fused kernel does not (test_training_keeps_what_the_target_...)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=4, n_embd=64, n_head=4, vocab_size=500, n_positions=128, use_cache=False,
        attn_pdrop=0.0))


def _llama(impl: str, layers: int = 6) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(
            hidden_size=128, intermediate_size=256, num_hidden_layers=layers,
            num_attention_heads=8, num_key_value_heads=2, vocab_size=500,
            max_position_embeddings=256, attn_implementation=impl, use_cache=False))

    return build


def _bert() -> nn.Module:
    return transformers.BertForMaskedLM(transformers.BertConfig(
        hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128,
        vocab_size=500, max_position_embeddings=128, attn_implementation="eager"))


@pytest.mark.slow
def test_gpt2_lm_head_matches_memtracker() -> None:
    reference = memtracker_peak(_gpt2, _lm_batch(1, 64))
    ours = _ours(_gpt2, _lm_batch(1, 64))
    assert ours.peak_bytes == pytest.approx(reference["Total"], rel=0.02)
    params = sum(p.numel() for p in _gpt2().parameters())
    tensors = len(list(_gpt2().parameters()))
    assert ours.breakdown.params == params * 4
    # exp_avg and exp_avg_sq per parameter on the device; the 4-byte step counter per
    # tensor stays on the host for CUDA parameters (MemTracker on CPU counts it)
    assert ours.breakdown.optimizer_states == 2 * params * 4
    assert f"{4 * tensors} B of step counters on the host" in ours.convention
    assert ours.loss == ".loss" and ours.folded_layers == 1


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_llama_gqa_matches_memtracker(impl: str) -> None:
    reference = memtracker_peak(_llama(impl), _lm_batch(2, 96))
    ours = _ours(_llama(impl), _lm_batch(2, 96))
    assert ours.peak_bytes == pytest.approx(reference["Total"], rel=0.02)
    assert ours.breakdown.activations == pytest.approx(
        reference["ACT"] + reference["OTH"], rel=0.02)
    assert ours.folded_layers == 3  # six identical layers: three run, three folded


@pytest.mark.slow
def test_bert_masked_lm_matches_memtracker() -> None:
    reference = memtracker_peak(_bert, _lm_batch(2, 64))
    ours = _ours(_bert, _lm_batch(2, 64))
    assert ours.peak_bytes == pytest.approx(reference["Total"], rel=0.02)


@pytest.mark.slow
def test_checkpointing_matches_memtracker() -> None:
    reference = memtracker_peak(_llama("sdpa"), _lm_batch(2, 96), layers="model.layers")
    ours = _ours(_llama("sdpa"), _lm_batch(2, 96), checkpointing="layers")
    assert ours.peak_bytes == pytest.approx(reference["Total"], rel=0.02)


def _lm_default_cache(config: Callable[[], Any], model: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        return getattr(transformers, model)(config())

    return build


def _seq2seq_batch(batch: int, n: int) -> Callable[[], dict[str, Any]]:
    def make() -> dict[str, Any]:
        return {"input_ids": torch.zeros(batch, n, dtype=torch.long),
                "labels": torch.zeros(batch, n // 2, dtype=torch.long)}

    return make


# default configs: use_cache stays on, as a user's training config leaves it
FRAMEWORK_CHECKPOINTED: dict[str, tuple[Callable[[], nn.Module], Callable[[], dict[str, Any]]]] = {
    "gpt-neox": (_lm_default_cache(lambda: transformers.GPTNeoXConfig(
        vocab_size=500, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
        intermediate_size=128), "GPTNeoXForCausalLM"), _lm_batch(2, 64)),
    # eager: T5's position bias is an attention mask, which a CPU step runs on SDPA's
    # math path and a GPU target on memory-efficient attention; eager is one road on both
    "t5-v1.1": (_lm_default_cache(lambda: transformers.T5Config(
        vocab_size=500, d_model=64, d_kv=16, d_ff=128, num_layers=3, num_heads=4,
        feed_forward_proj="gated-gelu", tie_word_embeddings=False, decoder_start_token_id=0,
        pad_token_id=0, attn_implementation="eager"), "T5ForConditionalGeneration"),
        _seq2seq_batch(2, 64)),
    "mistral-window": (_lm_default_cache(lambda: transformers.MistralConfig(
        vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, sliding_window=16),
        "MistralForCausalLM"), _lm_batch(2, 64)),
    "falcon": (_lm_default_cache(lambda: transformers.FalconConfig(
        vocab_size=500, hidden_size=64, num_hidden_layers=4, num_attention_heads=4),
        "FalconForCausalLM"), _lm_batch(2, 64)),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FRAMEWORK_CHECKPOINTED))
def test_checkpointing_as_transformers_does_it(name: str) -> None:
    # with the cache on, a recomputed layer would append K/V to the DynamicCache again;
    # transformers turns the cache off when it checkpoints, and so must the audit. T5's
    # encoder and decoder lists (three layers each, too short to fold) are both recomputed
    build, batch = FRAMEWORK_CHECKPOINTED[name]
    reference = memtracker_peak(build, batch, framework_checkpointing=True)
    ours = _ours(build, batch, checkpointing="layers")
    assert ours.peak_bytes == pytest.approx(reference["Total"], rel=0.02)


@pytest.mark.slow
def test_a_folded_cache_is_freed_with_the_output() -> None:
    # with the cache on, each layer's K/V live until the output is dropped, not until its
    # backward: a folded layer's copies free theirs there too (one layer's K + V was left
    # alive through the backward: 2 · 2 · 64 · 2 heads · 16 · 4 B = 32,768 B, +0.55%)
    build, batch = FRAMEWORK_CHECKPOINTED["mistral-window"]
    reference = memtracker_peak(build, batch)
    folded = _ours(build, batch)
    assert folded.folded_layers == 1
    assert folded.peak_bytes == _ours(build, batch, fold_layers=False).peak_bytes
    assert folded.peak_bytes == pytest.approx(reference["Total"], rel=0.001)


@pytest.mark.slow
def test_bf16_mixed_matches_memtracker_under_autocast() -> None:
    reference = memtracker_peak(_llama("sdpa"), _lm_batch(2, 96), autocast=True)
    ours = _ours(_llama("sdpa"), _lm_batch(2, 96), precision="bf16-mixed")
    assert ours.peak_bytes == pytest.approx(reference["Total"], rel=0.02)


def _tiny_gpt() -> nn.Module:
    return TinyGPT(vocab=100, d=64, heads=4, layers=8)


def _ids() -> dict[str, Any]:
    return {"ids": torch.zeros(2, 32, dtype=torch.long)}



@pytest.mark.parametrize("build", [LayerEncoder, _tiny_gpt], ids=["layers-called", "dict-layers"])
def test_folding_gives_the_unfolded_figures(build: Callable[[], nn.Module]) -> None:
    folded = _ours(build, _ids)
    full = _ours(build, _ids, fold_layers=False)
    # layers called as modules fold (three of eight run); layers only indexed run in full
    assert folded.folded_layers == (5 if build is LayerEncoder else 0) and full.folded_layers == 0
    assert folded.peak_bytes == full.peak_bytes
    assert folded.breakdown == full.breakdown
    assert folded.flops == full.flops
    assert folded.loss == "sum of floating outputs"


def test_folding_an_update_that_peaks() -> None:
    # two tokens: activations are tiny, and the peak is the update's foreach temporaries
    def two_tokens() -> dict[str, Any]:
        return {"ids": torch.zeros(1, 2, dtype=torch.long)}

    folded = _ours(LayerEncoder, two_tokens)
    full = _ours(LayerEncoder, two_tokens, fold_layers=False)
    assert folded.peak_phase == full.peak_phase == "optimizer"
    assert folded.breakdown == full.breakdown
    # AdamW's foreach update keeps one parameter-sized temporary (the sqrt denominators)
    assert folded.breakdown.temporaries >= folded.breakdown.params


def test_optimizer_states_by_optimizer() -> None:
    params = sum(p.numel() for p in _tiny_gpt().parameters())
    states = {name: _ours(_tiny_gpt, _ids, optimizer=name).breakdown.optimizer_states
              for name in ("adamw", "adam", "sgd", "sgd-momentum", "none")}
    assert states["adamw"] == states["adam"] == 2 * 4 * params  # steps on the host
    assert states["sgd-momentum"] == 4 * params  # one momentum buffer per parameter
    assert states["sgd"] == states["none"] == 0


def test_step_counters_sit_where_torch_puts_them() -> None:
    from mhaudit.phases.optimizer_step import on_host, optimizer_step

    params = [nn.Parameter(torch.zeros(10, 4)), nn.Parameter(torch.zeros(4))]
    # two tensors: 4 B step counter each; exp_avg and exp_avg_sq of 44 elements at 4 B
    gpu = optimizer_step(params, "adamw", torch.float32)
    assert (gpu.state_bytes, gpu.host_state_bytes) == (2 * 44 * 4, 2 * 4)
    cpu = optimizer_step(params, "adamw", torch.float32, device="cpu")
    assert (cpu.state_bytes, cpu.host_state_bytes) == (2 * 44 * 4 + 2 * 4, 0)
    # torch.optim.adam._init_group: on the parameter's device when fused or capturable
    step = torch.tensor(0.0)
    assert on_host("step", step, {"fused": None, "capturable": False})
    assert not on_host("step", step, {"fused": True, "capturable": False})
    assert not on_host("step", step, {"fused": None, "capturable": True})
    assert not on_host("exp_avg", torch.zeros(3), {"fused": None, "capturable": False})


def test_precision_presets() -> None:
    params = sum(p.numel() for p in _tiny_gpt().parameters())
    fp32 = _ours(_tiny_gpt, _ids)
    bf16 = _ours(_tiny_gpt, _ids, precision="bf16")
    mixed = _ours(_tiny_gpt, _ids, precision="bf16-mixed")
    assert bf16.breakdown.params == 2 * params and mixed.breakdown.params == 4 * params
    assert mixed.breakdown.optimizer_states == fp32.breakdown.optimizer_states
    assert bf16.breakdown.activations < fp32.breakdown.activations
    assert mixed.breakdown.activations < fp32.breakdown.activations


def test_max_batch_size_is_the_largest_that_fits() -> None:
    base = _ours(_tiny_gpt, _ids)
    profile = replace(H100, memory_bytes=base.peak_bytes * 6)

    def at(batch: int) -> TrainingCost:
        with torch.device("meta"):
            model, ids = _tiny_gpt(), torch.zeros(batch, 32, dtype=torch.long)
        return training_step(model, (ids,), {}, [], profile)

    estimate = at(2).max_batch_size
    assert estimate > 2
    assert at(estimate).peak_bytes <= profile.memory_bytes
    assert at(estimate + 2).peak_bytes > profile.memory_bytes


class _ScalarFirst(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.lin(x)
        return y, y.pow(2).mean()


class _NoFloats(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).argmax(-1)


def test_loss_is_the_first_scalar_output() -> None:
    cost = _ours(_ScalarFirst, lambda: {"x": torch.zeros(4, 8)})
    assert cost.loss == "first scalar output"


def test_a_model_without_a_differentiable_output_is_a_trace_error() -> None:
    with pytest.raises(TraceError, match="needs a gradient"):
        _ours(_NoFloats, lambda: {"x": torch.zeros(4, 8)})


def test_unknown_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="optimizer"):
        _ours(_tiny_gpt, _ids, optimizer="lion")
    with pytest.raises(ConfigError, match="precision"):
        mhaudit.audit(_tiny_gpt(), (torch.zeros(1, 8, dtype=torch.long),), train=True,
                      precision="fp8")


def _audit_llama(impl: str, layers: int = 6, **options: Any) -> mhaudit.data.Report:
    with torch.device("meta"):
        model = _llama(impl, layers)()
        batch = _lm_batch(2, 96)()
    return mhaudit.audit(model, batch, **options)


@pytest.mark.slow
def test_saved_scores_eager_against_sdpa() -> None:
    eager = _audit_llama("eager", train=True).training
    sdpa = _audit_llama("sdpa", train=True).training
    assert eager is not None and sdpa is not None
    assert len(eager.blocks) == len(sdpa.blocks) == 6
    # eager keeps at least the fp32 probabilities: b·h·n² · 4 B = 2·8·96²·4 per block
    assert all(b.scores_saved_bytes >= 2 * 8 * 96 * 96 * 4 for b in eager.blocks)
    assert all(b.scores_saved_bytes == 0 and b.saved_bytes > 0 for b in sdpa.blocks)
    assert eager.peak_bytes > sdpa.peak_bytes


@pytest.mark.slow
def test_checkpointing_lowers_activations_and_adds_one_forward_of_the_layers() -> None:
    plain = _audit_llama("sdpa", train=True)
    ckpt = _audit_llama("sdpa", train=True, checkpointing="layers")
    assert plain.training is not None and ckpt.training is not None
    assert ckpt.training.breakdown.activations < plain.training.breakdown.activations / 2
    assert all(b.saved_bytes == 0 for b in ckpt.training.blocks)
    # one layer's forward, from the traced eval forward of a model one layer shorter
    layer = plain.totals.flops - _audit_llama("sdpa", layers=5).totals.flops
    # torch's non-reentrant checkpoint stops recomputing at the last tensor the backward
    # needs: the MLP's down projection (2·b·n·d·I = 2·192·128·256) is not run again
    down_proj = 2 * 2 * 96 * 128 * 256
    extra = ckpt.training.flops - plain.training.flops
    assert extra == pytest.approx(6 * (layer - down_proj), rel=0.02)


def test_checkpointing_needs_a_layer_list() -> None:
    with pytest.raises(ConfigError, match="no list of repeated layers"):
        _ours(_ScalarFirst, lambda: {"x": torch.zeros(4, 8)}, checkpointing="layers")


def test_checkpointing_a_list_too_short_to_fold() -> None:
    def two_layers() -> nn.Module:
        model = LayerEncoder()
        model.encoder.layers = model.encoder.layers[:2]
        return model

    plain = _ours(two_layers, _ids)
    ckpt = _ours(two_layers, _ids, checkpointing="layers")
    assert plain.folded_layers == ckpt.folded_layers == 0
    assert ckpt.flops > plain.flops
    assert ckpt.blocks == plain.blocks == ()


def _gpt2_dropout(attn_pdrop: float) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=512, use_cache=False,
            attn_pdrop=attn_pdrop, attn_implementation="sdpa"))

    return build


@pytest.mark.slow
def test_training_keeps_what_the_target_kernel_keeps() -> None:
    import mhaudit

    batch = _lm_batch(1, 512)
    with torch.device("meta"):
        model, inputs = _gpt2_dropout(0.1)(), batch()
    training = mhaudit.audit(model, inputs, train=True, gpu="h100").training
    assert training is not None
    # bf16 or fp32 on H100: SDPA runs a fused kernel, which keeps output and log-sum-exp,
    # never the 4·512·512 scores per layer that CPU tensors with dropout would keep
    assert training.attention_kernel not in (None, "math")
    assert sum(r.scores_saved_bytes for r in training.blocks) == 0
    flash_oracle = memtracker_peak(_gpt2_dropout(0.0), batch)  # CPU flash: dropout 0
    with_scores = memtracker_peak(_gpt2_dropout(0.1), batch)   # CPU math: dropout kept
    assert training.peak_bytes == pytest.approx(flash_oracle["Total"], rel=0.05)
    assert with_scores["Total"] > 1.1 * flash_oracle["Total"]
    assert f"{training.attention_kernel} kernel keeps" in training.convention

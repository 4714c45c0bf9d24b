"""The first rung (the dispatch record) and torch.export give the same report on every model."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import torch
from fixtures import small_models
from fixtures.zoo import CASES
from fixtures.zoo_legacy import ByPosition, DataDependent, LegacyEinsum, NamedSequential
from fixtures.zoo_patterns import PATTERNS
from torch import nn

from mhaudit.api import audit
from mhaudit.errors import TraceError
from mhaudit.trace.export import TRACER_ENV

tf = pytest.importorskip("transformers")

Build = Callable[[], nn.Module]
COMPILE_BRANCHES = frozenset({"mixtral"})
"""Models whose forward takes another branch under torch.export: transformers' grouped-mm
experts sort and count tokens with other ops when ``is_compiling()`` (the record runs the
eager program, as the CPU forward does)."""
Inputs = Callable[[], Any]
VOCAB = 97


def _ids(seq: int = 16) -> torch.Tensor:
    return torch.zeros(2, seq, dtype=torch.long)


def _tokens(batch: int, seq: int, width: int) -> Inputs:
    return lambda: (torch.randn(batch, seq, width),)


def _hf() -> list[tuple[str, Build, Inputs]]:
    return [
        ("gpt2", lambda: tf.GPT2Model(tf.GPT2Config(
            n_embd=64, n_head=4, n_layer=2, vocab_size=VOCAB, n_positions=32, bos_token_id=0,
            eos_token_id=0)), lambda: {"input_ids": _ids()}),
        ("bert", lambda: tf.BertModel(tf.BertConfig(
            hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
            vocab_size=VOCAB, max_position_embeddings=32)), lambda: {"input_ids": _ids()}),
        ("llama-gqa", lambda: tf.LlamaForCausalLM(tf.LlamaConfig(
            hidden_size=128, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=4,
            intermediate_size=256, vocab_size=VOCAB)), lambda: {"input_ids": _ids()}),
        ("t5", lambda: tf.T5Model(tf.T5Config(
            d_model=64, d_kv=32, num_heads=4, d_ff=128, num_layers=2, num_decoder_layers=2,
            vocab_size=VOCAB)), lambda: {"input_ids": _ids(), "decoder_input_ids": _ids(8)}),
        ("mixtral", lambda: tf.MixtralModel(tf.MixtralConfig(
            hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
            intermediate_size=128, vocab_size=VOCAB, num_local_experts=4,
            num_experts_per_tok=2)), lambda: {"input_ids": _ids()}),
        ("vit", lambda: tf.ViTModel(tf.ViTConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            image_size=32, patch_size=8)), lambda: {"pixel_values": torch.zeros(2, 3, 32, 32)}),
        ("whisper", lambda: tf.WhisperModel(tf.WhisperConfig(
            d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=8,
            max_source_positions=16, max_target_positions=16, vocab_size=VOCAB, pad_token_id=0,
            bos_token_id=0, eos_token_id=0, decoder_start_token_id=0)),
         lambda: {"input_features": torch.zeros(1, 8, 32),
                  "decoder_input_ids": torch.zeros(1, 4, dtype=torch.long)}),
    ]


MODELS: list[tuple[str, Build, Inputs]] = [
    *((case.id, case.build, case.inputs) for case in CASES),
    *((p.id, p.build, p.inputs) for p in PATTERNS),
    ("legacy_einsum", LegacyEinsum, _tokens(2, 6, 32)),
    ("data_dependent", DataDependent, _tokens(2, 6, 32)),
    ("by_position", ByPosition, _tokens(2, 6, 32)),
    ("named_sequential", NamedSequential, _tokens(2, 6, 32)),
    ("textbook_mha", small_models.TextbookMHA, _tokens(2, 10, 64)),
    ("tiny_gpt", small_models.TinyGPT, lambda: (torch.zeros(2, 12, dtype=torch.long),)),
    *_hf(),
]


def _report(build: Build, inputs: Inputs, tracer: str, monkeypatch: pytest.MonkeyPatch
            ) -> tuple[str, dict[str, Any]] | str:
    """The report with ``tracer`` as the first rung: its trace method and the rest of it
    (or the failure, when no rung traces the model)."""
    monkeypatch.setenv(TRACER_ENV, tracer)
    torch.manual_seed(0)
    with torch.device("meta"):
        model = build().eval()
        example = inputs()
    try:
        report = audit(model, example)
    except TraceError as exc:
        return type(exc).__name__
    data = json.loads(json.dumps(report.to_dict()))
    dependence = data["coverage"].get("data_dependent") or {}
    dependence.pop("causes", None)  # the rungs tried before the answer differ by the first
    return data["model"].pop("trace_method"), data


@pytest.mark.parametrize(("name", "build", "inputs"), MODELS, ids=[m[0] for m in MODELS])
def test_record_and_export_give_the_same_report(name: str, build: Build, inputs: Inputs,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    exported = _report(build, inputs, "torch.export", monkeypatch)
    recorded = _report(build, inputs, "dispatch-record", monkeypatch)
    if isinstance(exported, str) or isinstance(recorded, str):
        assert recorded == exported  # neither rung traces it: both fail alike
        return
    assert not exported[0].startswith("dispatch-record")
    if name in COMPILE_BRANCHES:
        # Export runs the forward's is_compiling() branch; FLOPs outside the products differ.
        for data in (recorded[1], exported[1]):
            totals = data["totals"]
            del totals["flops"], totals["flops_by_family"]["other"]
    # Grouped-query blocks: transformers asks SDPA for enable_gqa only without a mask tensor,
    # and under torch.export it passes the causal mask it cannot drop on fake tensors (the
    # record, like the CPU forward, passes none): the call itself differs by rung.
    for data in (recorded[1], exported[1]):
        for block in data["blocks"]:
            if block["num_kv_heads"] < block["num_heads"]:
                del block["sdpa_gqa"]
    assert recorded[1] == exported[1]


def test_default_ladder_starts_with_the_record(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TRACER_ENV, raising=False)
    with torch.device("meta"):
        report = audit(small_models.TinyGPT().eval(), (torch.zeros(2, 12, dtype=torch.long),))
    assert report.model.trace_method == "dispatch-record"


def test_data_dependent_value_sends_the_record_on_to_export(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.delenv(TRACER_ENV, raising=False)
    with torch.device("meta"):
        report = audit(DataDependent().eval(), (torch.randn(2, 6, 32),))
    # the record refuses the .item(); export and strict export fail on the branch too
    assert report.model.trace_method == "dispatch-fake (1 data-dependent value(s) read as 0)"


def test_unknown_tracer_name_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TRACER_ENV, "jit")
    with torch.device("meta"), pytest.raises(TraceError, match="names no tracer"):
        audit(small_models.TinyGPT().eval(), (torch.zeros(2, 12, dtype=torch.long),))

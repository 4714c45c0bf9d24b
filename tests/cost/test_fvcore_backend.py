"""fvcore's GEMM count (× 2) against graph_flops' matmul family on real CPU models."""

from __future__ import annotations

import pytest
import torch
from fixtures.small_models import TextbookMHA, TinyGPT
from torch import Tensor, nn

from mhaudit.errors import ConfigError
from mhaudit.flops.fvcore_backend import fvcore_flops
from mhaudit.flops.graph import graph_flops

GEMM_OPERATORS = {"linear", "matmul", "addmm", "bmm", "mm", "einsum", "conv"}


def _graph_matmul_flops(build: type[nn.Module], x_meta: Tensor) -> int:
    with torch.device("meta"):
        model = build().eval()
    program = torch.export.export(model, (x_meta,), strict=False)
    return graph_flops(program.graph).family_flops["matmul"]


def _gemm(operator_flops: dict[str, int]) -> int:
    return sum(v for k, v in operator_flops.items() if k in GEMM_OPERATORS)


def test_textbook_mha_matches_graph_flops() -> None:
    torch.manual_seed(0)
    result = fvcore_flops(TextbookMHA().eval(), (torch.randn(32, 10, 64),))
    # 4 · 2·320·64·64 + 2 · 2·256·10·10·8 = 11,304,960
    assert result.flops == _gemm(result.operator_flops) == 11_304_960
    with torch.device("meta"):
        x_meta = torch.zeros(32, 10, 64)
    assert result.flops == _graph_matmul_flops(TextbookMHA, x_meta)
    assert result.unsupported_ops.get("aten::softmax") == 1


def test_gpt_style_model_matches_graph_flops() -> None:
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (2, 16))
    result = fvcore_flops(TinyGPT().eval(), (ids,))
    with torch.device("meta"):
        ids_meta = torch.zeros(2, 16, dtype=torch.long)
    # fvcore skips SDPA, and graph_flops files it under "attention", not "matmul"
    assert _gemm(result.operator_flops) == _graph_matmul_flops(TinyGPT, ids_meta)
    assert result.unsupported_ops.get("aten::scaled_dot_product_attention") == 2


def test_hf_gpt2_eager_with_kwargs() -> None:
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=100,
                        attn_implementation="eager")
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (2, 16))
    result = fvcore_flops(GPT2Model(config).eval(), (ids,),
                          {"attention_mask": torch.ones(2, 16, dtype=torch.long),
                           "use_cache": False})
    # per layer: c_attn 2·32·64·192 + c_proj 2·32·64·64 + c_fc/mlp proj 2 · 2·32·64·256
    # = 786,432 + 262,144 + 2,097,152 = 3,145,728; QKᵀ and probs·V: 2 matmuls · 2 · 8 (b·h)
    # · 16·16·16 = 131,072; two layers: 2 · (3,145,728 + 131,072) = 6,553,600
    assert _gemm(result.operator_flops) == 6_553_600

    class LastHidden(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = GPT2Model(config)

        def forward(self, input_ids: Tensor) -> Tensor:
            return self.model(input_ids, use_cache=False).last_hidden_state  # type: ignore[no-any-return]

    with torch.device("meta"):
        ids_meta = torch.zeros(2, 16, dtype=torch.long)
    assert _graph_matmul_flops(LastHidden, ids_meta) == 6_553_600


def test_meta_model_is_refused() -> None:
    with torch.device("meta"):
        model = TextbookMHA()
        x = torch.zeros(2, 3, 64)
    with pytest.raises(ConfigError, match="meta"):
        fvcore_flops(model, (x,))

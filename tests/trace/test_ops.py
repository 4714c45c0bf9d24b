"""The op table: every name it holds or the FLOP registry registers is a real torch op."""

from __future__ import annotations

import operator

import pytest
import torch
from torch import fx

from mhaudit.cost.formulas import REGISTRY, ZERO_FLOP_OPS
from mhaudit.memory.lifetimes import ALIAS_OPS, MAYBE_ALIAS_OPS
from mhaudit.trace.ops import (
    FORMULA_FAMILIES,
    SDPA_VARIANTS,
    TABLES,
    op_name,
    qualified_name,
    strip_inplace,
)


def _exists(name: str) -> bool:
    namespace, _, short = name.partition(".")
    if namespace == "operator":
        return hasattr(operator, short)
    try:
        getattr(getattr(torch.ops, namespace), short)
    except (AttributeError, RuntimeError):
        return False
    return True


def test_every_table_name_is_an_aten_op() -> None:
    missing = {table: sorted(n for n in names if not _exists(f"aten.{n}"))
               for table, names in TABLES.items()}
    assert {t: m for t, m in missing.items() if m} == {}


def test_every_registered_formula_op_exists() -> None:
    names = set(REGISTRY) | ZERO_FLOP_OPS | ALIAS_OPS | MAYBE_ALIAS_OPS
    assert sorted(n for n in names if not _exists(n)) == []


def test_every_formula_family_is_declared() -> None:
    assert {e.family for e in REGISTRY.values()} <= set(FORMULA_FAMILIES)


def test_every_sdpa_variant_is_costed_and_its_is_causal_index_matches_the_schema() -> None:
    for name, variant in SDPA_VARIANTS.items():
        assert f"aten.{name}" in REGISTRY
        schema = getattr(torch.ops.aten, name).default._schema
        positional = [a.name for a in schema.arguments if not a.kwarg_only]
        assert positional[variant.causal_index] == "is_causal"
        if variant.mask_index is not None:
            assert positional[variant.mask_index] in ("attn_mask", "attn_bias")


def test_one_op_name_function_gives_short_and_qualified_names() -> None:
    # aten.add_ -> qualified "aten.add_", short functional "add".
    graph = fx.Graph()
    x = graph.placeholder("x")
    node = graph.call_function(torch.ops.aten.add_.Tensor, (x, x))
    item = graph.call_function(operator.getitem, (x, 0))
    assert qualified_name(torch.ops.aten.add_.Tensor) == "aten.add_"
    assert op_name(node) == "add"
    assert op_name(item) == "getitem"
    assert op_name(x) == "placeholder"
    assert qualified_name(torch.ops.aten.linear.default) == "aten.linear"


@pytest.mark.parametrize(("name", "stripped"), [
    ("mul_", "mul"), ("aten.div_", "aten.div"), ("__and__", "__and__"), ("mm", "mm"),
])
def test_in_place_names_strip_to_their_functional_form(name: str, stripped: str) -> None:
    assert strip_inplace(name) == stripped

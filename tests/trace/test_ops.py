"""The op table: every name it holds or the FLOP registry registers is a real torch op."""

from __future__ import annotations

import ast
import operator
from pathlib import Path

import pytest
import torch
from torch import fx

from mhaudit.cost.formulas import REGISTRY, ZERO_FLOP_OPS
from mhaudit.memory.lifetimes import ALIAS_OPS, MAYBE_ALIAS_OPS
from mhaudit.trace import ops
from mhaudit.trace.ops import (
    FORMULA_FAMILIES,
    NON_ATEN,
    SDPA_VARIANTS,
    is_in_place,
    op_name,
    op_tables,
    qualified_name,
    strip_inplace,
)

_REGISTERED_BY = {"transformers": "transformers.integrations.moe"}
"""Op namespaces that exist once a library registers them, and the module that does."""


def _exists(name: str) -> bool:
    namespace, _, short = name.partition(".")
    if namespace == "operator":
        return hasattr(operator, short)
    if namespace in _REGISTERED_BY:
        pytest.importorskip(_REGISTERED_BY[namespace])
    try:
        getattr(getattr(torch.ops, namespace), short)
    except (AttributeError, RuntimeError):
        return False
    return True


def test_every_table_name_is_an_aten_op() -> None:
    missing = {table: sorted(n for n in names if n not in NON_ATEN and not _exists(f"aten.{n}"))
               for table, names in op_tables().items()}
    assert {t: m for t, m in missing.items() if m} == {}


def test_the_tables_are_every_op_set_of_the_module() -> None:
    tables = op_tables()
    sets = {k for k, v in vars(ops).items() if isinstance(v, frozenset)}
    assert set(tables) == sets
    assert {"VIEW_OPS", "MASK_PASS_OPS", "PARAM_VIEW_OPS", "WHOLE_OPS"} <= sets


@pytest.mark.parametrize(("name", "what"), sorted(NON_ATEN.items()))
def test_every_name_that_is_not_aten_is_what_it_says(name: str, what: str) -> None:
    owner, _, attribute = what.rpartition(".")
    assert attribute == name
    assert hasattr({"operator": operator, "torch.Tensor": torch.Tensor}[owner], name)
    assert not _exists(f"aten.{name}")
    assert any(name in names for names in op_tables().values())


_READERS = [p for stage in ("detect", "trace") for p in sorted(
    (Path(ops.__file__).parents[1] / stage).rglob("*.py")) if p.name != "ops.py"]


def _set_literals(tree: ast.Module) -> list[set[str]]:
    """String sets assigned at module level: ``frozenset({...})`` and ``{...}`` literals."""
    found: list[set[str]] = []
    for statement in tree.body:
        if not isinstance(statement, (ast.Assign, ast.AnnAssign)) or statement.value is None:
            continue
        for node in ast.walk(statement.value):
            if isinstance(node, ast.Set):
                found.append({e.value for e in node.elts
                              if isinstance(e, ast.Constant) and isinstance(e.value, str)})
    return [names for names in found if len(names) > 1]


@pytest.mark.parametrize("path", _READERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_graph_readers_keep_no_op_table_of_their_own(path: Path) -> None:
    tables = [names for names in _set_literals(ast.parse(path.read_text()))
              if any(_exists(f"aten.{n}") for n in names)]
    assert tables == []


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


def test_in_place_is_read_from_the_qualified_name_not_the_short_one() -> None:
    # aten.copy_ writes its first argument; aten.copy returns a new tensor. Both are "copy".
    graph = fx.Graph()
    x, y = graph.placeholder("x"), graph.placeholder("y")
    in_place = graph.call_function(torch.ops.aten.copy_.default, (x, y))
    functional = graph.call_function(torch.ops.aten.copy.default, (x, y))
    assert op_name(in_place) == op_name(functional) == "copy"
    assert is_in_place(in_place) and not is_in_place(functional)
    assert not is_in_place(graph.call_function(operator.getitem, (x, 0)))

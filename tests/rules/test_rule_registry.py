"""Tests over the registry: each code brings a firing and a passing fixture, findings carry
exactly the declared numbers, rules are well declared and word numbers through units."""

from __future__ import annotations

import ast
import inspect
import sys
from dataclasses import dataclass, replace
from typing import Any

import pytest
from fixtures.blocks import make_block

from mhaudit.data import Finding
from mhaudit.rules import REGISTRY, Rule, RuleConfig, RuleContext, RuleRegistry, check_block
from mhaudit.rules.base import NUMBER_UNITS
from mhaudit.rules.registry import FAMILIES

H100 = RuleContext.for_target("h100", "bfloat16")
A100 = RuleContext.for_target("a100", "bfloat16")
T4 = RuleContext.for_target("t4", "float16")
TP8 = RuleContext.for_target("h100", "bfloat16", tensor_parallel=8)
TP16 = RuleContext.for_target("h100", "bfloat16", tensor_parallel=16)


@dataclass(frozen=True)
class Case:
    """A block (``make_block`` keywords) checked on a context."""

    block: dict[str, Any]
    ctx: RuleContext = H100

    def findings(self, code: str) -> list[Finding]:
        keywords = {"gpu": self.ctx.profile.key, "dtype": self.ctx.dtype, **self.block}
        block = make_block(**keywords)
        found = check_block(block, self.ctx, RuleConfig(select=(code,)))
        return [f for f in found if f.code == code]


@dataclass(frozen=True)
class Fixtures:
    """Blocks that fire a rule (together producing every declared number) and that pass."""

    fires: tuple[Case, ...]
    passes: tuple[Case, ...]


CASES: dict[str, Fixtures] = {
    "MHA001": Fixtures(fires=(Case({"head_dim": 20}), Case({"head_dim": 64, "v_head_dim": 36})),
                       passes=(Case({"head_dim": 64}),)),
    "MHA002": Fixtures(fires=(Case({"head_dim": 80}, A100),),
                       passes=(Case({"head_dim": 128}, A100), Case({"head_dim": 80}, T4))),
    "MHA003": Fixtures(fires=(Case({"head_dim": 320}),
                              Case({"head_dim": 320, "implementation": "eager"})),
                       passes=(Case({"head_dim": 256}),)),
    "MHA004": Fixtures(fires=(Case({"head_dim": 8, "seq": 128}), Case({"head_dim": 8}, A100)),
                       passes=(Case({"head_dim": 32}),)),
    "MHA005": Fixtures(fires=(Case({"head_dim": 8, "implementation": "eager"}),
                              Case({"heads": 32, "head_dim": 20, "seq": 1024}, T4)),
                       passes=(Case({"head_dim": 128}),)),
    "MHA006": Fixtures(fires=(Case({"heads": 12, "kv_heads": 5}),),
                       passes=(Case({"heads": 12, "kv_heads": 4}),)),
    "MHA007": Fixtures(fires=(Case({"heads": 32, "head_dim": 128, "causal": True}),),
                       passes=(Case({"heads": 32, "kv_heads": 8, "head_dim": 128,
                                     "causal": True}),)),
    "MHA008": Fixtures(fires=(Case({"heads": 12}, TP8),),
                       passes=(Case({"heads": 32, "kv_heads": 8}, TP8), Case({"heads": 12}))),
    "MHA009": Fixtures(fires=(Case({"heads": 16, "head_dim": 256, "d_model": 3072}),),
                       passes=(Case({"heads": 16, "head_dim": 256}),)),
    "MHA010": Fixtures(fires=(Case({"fused": False}),),
                       passes=(Case({"fused": True}), Case({"fused": False, "kind": "cross"}))),
    "MHA011": Fixtures(fires=(Case({"heads": 64, "kv_heads": 8, "causal": True}, TP16),),
                       passes=(Case({"heads": 64, "kv_heads": 8, "causal": True}, TP8),
                               Case({"heads": 64, "kv_heads": 8, "causal": True}))),
}
"""One entry per registered code; a new rule fails the tests below until it has one."""


def test_every_fixture_names_a_registered_code() -> None:
    assert set(CASES) <= set(REGISTRY.codes())


@pytest.mark.parametrize("code", REGISTRY.codes())
def test_each_code_has_firing_and_passing_fixtures(code: str) -> None:
    assert code in CASES, f"add a firing and a passing fixture for {code} to CASES"
    fixtures = CASES[code]
    assert fixtures.fires and fixtures.passes
    for case in fixtures.fires:
        assert len(case.findings(code)) == 1, (code, case)
    for case in fixtures.passes:
        assert case.findings(code) == [], (code, case)


@pytest.mark.parametrize("code", REGISTRY.codes())
def test_findings_carry_the_declared_numbers(code: str) -> None:
    rule = REGISTRY.get(code)
    assert rule is not None and code in CASES
    seen: set[str] = set()
    for case in CASES[code].fires:
        (flag,) = case.findings(code)
        keys = set(flag.numbers)
        assert rule.required_numbers <= keys <= rule.declared_numbers, (code, keys)
        seen |= keys
    # every declared key, conditional ones included, is produced by some firing fixture
    assert seen == rule.declared_numbers


@pytest.mark.parametrize("code", REGISTRY.codes())
def test_rules_are_declared_in_ruff_template(code: str) -> None:
    rule = REGISTRY.get(code)
    assert rule is not None
    assert rule.known_problems and rule.references and rule.since == "0.1.0"
    assert {n.unit for n in rule.numbers} <= set(NUMBER_UNITS)
    assert [h for h, _ in rule.sections()] == [
        "What it does", "Why it costs", "Known problems", "Example", "Fix"]


def test_every_family_rule_is_registered_once() -> None:
    declared = [r.code for family in FAMILIES for r in family.RULES]
    assert sorted(declared) == list(REGISTRY.codes())


def _rule(**changes: Any) -> Rule:
    rule = REGISTRY.get("MHA001")
    assert rule is not None
    return replace(rule, **changes)


def test_registry_rejects_retired_codes_and_bad_declarations() -> None:
    retired = RuleRegistry(retired={"MHA001": "0.2.0"})
    with pytest.raises(ValueError, match=r"retired in 0\.2\.0"):
        retired.add(_rule())
    assert retired.retired("mha001") == "0.2.0" and len(retired) == 0
    fresh = RuleRegistry([_rule()])
    with pytest.raises(ValueError, match="duplicate rule code"):
        fresh.add(_rule(name="another-name"))
    bad = {"since": "soon", "references": (), "known_problems": " ", "numbers": ()}
    for field, value in bad.items():
        with pytest.raises(ValueError):
            RuleRegistry([_rule(**{field: value})])
    spec = _rule().numbers[0]
    with pytest.raises(ValueError, match="unknown number unit"):
        RuleRegistry([_rule(numbers=(replace(spec, unit="furlongs"),))])
    with pytest.raises(ValueError, match="unique snake_case"):
        RuleRegistry([_rule(numbers=(spec, spec))])


def _format_specs(module: str) -> list[str]:
    """f-string replacement fields with a format spec (``{x:.1%}``) in ``module``."""
    tree = ast.parse(inspect.getsource(sys.modules[module]))
    return [f"{module}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.FormattedValue) and node.format_spec is not None]


def test_rules_word_numbers_only_through_units() -> None:
    modules = {r.check.__module__ for r in REGISTRY} | {"mhaudit.rules.target"}
    for module in sorted(modules):
        assert _format_specs(module) == [], "word numbers with mhaudit.units"

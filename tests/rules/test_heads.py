"""Head-count arithmetic: divisors in O(√n) and the reduced KV head count."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mhaudit.rules.heads import divisors, reduced_kv_heads


@given(st.integers(min_value=1, max_value=5000))
def test_divisors_match_the_definition(n: int) -> None:
    assert divisors(n) == tuple(d for d in range(1, n + 1) if n % d == 0)


def test_divisors_of_a_huge_width_are_fast() -> None:
    # 10**12 = 2**12 · 5**12: (12 + 1)·(12 + 1) = 169 divisors, found by walking to 10**6
    found = divisors(10**12)
    assert len(found) == 169 and found[0] == 1 and found[-1] == 10**12


@given(st.integers(min_value=1, max_value=3000), st.integers(min_value=1, max_value=64))
def test_reduced_kv_heads_is_the_largest_divisor_under_the_target(heads: int, factor: int) -> None:
    target = max(1, heads // factor)
    assert reduced_kv_heads(heads, factor) == max(d for d in divisors(heads) if d <= target)

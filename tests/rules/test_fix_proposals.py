"""A fix that proposes head counts never proposes a layout another rule flags."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from mhaudit.rules import RuleContext, evaluate
from tests.fixtures.blocks import make_block

PROPOSAL = re.compile(r"h = (\d+) \(d_k = (\d+)\)")


def _codes(heads: int, head_dim: int, kv_heads: int, gpu: str, dtype: str,
           tp: int | None, implementation: str) -> set[str]:
    block = make_block(heads=heads, head_dim=head_dim, kv_heads=kv_heads, gpu=gpu, dtype=dtype,
                       implementation=implementation)
    (done,) = evaluate((block,), RuleContext.for_target(gpu, dtype, tp))
    return {f.code for f in done.findings}


@settings(max_examples=60, deadline=None)
@given(
    heads=st.sampled_from([1, 2, 4, 8, 12, 16, 32, 64]),
    head_dim=st.sampled_from([4, 8, 20, 40, 80, 128, 160, 320, 512]),
    group=st.sampled_from([1, 2, 4]),
    gpu=st.sampled_from(["h100", "a100-80g", "t4"]),
    dtype=st.sampled_from(["bfloat16", "float16", "float32"]),
    tp=st.sampled_from([None, 2, 8]),
    implementation=st.sampled_from(["sdpa", "eager"]),
)
def test_every_proposed_split_clears_its_finding_and_adds_none(
        heads: int, head_dim: int, group: int, gpu: str, dtype: str, tp: int | None,
        implementation: str) -> None:
    kv_heads = max(1, heads // group)
    block = make_block(heads=heads, head_dim=head_dim, kv_heads=kv_heads, gpu=gpu, dtype=dtype,
                       implementation=implementation)
    (done,) = evaluate((block,), RuleContext.for_target(gpu, dtype, tp))
    now = {f.code for f in done.findings}
    for finding in done.findings:
        for h, d_k in PROPOSAL.findall(finding.fix or ""):
            proposed_heads, proposed_dim = int(h), int(d_k)
            assert proposed_heads * proposed_dim == heads * head_dim  # same width, re-split
            # K/V keep their width: h_kv · d_k is unchanged
            proposed_kv = kv_heads * head_dim // proposed_dim
            after = _codes(proposed_heads, proposed_dim, proposed_kv, gpu, dtype, tp,
                           implementation)
            assert finding.code not in after, (finding.code, finding.fix)
            assert after <= now, (finding.code, finding.fix, after - now)


def test_textbook_small_heads_are_offered_two_heads_before_one() -> None:
    # d = 64, h = 8: d_k = 8 < 32 (MHA004). h = 2 gives d_k = 32 and clears it without a new
    # finding; h = 4 (d_k = 16) is still too small; one head comes last.
    block = make_block(heads=8, head_dim=8, implementation="eager", fused=False)
    (done,) = evaluate((block,), RuleContext.for_target("h100", "bfloat16"))
    (small,) = [f for f in done.findings if f.code == "MHA004"]
    assert "for width 64: h = 2 (d_k = 32), h = 1 (d_k = 64)" in (small.fix or "")

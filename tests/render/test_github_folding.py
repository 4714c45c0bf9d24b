"""``--format github``: one annotation per folded group, for report and for check alike."""

from __future__ import annotations

from dataclasses import replace

from fixtures.reports import _findings, hand_report, layer_block

from mhaudit.assemble.grouping import group_blocks
from mhaudit.data import AttentionBlock, GateOutcome, Report
from mhaudit.render.gate import Checked
from mhaudit.render.gate.checks import checks_github
from mhaudit.render.github import render_github

LAYERS = 32


def _llama_like() -> Report:
    """32 identical layers named as in a Llama (``model.layers.i.self_attn``)."""
    blocks: list[AttentionBlock] = []
    for i in range(LAYERS):
        name = f"model.layers.{i}.self_attn"
        block = layer_block(i)
        blocks.append(replace(block, layout=replace(block.layout, name=name),
                              findings=_findings(name)))
    base = hand_report()
    findings = tuple(f for b in blocks for f in b.findings)
    return replace(base, blocks=tuple(blocks), findings=findings,
                   groups=group_blocks(blocks))


def test_thirty_two_identical_layers_give_one_annotation_per_finding_code() -> None:
    report = _llama_like()
    assert len(report.groups) == 1 and report.groups[0].count == LAYERS
    lines = render_github(report).splitlines()
    annotations = [line for line in lines if line.startswith("::")]
    codes = {f.code for f in report.findings}
    assert len(annotations) == len(codes) == 2
    for line in annotations:
        assert "model.layers.{0..31}.self_attn (32 blocks): " in line
        assert "layers.1.self_attn" not in line
    assert lines[-1] == f"mhaudit: {len(report.findings)} finding(s), 2 annotation(s)"


def test_distinct_blocks_keep_their_own_annotations() -> None:
    report = _llama_like()
    unfolded = replace(report, groups=())
    annotations = [x for x in render_github(unfolded).splitlines() if x.startswith("::")]
    assert len(annotations) == len(report.findings) == 2 * LAYERS


def test_check_annotates_a_repeated_layers_failing_flag_once() -> None:
    report = _llama_like()
    outcome = GateOutcome((), report.findings, "info")
    text = checks_github([Checked("llama.py", report, outcome, {})], None)  # type: ignore[arg-type]
    annotations = [x for x in text.splitlines() if x.startswith("::")]
    assert len(annotations) == 2
    assert all("model.layers.{0..31}.self_attn (32 blocks)" in x for x in annotations)
    assert all(". Fix: " in x and "?." not in x for x in annotations)

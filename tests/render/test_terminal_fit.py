"""At any width from 60 no output line is wider and no block or model name is broken."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from mhaudit.cli import main
from mhaudit.data import BlockGroup, LayoutSpec, Report, WhatIf, WhatIfRow
from mhaudit.render.rules.listing import rules_table
from mhaudit.render.style import RenderOptions
from mhaudit.render.table import render_table, render_table_many
from mhaudit.render.whatif import render_whatif_table
from mhaudit.rules import REGISTRY
from tests.fixtures.reports import hand_report

LAYERS = "model.layers.{0..31}.self_attn"
POOL = "model.vision_tower.head.pool"
SOURCE = "checkpoints/Meta-Llama-3-8B-Instruct/config.json"


def llama_like() -> Report:
    """The hand-written report with a 32-layer group and long names, as Llama's are."""
    report = hand_report()
    layers, pool = report.groups
    members = tuple(f"model.layers.{i}.self_attn" for i in range(32))
    groups = (BlockGroup(LAYERS, members, layers.block), BlockGroup(POOL, (POOL,), pool.block))
    model = dataclasses.replace(report.model, source=SOURCE)
    return dataclasses.replace(report, groups=groups, model=model)


def _whatif_row(h: int, kv: int, current: bool = False) -> WhatIfRow:
    return WhatIfRow(
        heads=h, kv_heads=kv, head_dim=4096 // h, current=current, params=41_943_040,
        textbook_params=67_108_864, flops=1_790_000_000_000, attention_flops=10**12,
        scores_bytes=4 << 30, materializes_scores=h > 512, kv_cache_bytes_per_token=4096,
        backend="flash" if h > 512 else "cudnn", kernel_head_dim=32 if h > 512 else None,
        padding_waste=0.875 if h > 512 else 0.0, est_time_s=1.26e-3,
        arithmetic_intensity=300.0, bound="compute", flags=("MHA001", "MHA004"),
        measured_ms=1.5, decode_step_s=35e-6, decode_kv_read_bytes=32 << 20,
        train_scores_saved_bytes=None if h > 1000 else 196_608,
    )


SWEEP = WhatIf(
    LayoutSpec(d_model=4096, heads=32, kv_heads=8, seq_len=8192, name=LAYERS), "h100",
    tuple(_whatif_row(h, max(1, h // 4), h == 32) for h in (1, 32, 1024, 4096)),
    tuple(_whatif_row(32, kv, kv == 8) for kv in (32, 8, 1)),
)


def _fits(text: str, width: int, names: tuple[str, ...]) -> None:
    lines = text.splitlines()
    wide = [line for line in lines if len(line) > width]
    assert not wide, wide
    for name in names:
        assert any(name in line for line in lines), name
    # no line ends where a name could be broken (after a dot, dash or slash in it)
    for name in names:
        heads = [name[:i] for i in range(1, len(name)) if name[i - 1] in ".-_/"]
        assert not [line for line in lines if line.rstrip().endswith(tuple(heads))], name


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=60, max_value=200))
def test_report_fits_every_width(width: int) -> None:
    options = RenderOptions(width=width)
    _fits(render_table(llama_like(), options), width, (LAYERS, POOL))
    _fits(render_table_many([llama_like(), hand_report()], options), width,
          (LAYERS, POOL, SOURCE))


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=60, max_value=200))
def test_whatif_and_rules_fit_every_width(width: int) -> None:
    _fits(render_whatif_table(SWEEP, RenderOptions(width=width)), width, (LAYERS,))
    _fits(rules_table(list(REGISTRY), RenderOptions(width=width)), width,
          tuple(rule.name for rule in REGISTRY))


def test_narrow_report_turns_groups_into_records() -> None:
    text = render_table(llama_like(), RenderOptions(width=60))
    lines = text.splitlines()
    title = lines.index(LAYERS)  # the name alone on its line, then its fields
    assert lines[title + 1].startswith("  ×: 32; impl: eager; h: 4")
    assert not any(line.startswith("block ") for line in lines)


@pytest.mark.parametrize("width", [80, 100])
def test_report_drops_columns_in_the_stated_order(width: int) -> None:
    text = render_table(llama_like(), RenderOptions(width=width))
    header = next(line for line in text.splitlines() if line.startswith("block "))
    kept = header.split()
    assert kept[0] == "block" and {"h", "params", "FLOPs", "flags"} <= set(kept)
    order = ["Δ", "impl", "×", "KV/token", "d_k", "h_kv"]
    dropped = [c for c in order if c not in kept]
    assert dropped == order[: len(dropped)]


def test_wide_shows_every_column_whatever_the_width() -> None:
    text = render_table(llama_like(), RenderOptions(width=60, wide=True))
    header = next(line for line in text.splitlines() if line.startswith("block "))
    assert len(header.split()) == 16


def test_whatif_notes_explain_each_column() -> None:
    text = render_whatif_table(SWEEP, RenderOptions())
    notes = [line for line in text.splitlines() if ": " in line and not line.startswith(" ")]
    for column in ("params", "FLOPs", "scores", "KV/token", "kernel", "kernel d",
                   "est. time (tiles)", "decode step", "train scores", "measured", "flags"):
        assert any(line.startswith(f"{column}: ") for line in notes), column
    assert "pad: " in text and "KV read: " in text
    assert "0 B where a fused kernel takes the head dim" in text


def _cli(args: list[str], width: int) -> Any:
    env = {"COLUMNS": str(width), "NO_COLOR": "", "FORCE_COLOR": ""}
    return CliRunner().invoke(main, args, env=env)


LLAMA_CONFIG = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 32, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 256,
}


@pytest.fixture(scope="module")
def llama_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("llama") / "config.json"
    path.write_text(json.dumps(LLAMA_CONFIG), encoding="utf-8")
    return path


@pytest.mark.parametrize("width", [60, 80, 100])
def test_a_32_layer_llama_fits_the_terminal(llama_config: Path, width: int) -> None:
    done = _cli(["report", str(llama_config), "--seq-len", "64"], width)
    assert done.exit_code in (0, 1), done.output
    _fits(done.stdout, width, (LAYERS,))


@pytest.mark.parametrize("width", [60, 80, 100])
def test_whatif_and_rules_fit_the_terminal(width: int) -> None:
    spec = ["whatif", "--d-model", "1024", "--heads", "16", "--kv-heads", "4",
            "--try-heads", "1,16,512"]
    done = _cli(spec, width)
    assert done.exit_code == 0, done.output
    _fits(done.stdout, width, ())
    listed = _cli(["rules"], width)
    assert listed.exit_code == 0, listed.output
    _fits(listed.stdout, width, tuple(rule.name for rule in REGISTRY))

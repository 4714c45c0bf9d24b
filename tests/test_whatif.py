"""What-if: the sweep over heads and KV heads, and the whatif and rules commands."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mhaudit.cli.rules_cmd import rules
from mhaudit.cli.whatif_cmd import whatif as whatif_command
from mhaudit.cost.devices import get_profile
from mhaudit.data import Report
from mhaudit.errors import ConfigError
from mhaudit.whatif import (
    LayoutSpec,
    check_spec,
    layout_for,
    measure_block_ms,
    plot_whatif,
    whatif,
)

H100 = get_profile("h100")


def test_params_are_4d2_for_every_head_count() -> None:
    result = whatif(LayoutSpec(d_model=512, heads=8, kv_heads=8, seq_len=256), H100)
    heads = [r.heads for r in result.by_heads]
    assert heads == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    # 4·512² = 1,048,576 whatever h is, while h·d_k = 512 and h_kv = h
    assert {r.params for r in result.by_heads} == {4 * 512 * 512}
    assert {r.textbook_params for r in result.by_heads} == {4 * 512 * 512}
    # KV cache per token 2·h·d_k·2 B = 2·512·2 = 2,048 B for every h
    assert {r.kv_cache_bytes_per_token for r in result.by_heads} == {2048}


def test_score_memory_grows_with_heads() -> None:
    result = whatif(LayoutSpec(d_model=512, heads=8, kv_heads=8, seq_len=256, batch_size=2), H100)
    for row in result.by_heads:
        # b·h·n²·2 B = 2·h·256²·2
        assert row.scores_bytes == 2 * row.heads * 256 * 256 * 2
    flops = [r.flops for r in result.by_heads]
    assert flops == sorted(flops)  # only the softmax term grows with h
    projections = 4 * 2 * (2 * 256) * 512 * 512  # four d×d GEMMs over b·n rows
    core = 2 * 2 * 2 * 256 * 256 * 512  # QKᵀ and PV: 2·b·n²·(h·d_k) each
    softmax_one_head = result.by_heads[0].flops - projections - core
    assert result.by_heads[1].flops - projections - core == 2 * softmax_one_head


def test_kv_sweep_and_current_row() -> None:
    result = whatif(LayoutSpec(d_model=4096, heads=32, kv_heads=8, seq_len=4096), H100)
    assert [r.kv_heads for r in result.by_kv_heads] == [32, 16, 8, 4, 2, 1]
    current = [r for r in result.rows if r.current]
    assert [(r.heads, r.kv_heads, r.head_dim) for r in current] == [(32, 8, 128)]
    mha = next(r for r in result.by_kv_heads if r.kv_heads == 32)
    assert "MHA007" in mha.flags and "MHA007" not in current[0].flags
    # the h sweep keeps the group size 4: h = 64 gets h_kv = 16
    assert next(r for r in result.by_heads if r.heads == 64).kv_heads == 16


def test_kernel_columns() -> None:
    # on an A100 SDPA runs FlashAttention 2: d_k = 80 in its 96 kernel
    result = whatif(LayoutSpec(d_model=1280, heads=16, kv_heads=16, seq_len=512),
                    get_profile("a100"), try_heads=[4, 16, 40])
    by_h = {r.heads: r for r in result.by_heads}
    assert (by_h[16].head_dim, by_h[16].kernel_head_dim, by_h[16].backend) == (80, 96, "flash")
    assert by_h[16].padding_waste == pytest.approx(1 / 6)
    assert by_h[4].kernel_head_dim is None and "MHA003" in by_h[4].flags
    assert by_h[4].backend == "mem_efficient"
    assert by_h[40].head_dim == 32 and "MHA002" not in by_h[40].flags  # FA2 has a 32 kernel
    # on H100 SDPA runs cuDNN, which has no head-dim table: the columns say so
    hopper = whatif(LayoutSpec(d_model=1280, heads=16, kv_heads=16, seq_len=512), H100,
                    try_heads=[16])
    assert hopper.by_heads[0].backend == "cudnn" and hopper.by_heads[0].kernel_head_dim is None
    eager = whatif(LayoutSpec(d_model=64, heads=8, kv_heads=8, seq_len=16,
                              implementation="eager"), H100)
    assert all(r.materializes_scores and "MHA005" in r.flags for r in eager.rows)
    times = [r.est_time_s for r in eager.by_heads]
    assert times == sorted(times)  # materialised scores cost more bandwidth as h grows


def test_bad_specs() -> None:
    with pytest.raises(ConfigError, match="7 heads do not divide d_model 64") as err:
        check_spec(LayoutSpec(d_model=64, heads=7, kv_heads=7, seq_len=8))
    assert "--" not in err.value.one_line()  # the library names fields, not CLI flags
    with pytest.raises(ConfigError, match="3 KV heads do not divide 8 heads"):
        check_spec(LayoutSpec(d_model=64, heads=8, kv_heads=3, seq_len=8))
    with pytest.raises(ConfigError, match="head_dim must be a positive integer, got -64"):
        check_spec(LayoutSpec(d_model=64, heads=8, kv_heads=8, seq_len=8, head_dim=-64))
    with pytest.raises(ConfigError, match="seq_len must be a positive integer, got 0"):
        check_spec(LayoutSpec(d_model=64, heads=8, kv_heads=8, seq_len=0))
    with pytest.raises(ConfigError, match="head count 3 does not divide the inner width 64"):
        whatif(LayoutSpec(d_model=64, heads=8, kv_heads=8, seq_len=8), H100, try_heads=[3])
    with pytest.raises(ConfigError, match="3 KV heads do not divide 8 heads"):
        whatif(LayoutSpec(d_model=64, heads=8, kv_heads=3, seq_len=8), H100)  # sweeps check too
    assert check_spec(LayoutSpec(d_model=64, heads=8, kv_heads=8, seq_len=8,
                                 dtype="bf16")).dtype == "bfloat16"


def test_measure_on_cpu() -> None:
    spec = LayoutSpec(d_model=64, heads=4, kv_heads=2, seq_len=16, dtype="float32")
    for implementation in ("sdpa", "eager"):
        layout = replace(layout_for(spec, 4, 2), implementation=implementation)
        ms = measure_block_ms(layout, "float32", "cpu", repeats=2, warmup=1)
        assert ms is not None and ms > 0


@pytest.mark.gpu
def test_measure_on_cuda() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    spec = LayoutSpec(d_model=1024, heads=16, kv_heads=16, seq_len=1024)
    result = whatif(spec, H100, try_heads=[8, 16, 64], device="cuda", repeats=5)
    assert all(r.measured_ms is not None and r.measured_ms > 0 for r in result.rows)


def test_plot(tmp_path: Path) -> None:
    image = pytest.importorskip("matplotlib.image")
    result = whatif(LayoutSpec(d_model=64, heads=8, kv_heads=2, seq_len=16), H100)
    out = plot_whatif(result, tmp_path / "sweep.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1210, 1210)  # 11 x 11 inches at 110 dpi
    pixels = image.imread(out)[..., :3]
    assert (pixels.mean(axis=2) < 0.9).mean() > 0.02  # axes, curves and labels drawn
    red = (pixels[..., 0] > 0.7) & (pixels[..., 1] < 0.3) & (pixels[..., 2] < 0.3)
    assert red.sum() > 100  # the current layout's ring, on every panel


def test_plot_axes_have_units_log_scales_and_the_kv_sweep(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    plt = pytest.importorskip("matplotlib.pyplot")
    figures: list[Any] = []
    monkeypatch.setattr(plt, "close", figures.append)
    result = whatif(LayoutSpec(d_model=512, heads=8, kv_heads=2, seq_len=2048), H100)
    plot_whatif(result, tmp_path / "sweep.png")
    (fig,) = figures
    axes = fig.axes
    assert [ax.get_ylabel() for ax in axes] == ["parameters", "bytes", "bytes", "seconds",
                                                "bytes", "seconds"]
    assert axes[1].get_yscale() == "log"  # score bytes span 1 MiB to 512 MiB
    assert all(ax.get_xscale() == "log" for ax in axes)
    assert axes[4].get_xlabel() == "KV heads h_kv (h = 8)"
    labels = {text.get_text() for ax in axes for text in ax.get_legend().get_texts()}
    assert "current layout" in labels


# --- the commands ---------------------------------------------------------------------------

def invoke(command: Any, *args: str) -> Any:
    return CliRunner().invoke(command, list(args))


def test_whatif_table_and_json() -> None:
    table = invoke(whatif_command, "--d-model", "64", "--heads", "8", "--seq-len", "128",
                   "--implementation", "eager", "--no-causal")
    assert table.exit_code == 0, table.output
    assert "16,384" in table.output and "MHA004,MHA005" in table.output
    data = json.loads(invoke(whatif_command, "--d-model", "64", "--heads", "8", "--format",
                             "json").output)
    assert {row["params"] for row in data["by_heads"]} == {16384}
    assert sum(row["current"] for row in data["rows"]) == 1


def test_whatif_plot_says_which_file_it_wrote(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "sweep.png"
    done = invoke(whatif_command, "--d-model", "64", "--heads", "8", "--plot", str(png))
    assert done.exit_code == 0, done.output
    assert done.stderr.splitlines() == [f"mhaudit: wrote {png}"]
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_whatif_input_shape_needs_a_model() -> None:
    done = invoke(whatif_command, "--d-model", "64", "--heads", "8", "--input-shape", "1x8x64")
    assert done.exit_code == 2
    assert done.stderr.startswith("mhaudit: error: --input-shape shapes a model's input")


def test_whatif_output_file(tmp_path: Path) -> None:
    out = tmp_path / "whatif.txt"
    done = invoke(whatif_command, "--d-model", "128", "--heads", "2", "-o", str(out))
    assert done.exit_code == 0 and done.stdout == ""
    assert "what-if for spec" in out.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "--d-model and --heads"),
        (("--d-model", "64", "--heads", "7"), "do not divide"),
        (("--d-model", "64", "--heads", "8", "--head-dim", "-64"), "--head-dim"),
        (("--d-model", "64", "--heads", "8", "--seq-len", "0"), "--seq-len"),
        (("--d-model", "64", "--heads", "8", "--repeats", "0"), "--repeats"),
        (("--d-model", "64", "--heads", "8", "--gpu", "tpu"), "--gpu"),
        (("--d-model", "64", "--heads", "8", "--dtype", "int4"), "--dtype"),
        (("--d-model", "64", "--heads", "8", "--try-heads", "x"), "--try-heads"),
        (("model.py", "--d-model", "64"), "not both"),
        (("--d-model", "sixty",), "Invalid value"),
    ],
)
def test_whatif_errors_exit_2(args: tuple[str, ...], message: str) -> None:
    from mhaudit.cli.main import main

    done = invoke(main, "whatif", *args)
    assert done.exit_code == 2
    assert message in done.stderr
    lines = done.stderr.strip().splitlines()  # usage errors and mhaudit's own: one line each
    assert lines == [lines[0]] and lines[0].startswith("mhaudit: error: ")


def test_whatif_plot_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_install_hint import EDITABLE, installed_as

    installed_as(monkeypatch, EDITABLE)  # a clone's editable install: the hint names its root
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    done = invoke(whatif_command, "--d-model", "64", "--heads", "8", "--plot",
                  str(tmp_path / "x.png"))
    assert done.exit_code == 2
    assert done.stderr.strip() == ("mhaudit: error: --plot needs matplotlib, which is not "
                                   "installed. Install it with: pip install -e '.[plot]' "
                                   "(from the clone's root, /home/me/mhaudit).")


def test_whatif_on_a_model_block(monkeypatch: pytest.MonkeyPatch) -> None:
    from fixtures.blocks import make_block

    block = make_block(heads=8, head_dim=80, name="layers.0.attn", seq=64)
    seen: dict[str, Any] = {}

    class AuditOptions:
        def __init__(self, **kwargs: Any) -> None:
            seen.update(kwargs)

    def audit_target(target: str, options: AuditOptions) -> Report:
        seen["target"] = target
        model = types.SimpleNamespace(dtype="torch.bfloat16", inputs={})
        return types.SimpleNamespace(blocks=(block,), model=model)  # type: ignore[return-value]

    api = types.ModuleType("mhaudit.api")
    api.audit_target = audit_target  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mhaudit.api", api)
    monkeypatch.setattr("mhaudit.options.AuditOptions", AuditOptions)
    done = invoke(whatif_command, "model.py", "--block", "layers.0.attn", "--seq-len", "64")
    assert done.exit_code == 0, done.output
    assert callable(seen.pop("on_stage"))  # the status line's stage callback
    assert seen == {"target": "model.py", "seq_len": 64}
    shaped = invoke(whatif_command, "model.py", "--input-shape", "2x64x80")
    assert shaped.exit_code == 0, shaped.output
    assert seen["input_shape"] == (2, 64, 80)
    # cuDNN runs every d_k ≤ 256 on an H100 forward without padding (no MHA002 row)
    assert "what-if for layers.0.attn" in done.output and "cudnn" in done.output
    missing = invoke(whatif_command, "model.py", "--block", "nope")
    assert missing.exit_code == 2 and "'layers.0.attn'" in missing.stderr


def test_rules_list_and_explain() -> None:
    listed = invoke(rules)
    assert listed.exit_code == 0
    for code in ("MHA001", "MHA005", "MHA010"):
        assert code in listed.output
    explained = invoke(rules, "MHA007")
    assert explained.exit_code == 0
    lines = explained.output.splitlines()
    assert lines[:2] == ["MHA007: kv-cache-heavy", "=" * len("MHA007: kv-cache-heavy")]
    assert "**" not in explained.output and "```" not in explained.output
    raw = invoke(rules, "MHA007", "--format", "markdown")
    assert raw.output.startswith("# MHA007: kv-cache-heavy\n")
    by_name = invoke(rules, "kv-cache-heavy", "--format", "json")
    assert json.loads(by_name.output)["thresholds"]["min_bytes_per_token"]["default"] == 8192
    from mhaudit.rules import REGISTRY

    assert len(json.loads(invoke(rules, "--format", "json").output)) == len(REGISTRY)


def test_rules_unknown_code_exits_2() -> None:
    done = invoke(rules, "MHA999")
    assert done.exit_code == 2
    assert done.stderr == (
        "mhaudit: error: unknown rule 'MHA999'. Run `mhaudit rules` to list them.\n"
    )


def test_report_and_whatif_give_one_time_for_one_block() -> None:
    from mhaudit.cost.builder import build_block

    spec = LayoutSpec(d_model=512, heads=8, kv_heads=8, seq_len=2048)
    row = next(r for r in whatif(spec, H100).rows if r.current)
    block = build_block(layout_for(spec, 8, 8), spec.dtype, H100)
    assert block.target is not None
    assert row.est_time_s == block.target.roofline.time_s
    assert row.backend == block.target.kernel


def test_model_mode_header_names_the_input_as_report_does() -> None:
    from mhaudit.cli import main

    model = str(Path(__file__).resolve().parents[1] / "examples" / "llama_gqa.py")
    env = {"COLUMNS": "200", "NO_COLOR": "1"}
    report = CliRunner().invoke(main, ["report", model], env=env).stdout
    named = report.splitlines()[1].split("inputs: ")[1]
    assert named == "idx 1×128 int64"
    done = CliRunner().invoke(main, ["whatif", model, "-n", "128,512"], env=env)
    assert done.exit_code == 0, done.output
    heads = [line for line in done.stdout.splitlines() if line.startswith("what-if for")]
    assert heads[0].startswith("what-if for layers.0.self_attn: d_model 256, width h·d_k 256; "
                               f"input: {named}; block b 1 × n 128, ")
    assert "input: b 1 × n 512," in heads[1] and named not in heads[1]  # not audited there
    data = json.loads(CliRunner().invoke(main, ["whatif", model, "-f", "json"], env=env).stdout)
    assert data["spec"]["model_inputs"] == [["idx", [1, 128], "int64"]]
    spec = CliRunner().invoke(main, ["whatif", "--d-model", "256", "--heads", "4"], env=env)
    assert "input: b 1 × n 2048," in spec.stdout

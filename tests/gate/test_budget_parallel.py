"""The budget's ``parallel`` plan: per-device keys gate the phases costed under it, the same
figures as ``report --parallel`` and the library; a bad plan is exit 2 naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mhaudit.cli import main as cli
from mhaudit.data import ParallelPlan
from mhaudit.errors import ConfigError
from mhaudit.gate.budget import parse_budget, phases_needed
from mhaudit.gate.phases import budget_phase_options
from tests.parallel.test_cli_parallel import MODEL

# the 2-layer model of tests/parallel: its training step peaks at 417,800 B on one GPU and
# at 205,832 B per GPU under fsdp=4 (torch's FSDPMemTracker on a fake world of 4); the
# memory beyond tensors is set to 0 so that the budget sees the tensors alone
BETWEEN = 300_000
TENSORS_ONLY = {"nccl_buffers": "0", "workspace": "0", "cuda_context": "0",
                "fragmentation": "0"}
RESERVE = [arg for k, v in TENSORS_ONLY.items() for arg in ("--reserve", f"{k}={v}")]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = Path(tmp_path_factory.mktemp("model")) / "model.py"
    path.write_text(MODEL)
    return str(path)


def _check(model_file: str, tmp_path: Path, budget: str, *args: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "budget.toml"
    path.write_text("[budget]\n" + budget)
    return CliRunner().invoke(cli, ["check", model_file, "--budget", str(path), *args])


def test_parallel_parses_to_a_plan_and_runs_its_phase() -> None:
    budget = parse_budget({"parallel": "tp=8,sp,fsdp=8", "max_train_peak_bytes_per_device":
                           "40GiB", "max_decode_peak_bytes_per_device": "60GiB",
                           "max_train_comm_bytes_per_step": "1GiB"})
    assert budget.parallel == ParallelPlan(tp=8, sp=True, fsdp=8)
    assert phases_needed(budget) == {"train", "decode"}
    # a plan alone costs the training step; a --parallel beside it must agree
    alone = budget_phase_options(parse_budget({"parallel": "fsdp=2", "max_params": 1}), {})
    assert alone == {"train": True, "parallel": ParallelPlan(fsdp=2)}
    with pytest.raises(ConfigError, match="disagrees"):
        budget_phase_options(budget, {"parallel": "tp=4"})


@pytest.mark.parametrize("text", ["tp=zero", "tp=1,sp", "world=8"])
def test_a_bad_plan_names_the_key(text: str) -> None:
    with pytest.raises(ConfigError, match=r"budget: budget\.parallel = "):
        parse_budget({"parallel": text}, "budget", "budget")


def test_a_peak_over_budget_on_one_gpu_passes_under_the_plan(model_file: str,
                                                             tmp_path: Path) -> None:
    limit = f"max_train_peak_bytes_per_device = {BETWEEN}\n"
    one = _check(model_file, tmp_path, limit)
    assert one.exit_code == 1, one.output
    assert "train_peak_bytes_per_device" in one.output
    sharded = _check(model_file, tmp_path, 'parallel = "fsdp=4"\n' + limit, *RESERVE)
    assert sharded.exit_code == 0, sharded.output
    # a real GPU also holds a CUDA context, NCCL buffers and a workspace: over the budget
    real = _check(model_file, tmp_path, 'parallel = "fsdp=4"\n' + limit)
    assert real.exit_code == 1, real.output


def test_traffic_within_budget_on_one_gpu_fails_under_the_plan(model_file: str,
                                                               tmp_path: Path) -> None:
    limit = "max_train_comm_bytes_per_step = 0\n"
    assert _check(model_file, tmp_path, limit).exit_code == 0
    split = _check(model_file, tmp_path, 'parallel = "tp=2"\n' + limit)
    assert split.exit_code == 1, split.output


def test_a_bad_plan_in_the_budget_file_is_exit_2_on_one_line(model_file: str,
                                                             tmp_path: Path) -> None:
    done = _check(model_file, tmp_path, 'parallel = "tp=zero"\nmax_params = 1\n')
    assert done.exit_code == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "budget.parallel" in lines[0], done.stderr


def test_cli_library_and_budget_give_the_same_figures(model_file: str, tmp_path: Path) -> None:
    from mhaudit import audit_target
    from mhaudit.data.parallel import parallel_to_dict
    from mhaudit.gate.check import check

    done = CliRunner().invoke(cli, ["report", model_file, "--train", "--parallel", "fsdp=4",
                                    "--format", "json", *RESERVE])
    assert done.exit_code == 0, done.output
    cli_section = json.loads(done.stdout)["training"]["parallel"]
    library = audit_target(model_file, train=True, parallel="fsdp=4",
                           reserve=TENSORS_ONLY).training
    assert library is not None and library.parallel is not None
    assert parallel_to_dict(library.parallel) == cli_section
    outcome = check(model_file, budget={"parallel": "fsdp=4",
                                        "max_train_peak_bytes_per_device": BETWEEN},
                    reserve=TENSORS_ONLY)
    (result,) = outcome.results
    assert result.actual == cli_section["per_device_bytes"]["peak"] and result.passed
    assert cli_section["source"] == "torch.distributed"

"""check's suggestion: the smallest change that makes a failing per-GPU budget pass, tried
in order and confirmed by running the gate again with it applied."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mhaudit.cli import main as cli
from mhaudit.data.parallel import (
    CollectiveBytes,
    DeviceBytes,
    ParallelCost,
    ParallelPlan,
)
from mhaudit.whatif.plan_search import ModelShape
from mhaudit.whatif.suggest import Change, candidate_changes, scaled_peak, smallest_change
from tests.parallel.test_cli_parallel import MODEL

GiB = 1 << 30


def _cost(plan: ParallelPlan, params: int, acts: int) -> ParallelCost:
    tensors = params + acts
    held = DeviceBytes(params, 0, 0, acts, 0, 0, tensors + tensors // 20,
                       fragmentation=tensors // 20, tensor_peak=tensors)
    return ParallelCost(plan, "train", held, CollectiveBytes(), CollectiveBytes(), 1.0,
                        True, None, "analytic")


def test_scaled_peak_scales_what_grows_with_the_batch() -> None:
    # 10 GiB of states, 20 GiB of activations, 5% fragmentation: 31.5 GiB; half the batch
    # keeps 10 + 10 GiB of tensors and their 5%: 21 GiB
    cost = _cost(ParallelPlan(), 10 * GiB, 20 * GiB)
    assert cost.per_device_bytes.peak == int(31.5 * GiB)
    assert scaled_peak(cost, 0.5) == 21 * GiB


def test_changes_come_smallest_first() -> None:
    def cost_of(phase: str, plan: ParallelPlan, ckpt: str) -> ParallelCost:
        acts = {"none": 40, "selective": 30, "layers": 4}[ckpt] * GiB
        return _cost(plan, 40 * GiB // plan.world_size, acts // plan.tp)

    current = ParallelPlan(fsdp=4)
    changes = list(candidate_changes(cost_of, {"train": 1.0}, current, "none", 4,
                                     ModelShape(4, 512)))
    texts = [c.text for c in changes]
    assert texts[:4] == ["--checkpointing selective", "--checkpointing layers",
                         "--batch-size 2", "--batch-size 1"]
    plans = [c.options["parallel"] for c in changes[4:]]
    assert current not in plans and all(p.world_size == 4 for p in plans)
    # plans that change one axis come before those that change two
    axes = [sum(getattr(p, a) != getattr(current, a) for a in ("tp", "sp", "fsdp", "dp", "pp"))
            for p in plans]
    assert axes == sorted(axes)


def test_the_estimate_takes_its_level_from_the_audit_and_its_change_from_the_model() -> None:
    def cost_of(phase: str, plan: ParallelPlan, ckpt: str) -> ParallelCost:
        return _cost(plan, 10 * GiB, 20 * GiB // plan.tp)  # peak 31.5 GiB at t = 1

    # the audit read 63 GiB where the model says 31.5: every estimate is doubled
    changes = candidate_changes(cost_of, {"train": 63.0 * GiB}, ParallelPlan(), "none", 2,
                                ModelShape(4, 512, batch=2))
    first = next(changes)  # --checkpointing selective: the model's 31.5 GiB, doubled
    assert first.text == "--checkpointing selective" and first.peaks["train"] == 63 * GiB


def test_the_first_change_within_the_limits_that_passes_wins() -> None:
    changes = [Change("a", {}, {"train": 90}), Change("b", {}, {"train": 50}),
               Change("c", {}, {"train": 40})]
    tried: list[str] = []

    def confirm(change: Change) -> tuple[bool, int | None]:
        tried.append(change.text)
        return change.text == "c", change.peaks["train"]

    found = smallest_change(iter(changes), {"train": 60.0}, confirm)
    assert tried == ["b", "c"]  # "a" is over the limit on the analytic model: never rerun
    assert found is not None and (found.change, found.passes, found.peak_bytes) == ("c", True, 40)
    assert smallest_change(iter(changes[:1]), {"train": 60.0}, confirm) is None


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = Path(tmp_path_factory.mktemp("model")) / "model.py"
    path.write_text(MODEL)
    return str(path)


def test_check_proposes_a_change_and_applying_it_passes(model_file: str, tmp_path: Path) -> None:
    """The tiny model's training step under fsdp=2, its memory beyond tensors set to 0: a
    limit between the plan's peak and half of it fails, and the suggestion, applied as
    printed, passes."""
    reserve = [a for k in ("nccl_buffers", "workspace", "cuda_context", "fragmentation")
               for a in ("--reserve", f"{k}=0")]
    report = CliRunner().invoke(cli, ["report", model_file, "--train", "--parallel", "fsdp=2",
                                      "-f", "json", *reserve])
    assert report.exit_code == 0, report.output
    peak = json.loads(report.stdout)["training"]["parallel"]["per_device_bytes"]["peak"]
    limit = int(peak * 0.93)
    budget = tmp_path / "budget.toml"
    budget.write_text(f'[budget]\nparallel = "fsdp=2"\nmax_train_peak_bytes_per_device = {limit}\n')
    done = CliRunner().invoke(cli, ["check", model_file, "--budget", str(budget), "-f", "json",
                                    *reserve])
    assert done.exit_code == 1, done.output
    suggestion = json.loads(done.stdout)["budget"]["suggestion"]
    assert suggestion["passes"] is True and suggestion["peak_bytes"] <= limit
    change = suggestion["change"]
    if change.startswith("parallel = "):
        budget.write_text(f"[budget]\n{change}\nmax_train_peak_bytes_per_device = {limit}\n")
        extra: list[str] = []
    else:
        extra = change.split()
    applied = CliRunner().invoke(cli, ["check", model_file, "--budget", str(budget), "-f", "json",
                                       *reserve, *extra])
    assert applied.exit_code == 0, applied.output
    assert "suggestion" not in json.loads(applied.stdout)["budget"]

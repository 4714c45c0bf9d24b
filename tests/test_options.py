"""Options: one table of accepted values, shared by the library, the phases and the CLI."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from mhaudit.cli import main as cli
from mhaudit.cost.devices import ALIASES, PROFILES, get_profile
from mhaudit.errors import ConfigError
from mhaudit.options import (
    MAX_SIZE,
    AuditOptions,
    Checkpointing,
    FlopsBackend,
    Optimizer,
    Precision,
    resolve_options,
)


def test_optimizer_and_precision_tables_cover_exactly_the_enums() -> None:
    from mhaudit.phases.fakestep import PRECISIONS
    from mhaudit.phases.optimizer_step import OPTIMIZERS

    assert tuple(OPTIMIZERS) == Optimizer.values()
    assert tuple(PRECISIONS) == Precision.values()


def test_accepted_spellings_become_members_and_read_as_text() -> None:
    opts = AuditOptions(optimizer="sgd-momentum", precision="bf16-mixed",
                        checkpointing="layers", flops_backend="graph")
    assert opts.optimizer is Optimizer.SGD_MOMENTUM
    assert opts.precision is Precision.BF16_MIXED
    assert opts.checkpointing is Checkpointing.LAYERS
    assert opts.flops_backend is FlopsBackend.GRAPH
    assert f"{opts.optimizer}" == str(opts.optimizer) == "sgd-momentum"
    assert opts.optimizer == "sgd-momentum"


@pytest.mark.parametrize(("field", "value", "message"), [
    ("optimizer", "lion", "unknown optimizer 'lion'"),
    ("precision", "fp8", "unknown precision 'fp8'"),
    ("checkpointing", "all", "unknown checkpointing 'all'"),
    ("flops_backend", "ptflops", "unknown FLOPs backend 'ptflops'"),
    ("context", -1, "context must be a whole number"),
    ("context", MAX_SIZE + 1, "context must be a whole number"),
    ("seq_len", MAX_SIZE + 1, "seq_len 1099511627777 is out of range"),
])
def test_bad_values_are_config_errors_naming_the_option(field: str, value: object,
                                                         message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_options(None, {field: value})


def test_context_zero_is_accepted_as_on_the_command_line() -> None:
    assert resolve_options(None, {"context": 0}).context == 0


@pytest.mark.parametrize("name", sorted({*PROFILES, *ALIASES, "A100", "H100-SXM"}))
def test_gpu_accepts_every_name_and_alias_get_profile_accepts(name: str) -> None:
    get_profile(name)  # the library accepts it ...
    result = CliRunner().invoke(cli, ["report", "--gpu", name, "--help"])
    assert result.exit_code == 0, result.output  # ... and so does the command line


def test_gpu_alias_reaches_the_same_profile() -> None:
    assert get_profile("a100").key == "a100-80g"
    result = CliRunner().invoke(cli, ["whatif", "--d-model", "64", "--heads", "8",
                                      "--seq-len", "16", "--gpu", "a100", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "A100 80GB" in result.output or "a100-80g" in result.output

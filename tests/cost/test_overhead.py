"""The memory beyond tensors: each term's size from its source, by hand arithmetic."""

from __future__ import annotations

import pytest

from mhaudit.cost.devices import get_profile
from mhaudit.cost.overhead import (
    CUDA_CONTEXT,
    TERMS,
    memory_terms,
    parse_reserve,
    parse_reserve_items,
)
from mhaudit.data.parallel import ParallelPlan
from mhaudit.errors import ConfigError

MiB = 1 << 20
H100 = get_profile("h100")
A100 = get_profile("a100")


def _terms(plan: str, tensors: int = 0, profile=H100, env=None, **reserve: str):  # type: ignore[no-untyped-def]
    from mhaudit.parallel import parse_plan

    found = memory_terms(parse_plan(plan), profile, tensors, parse_reserve(reserve),
                         env={} if env is None else env)
    assert tuple(t.name for t in found) == TERMS
    return {t.name: t for t in found}


def test_one_gpu_opens_no_communicator() -> None:
    assert _terms("tp=1")["nccl_buffers"].bytes == 0


def test_ring_communicators_inside_and_across_nodes() -> None:
    # tp=8 fills an 8-GPU node: 16 channels × 2 ring neighbours × 4 MiB = 128 MiB;
    # fsdp=8 spans 64 GPUs, so crosses nodes: 4 channels × 2 × 4 MiB = 32 MiB
    assert _terms("tp=8,fsdp=8")["nccl_buffers"].bytes == 128 * MiB + 32 * MiB
    # tp=2 · fsdp=4 = 8 GPUs: both inside the node, 2 × 128 MiB
    assert _terms("tp=2,fsdp=4")["nccl_buffers"].bytes == 256 * MiB


def test_point_to_point_communicators() -> None:
    # pp=4 (32 GPUs per stage group of tp=8): two neighbouring stages × 2 channels × 4 MiB
    # = 16 MiB, beside tp's 128 MiB
    assert _terms("tp=8,pp=4")["nccl_buffers"].bytes == 128 * MiB + 16 * MiB
    # ep=4 out of fsdp=4 (inside the node): 3 peers × 2 × 4 MiB = 24 MiB, beside fsdp's 128
    assert _terms("fsdp=4,ep=4")["nccl_buffers"].bytes == 128 * MiB + 24 * MiB


def test_nccl_environment_sets_buffer_and_channels() -> None:
    env = {"NCCL_BUFFSIZE": str(2 * MiB), "NCCL_MAX_NCHANNELS": "8"}
    # 8 channels × 2 × 2 MiB = 32 MiB
    term = _terms("tp=8", env=env)["nccl_buffers"]
    assert term.bytes == 32 * MiB and "(set)" in term.source


def test_cublas_workspace_follows_torch_defaults_and_the_environment() -> None:
    # sm90: :4096:8 = 8 × 4 MiB; sm80: :4096:2:16:8 = 2 × 4 MiB + 8 × 16 KiB
    assert _terms("tp=1")["workspace"].bytes == 32 * MiB
    assert _terms("tp=1", profile=A100)["workspace"].bytes == 8 * MiB + 128 * 1024
    env = {"CUBLAS_WORKSPACE_CONFIG": ":16:8"}
    assert _terms("tp=1", env=env)["workspace"].bytes == 8 * 16 * 1024


def test_fragmentation_is_a_share_of_the_tensors_peak() -> None:
    assert _terms("tp=1", tensors=1_000_000)["fragmentation"].bytes == 50_000  # 5 %
    assert _terms("tp=1", tensors=1_000_000, fragmentation="8%")["fragmentation"].bytes == 80_000
    assert _terms("tp=1")["cuda_context"].bytes == CUDA_CONTEXT


def test_the_users_sizes_win_and_say_so() -> None:
    terms = _terms("tp=8", cuda_context="600MiB", nccl_buffers="1GB", workspace="0")
    assert terms["cuda_context"].bytes == 600 * MiB
    assert terms["nccl_buffers"].bytes == 10**9 and terms["workspace"].bytes == 0
    assert all(terms[n].source == "set by --reserve"
               for n in ("cuda_context", "nccl_buffers", "workspace"))


@pytest.mark.parametrize(("items", "says"), [
    (("context=1GB",), "unknown memory term"),
    (("cuda_context=lots",), "not a size"),
    (("cuda_context=5%",), "only fragmentation"),
    (("cuda_context",), "not NAME=SIZE"),
])
def test_bad_reserve_items_say_what_and_how(items: tuple[str, ...], says: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_reserve_items(items)
    assert says in info.value.one_line() and info.value.tip


def test_the_peak_adds_every_term_and_fits_reads_it() -> None:
    from mhaudit.data.parallel import DeviceBytes
    from mhaudit.parallel.costs import with_terms

    held = DeviceBytes(10, 20, 30, 40, 0, 0, 100, tensor_peak=100)
    terms = memory_terms(ParallelPlan(tp=2), H100, held.tensors, None, env={})
    out, _ = with_terms(held, terms)
    # 100 B of tensors + 128 MiB NCCL (tp=2 in a node) + 32 MiB workspace + 512 MiB
    # context + 5 B fragmentation
    assert out.tensors == 100
    assert out.peak == 100 + 128 * MiB + 32 * MiB + 512 * MiB + 5

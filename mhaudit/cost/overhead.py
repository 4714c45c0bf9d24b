"""Memory a GPU needs beyond the step's tensors: NCCL buffers, cuBLAS workspace, the CUDA
context and the caching allocator's fragmentation, each with the source of its size.

Every term can be set by the user (``--reserve NAME=SIZE``, or ``reserve=`` in the
library); otherwise it comes from the environment variable the library itself reads, or
from the library's documented default.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from mhaudit.cost.devices import GpuProfile
from mhaudit.data.parallel import MemoryTerm, ParallelPlan
from mhaudit.errors import ConfigError

TERMS = ("nccl_buffers", "workspace", "cuda_context", "fragmentation")
"""The memory beyond tensors, in the order the report lists them."""

MiB = 1 << 20
NCCL_BUFFSIZE = 4 * MiB
"""NCCL's default ``NCCL_BUFFSIZE``: the Simple protocol's buffer per channel and peer."""
RING_CHANNELS = {True: 16, False: 4}
"""Channels NCCL opens for a ring inside a node (NVLink) and across nodes (one NIC per GPU);
NCCL picks per topology, ``NCCL_MAX_NCHANNELS`` bounds it."""
P2P_CHANNELS = 2
"""Channels per peer of point-to-point traffic (pipeline sends, all-to-all)."""
CUDA_CONTEXT = 512 * MiB
"""A CUDA 12 context with lazy module loading (the default since CUDA 12.2), cuBLAS and
NCCL loaded, as ``nvidia-smi`` shows an idle PyTorch process: about half a GiB."""
FRAGMENTATION = 0.05
"""Margin over the tensors' peak for the caching allocator's block rounding (512 B small,
2 MiB large) and split segments."""

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%|b|kb|kib|mb|mib|gb|gib|tb|tib)?\s*$", re.I)
_UNITS = {"b": 1, "kb": 10**3, "kib": 1 << 10, "mb": 10**6, "mib": 1 << 20, "gb": 10**9,
          "gib": 1 << 30, "tb": 10**12, "tib": 1 << 40}
_FIX = "Write e.g. cuda_context=600MiB or fragmentation=8%."
_NAMES = "Use one of " + ", ".join(TERMS) + "."


@dataclass(frozen=True)
class Reserve:
    """The user's sizes for the terms: bytes, or for fragmentation a share of the peak."""

    bytes: Mapping[str, int]
    share: float | None = None
    """Fragmentation as a share of the tensors' peak, when given as a percentage."""


def parse_reserve(items: Mapping[str, str] | None) -> Reserve:
    """``{"cuda_context": "600MiB", "fragmentation": "8%"}`` to a Reserve; ConfigError
    naming the bad entry and the form otherwise."""
    sizes: dict[str, int] = {}
    share = None
    for name, text in (items or {}).items():
        if name not in TERMS:
            raise ConfigError(f"unknown memory term {name!r}", _NAMES)
        match = _SIZE.match(str(text))
        if match is None:
            raise ConfigError(f"memory term {name}={text!r} is not a size", _FIX)
        value, unit = float(match.group(1)), (match.group(2) or "b").lower()
        if unit == "%":
            if name != "fragmentation" or value > 100:
                raise ConfigError(f"{name}={text} is a share, which only fragmentation takes "
                                  "(0-100%)", _FIX)
            share = value / 100
        else:
            sizes[name] = int(value * _UNITS[unit])
    return Reserve(sizes, share)


def as_reserve(value: Reserve | Mapping[str, str] | None) -> Reserve:
    """A Reserve from itself, its mapping form, or nothing."""
    return value if isinstance(value, Reserve) else parse_reserve(value)


def parse_reserve_items(items: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``("cuda_context=600MiB", ...)`` (the repeatable CLI option) to a mapping."""
    out: dict[str, str] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise ConfigError(f"--reserve {item!r} is not NAME=SIZE", _FIX)
        out[name.strip().lower()] = value
    parse_reserve(out)
    return out


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def _groups(plan: ParallelPlan, profile: GpuProfile) -> list[tuple[str, int, bool]]:
    """(axis, degree, inside one node) of every group the plan opens on a rank, the mesh
    (pp, dp, fsdp, cp, tp) outermost first: an axis stays inside a node while the product
    of its degree and those inside it fits the node. Expert groups span the ranks they
    borrow from data and context."""
    inner, groups = 1, []
    for axis in ("tp", "cp", "fsdp", "dp", "pp"):
        degree = getattr(plan, axis)
        inner *= degree
        if degree > 1:
            groups.append((axis, degree, inner <= profile.gpus_per_node))
    if plan.ep > 1:
        groups.append(("ep", plan.ep, plan.tp * plan.ep <= profile.gpus_per_node))
    return groups


def nccl_bytes(plan: ParallelPlan, profile: GpuProfile,
               env: Mapping[str, str]) -> tuple[int, str]:
    """NCCL's buffers on one rank: per ring communicator (tp, cp, fsdp, dp) channels × 2
    ring neighbours × NCCL_BUFFSIZE; per point-to-point one (pp: the two neighbouring
    stages; ep: every other rank of the expert group) 2 channels per peer × NCCL_BUFFSIZE."""
    size = _env_int(env, "NCCL_BUFFSIZE") or NCCL_BUFFSIZE
    cap = _env_int(env, "NCCL_MAX_NCHANNELS")
    total, parts = 0, []
    for axis, degree, local in _groups(plan, profile):
        if axis in ("pp", "ep"):
            peers = min(2, degree - 1) if axis == "pp" else degree - 1
            part = peers * P2P_CHANNELS * size
        else:
            channels = min(RING_CHANNELS[local], cap or RING_CHANNELS[local])
            part = channels * 2 * size
        total += part
        parts.append(f"{axis} {part // MiB:,} MiB")
    where = "NCCL_BUFFSIZE" + (" (set)" if "NCCL_BUFFSIZE" in env else " 4 MiB default")
    source = (f"{where} × channels × peers per communicator: {', '.join(parts)}"
              if parts else "no communicator: one GPU")
    return total, source


def cublas_workspace(profile: GpuProfile, env: Mapping[str, str]) -> tuple[int, str]:
    """torch's cuBLAS workspace per handle and stream: ``CUBLAS_WORKSPACE_CONFIG`` when set
    (``:SIZE_KiB:COUNT`` pairs), else torch's default, ``:4096:8`` (32 MiB) on sm90 and
    newer and ``:4096:2:16:8`` (8 MiB + 128 KiB) before."""
    config = env.get("CUBLAS_WORKSPACE_CONFIG", "")
    pairs = re.findall(r":(\d+):(\d+)", config)
    if pairs:
        return sum(int(k) * 1024 * int(n) for k, n in pairs), f"CUBLAS_WORKSPACE_CONFIG={config}"
    if profile.vendor == "nvidia" and profile.compute_capability >= (9, 0):
        return 4096 * 1024 * 8, "torch's default cuBLAS workspace on sm90+ (:4096:8)"
    return 4096 * 1024 * 2 + 16 * 1024 * 8, "torch's default cuBLAS workspace (:4096:2:16:8)"


def memory_terms(plan: ParallelPlan, profile: GpuProfile, tensor_peak: int,
                 reserve: Reserve | None = None,
                 env: Mapping[str, str] | None = None) -> tuple[MemoryTerm, ...]:
    """The four terms beyond tensors on one rank of ``plan``, the user's sizes first."""
    env = os.environ if env is None else env
    given = reserve.bytes if reserve else {}
    nccl, nccl_src = nccl_bytes(plan, profile, env)
    work, work_src = cublas_workspace(profile, env)
    share = reserve.share if reserve and reserve.share is not None else FRAGMENTATION
    share_src = ("set by --reserve" if reserve and reserve.share is not None
                 else "default margin")
    found = {
        "nccl_buffers": (nccl, nccl_src),
        "workspace": (work, work_src),
        "cuda_context": (CUDA_CONTEXT, "typical CUDA 12 context, lazy module loading"),
        "fragmentation": (int(tensor_peak * share),
                          f"{share:.0%} of the tensors' peak ({share_src}): the caching "
                          "allocator's rounding and split segments"),
    }
    return tuple(MemoryTerm(name, given[name], "set by --reserve") if name in given
                 else MemoryTerm(name, *found[name]) for name in TERMS)

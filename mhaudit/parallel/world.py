"""A simulated world of any size in this process: torch's fake process group, torn down after."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from mhaudit.data.parallel import ParallelPlan

DATA_AXES = ("dp_replicate", "dp_shard")
"""The data-parallel dims of the mesh: replicas (``plan.dp``) and FSDP shards
(``plan.fsdp``), as torchtitan names them; both together are HSDP."""


def mesh_axes(plan: ParallelPlan) -> tuple[tuple[str, int], ...]:
    """The mesh dims the plan uses, outermost first (pp, dp_replicate, dp_shard, cp, tp),
    each with its degree; dims of degree 1 are left out."""
    dims = (("pp", plan.pp), ("dp_replicate", plan.dp), ("dp_shard", plan.fsdp),
            ("cp", plan.cp), ("tp", plan.tp))
    return tuple((name, size) for name, size in dims if size > 1)


def submesh(mesh: DeviceMesh, names: Sequence[str]) -> DeviceMesh:
    """The sub-mesh over ``names`` (in the mesh's order); the mesh itself when it has no
    other dims."""
    if tuple(mesh.mesh_dim_names or ()) == tuple(names):
        return mesh
    return mesh[tuple(names)] if len(names) > 1 else mesh[names[0]]


def _mesh(plan: ParallelPlan) -> DeviceMesh:
    axes = mesh_axes(plan) or (("dp_shard", 1),)
    return init_device_mesh("cpu", tuple(size for _, size in axes),
                            mesh_dim_names=tuple(name for name, _ in axes))


@contextmanager
def fake_world(plan: ParallelPlan) -> Iterator[DeviceMesh]:
    """Rank 0 of a fake process group of ``plan.world_size`` ranks, as a mesh over the dims
    the plan uses (:func:`mesh_axes`); the group is destroyed on exit, error or not.

    Refuses to run inside an already initialised process group, which it would replace.
    """
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("a process group is already initialised in this process")
    dist.init_process_group("fake", rank=0, world_size=plan.world_size, store=FakeStore())
    try:
        yield _mesh(plan)
    finally:
        dist.destroy_process_group()

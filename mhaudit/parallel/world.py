"""A simulated world of any size in this process: torch's fake process group, torn down after."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from mhaudit.data.parallel import ParallelPlan


def _mesh(plan: ParallelPlan) -> DeviceMesh:
    if plan.tp > 1 and plan.fsdp > 1:
        return init_device_mesh("cpu", (plan.fsdp, plan.tp), mesh_dim_names=("dp", "tp"))
    name = "tp" if plan.tp > 1 else "dp"
    return init_device_mesh("cpu", (max(plan.tp, plan.fsdp),), mesh_dim_names=(name,))


@contextmanager
def fake_world(plan: ParallelPlan) -> Iterator[DeviceMesh]:
    """Rank 0 of a fake process group of ``tp · fsdp`` ranks, as a (dp, tp) mesh (or a 1-D
    one when only one axis is used); the group is destroyed on exit, error or not.

    Refuses to run inside an already initialised process group, which it would replace.
    """
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("a process group is already initialised in this process")
    dist.init_process_group("fake", rank=0, world_size=plan.tp * plan.fsdp, store=FakeStore())
    try:
        yield _mesh(plan)
    finally:
        dist.destroy_process_group()

"""torch's own counts on a fake process group: FSDPMemTracker's sharded states and
CommDebugMode's collectives, the references the parallel audit meets."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode


def _world(size: int) -> Any:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=0, world_size=size, store=FakeStore())
    return init_device_mesh("cpu", (size,))


def fsdp_states(model: nn.Module, ids: torch.Tensor, units: list[str],
                world: int) -> dict[str, int]:
    """FSDPMemTracker's bytes after one AdamW step of ``model`` wrapped unit by unit, by
    category, and at the step's peak (keys prefixed ``peak``)."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.fsdp import fully_shard

    twin = copy.deepcopy(model)
    mesh = _world(world)
    try:
        for unit in units:
            fully_shard(twin.get_submodule(unit), mesh=mesh)
        fully_shard(twin, mesh=mesh)
        with FakeTensorMode(allow_non_fake_inputs=True):
            twin.to_empty(device="cpu")
            opt = torch.optim.AdamW(twin.parameters())
            tracker = FSDPMemTracker(twin, opt)
            with tracker:
                twin(torch.zeros(ids.shape, dtype=ids.dtype)).logits.sum().backward()
                opt.step()
            snap = tracker.get_tracker_snapshot()
            peak = tracker.get_tracker_snapshot("peak")
    finally:
        dist.destroy_process_group()
    out = {str(k.value if hasattr(k, "value") else k): v
           for k, v in next(iter(snap.values())).items()}
    out.update({"peak " + str(k.value if hasattr(k, "value") else k): v
                for k, v in next(iter(peak.values())).items()})
    return out


def tp_comm_counts(model: nn.Module, ids: torch.Tensor, layout: Mapping[str, str],
                   world: int) -> dict[str, int]:
    """CommDebugMode's collective counts of one forward and backward of ``model`` under the
    column-/row-wise ``layout``, by op name."""
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    styles: dict[str, Callable[[], Any]] = {"colwise": ColwiseParallel,
                                             "rowwise": RowwiseParallel}
    twin = copy.deepcopy(model)
    mesh = _world(world)
    try:
        parallelize_module(twin, mesh, {name: styles[role]() for name, role in layout.items()})
        with FakeTensorMode(allow_non_fake_inputs=True):
            twin.to_empty(device="cpu")
            mode = CommDebugMode()
            with mode:
                twin(torch.zeros(ids.shape, dtype=ids.dtype)).logits.sum().backward()
    finally:
        dist.destroy_process_group()
    return {str(op): n for op, n in mode.get_comm_counts().items()}


def forward_activations(model: nn.Module, ids: torch.Tensor) -> int:
    """MemTracker's activation bytes at the end of one forward of ``model`` (a meta copy,
    materialised as fake tensors) on one device: what autograd keeps for the backward."""
    from torch.distributed._tools.mem_tracker import MemTracker

    twin = copy.deepcopy(model)
    with FakeTensorMode(allow_non_fake_inputs=True):
        twin.to_empty(device="cpu")
        tracker = MemTracker()
        tracker.track_external(twin)
        with tracker:
            twin(torch.zeros(ids.shape, dtype=ids.dtype))
            snap = tracker.get_tracker_snapshot()
    dev = next(iter(snap.values()))
    return int(next(v for k, v in dev.items() if str(getattr(k, "value", k)) == "Activation"))

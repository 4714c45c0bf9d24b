"""A phase's ``parallel`` field has exactly the binding JSON names and types."""

from __future__ import annotations

import json

from mhaudit.data import CollectiveBytes, DeviceBytes, ParallelCost, ParallelPlan
from mhaudit.parallel import parallel_to_dict


def test_binding_shape() -> None:
    cost = ParallelCost(
        plan=ParallelPlan(tp=8, sp=True, fsdp=8), phase="train",
        per_device_bytes=DeviceBytes(1, 2, 3, 4, 0, 5, 15),
        comm_bytes_per_step=CollectiveBytes(all_gather=10, all_reduce=20),
        comm_calls_per_step=CollectiveBytes(all_gather=1, all_reduce=2),
        step_time_s=0.5, fits=True, max_batch_size=None, source="analytic", notes=("n",))
    got = json.loads(json.dumps(parallel_to_dict(cost)))
    assert got["plan"] == {"tp": 8, "sp": True, "fsdp": 8, "pp": 1, "world_size": 64,
                           "ep": 1, "cp": 1, "dp": 1, "pp_schedule": "1f1b",
                           "microbatches": 1}
    assert got["per_device_bytes"] == {"params": 1, "grads": 2, "optimizer_states": 3,
                                       "activations": 4, "kv_cache": 0, "temporaries": 5,
                                       "peak": 15, "nccl_buffers": 0, "workspace": 0,
                                       "cuda_context": 0, "fragmentation": 0,
                                       "tensor_peak": 15}
    assert got["comm_bytes_per_step"] == {"all_gather": 10, "reduce_scatter": 0,
                                          "all_reduce": 20, "all_to_all": 0, "send_recv": 0}
    assert (got["step_time_s"], got["fits"], got["max_batch_size"], got["source"]) == (
        0.5, True, None, "analytic")
    binding = {"plan", "per_device_bytes", "comm_bytes_per_step", "step_time_s", "fits",
               "max_batch_size", "source", "memory_terms", "pipeline", "mfu", "experts",
               "context", "step_parts"}
    assert binding <= set(got) and set(got) - binding == {"comm_calls_per_step", "notes",
                                                     "analytic_activations"}
    assert (got["memory_terms"], got["pipeline"], got["mfu"]) == ([], None, None)
    assert (got["experts"], got["context"]) == (None, None)

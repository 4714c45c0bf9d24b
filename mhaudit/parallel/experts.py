"""Expert parallelism: routed experts split over the EP group, tokens dispatched to them and
combined back by all-to-all, as torchtitan's ``ExpertParallel`` runs them.

The rules, per rank (rank 0, the busiest when the split is uneven):

- **Experts.** Each routed layer's E experts are split over the ep ranks of its EP group
  along their leading dim (torch's ``Shard(0)``): ⌈E/ep⌉ on the first ranks.
- **Sharding.** The EP group is carved out of the FSDP ranks first (torchtitan's
  ``dp_shard_in_ep``), so the expert shards are FSDP-sharded over the FSDP ranks left,
  g = fsdp / gcd(ep, fsdp), and not over the whole FSDP group as the dense parameters
  are. The ranks of ep beyond the FSDP group come from the context and replica ranks,
  which hold copies (mhaudit shards every parameter over the fsdp ranks only; torchtitan
  also shards over cp, its ``dp_shard_cp``). With cp = dp = 1 and ep | fsdp this is
  torchtitan's rule: the experts sharded over fsdp·dp·cp / ep.
- **EP × TP.** With t > 1 each expert's matrices are also split over the TP group
  (torchtitan's ``ExpertTensorParallel``, ETP = TP): the dim that is not d_model, as the
  dense MLP's up/gate (column) and down (row) are; a tensor with no such dim stays whole.
  The tokens are replicated over the TP group, so each TP rank runs the same all-to-all in
  its own EP group, and the experts' output is all-reduced over t (reduce-scattered with
  SP) in the forward, their input gradient in the backward, as a dense MLP's.
- **Routing.** Balanced: each expert receives tokens·k/E of a rank's token copies. Real
  routers are not balanced; the figures are the balanced step's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from torch import nn

from mhaudit.cost.stepspec import TRAIN, StepSpec
from mhaudit.data import ExpertLayer
from mhaudit.data.parallel import ExpertCost, ParallelPlan
from mhaudit.errors import ConfigError
from mhaudit.parallel.inventory import ParamInfo, UnitShard
from mhaudit.parallel.roles import unit_of
from mhaudit.parallel.shard import ceil_div, fsdp_shard_elements

COUNT_BYTES = 8
"""Bytes of one per-expert token count (int64), exchanged before the dispatch."""

Sent = tuple[str, str, int, int]
"""(group ``ep`` or ``tp``, collective kind, bytes this rank sends, calls)."""


@dataclass(frozen=True)
class Routing:
    """The routed-expert layers of a model and how their buffers are sized."""

    layers: tuple[ExpertLayer, ...]
    """Layers found by :func:`mhaudit.flops.moe.routed_experts` (a top-k, or a sampled
    selection, over E experts feeding stacked expert weights)."""
    capacity_factor: float = 1.0
    """1.0: dropless, the buffers hold exactly the routed token copies; otherwise each
    expert's buffer is padded (or cut) to capacity cf · tokens · k / E."""

    def __post_init__(self) -> None:
        cf = self.capacity_factor
        if isinstance(cf, bool) or not isinstance(cf, (int, float)) or not cf > 0:
            raise ConfigError(f"capacity_factor must be a positive number, not {cf!r}",
                              "Pass 1.0 for dropless routing, or e.g. 1.25.")


def routed_tensors(model: nn.Module, layers: Sequence[ExpertLayer]) -> dict[str, int]:
    """Parameter name to E for the stacked tensors of each routed layer: every parameter
    held directly by the layer's module whose leading dim is E (weights and biases)."""
    found: dict[str, int] = {}
    params = dict(model.named_parameters())
    for layer in layers:
        prefix = layer.module + "."
        for name, param in params.items():
            rest = name[len(prefix):]
            if name.startswith(prefix) and "." not in rest and layer.num_experts \
                    and tuple(param.shape[:1]) == (layer.num_experts,):
                found[name] = layer.num_experts
    return found


def experts_per_rank(num_experts: int, ep: int) -> int:
    """⌈E / ep⌉: the experts rank 0 holds (torch's Shard(0) chunks)."""
    return ceil_div(num_experts, ep)


def shard_group(plan: ParallelPlan) -> int:
    """Ranks an expert shard is FSDP-sharded over: fsdp / gcd(ep, fsdp)."""
    return plan.fsdp // math.gcd(plan.ep, plan.fsdp)


def local_shape(shape: Sequence[int], d_model: int, plan: ParallelPlan) -> tuple[int, ...]:
    """One rank's slice of a stacked (E, ...) expert tensor: ⌈E/ep⌉ experts, and with TP
    the first dim after E that is not d_model split ⌈/t⌉ (none: kept whole)."""
    local = [experts_per_rank(shape[0], plan.ep), *shape[1:]]
    if plan.tp > 1:
        axis = next((i for i in range(1, len(local)) if local[i] != d_model), None)
        if axis is not None:
            local[axis] = ceil_div(local[axis], plan.tp)
    return tuple(local)


def expert_shards(params: Sequence[ParamInfo], d_model: int,
                  plan: ParallelPlan) -> tuple[UnitShard, ...]:
    """One FSDP unit per routed layer (its module, as torchtitan wraps the experts apart):
    each tensor's local slice (:func:`local_shape`) FSDP-sharded over
    :func:`shard_group` ranks, dim 0 padded to a multiple of it."""
    g = shard_group(plan)
    units: dict[str, list[int]] = {}
    for p in params:
        if not p.experts:
            continue
        rows = fsdp_shard_elements(local_shape(p.shape, d_model, plan), g)
        tally = units.setdefault(p.name.rpartition(".")[0], [0, 0])
        tally[0] += rows
        tally[1] += 1
    return tuple(UnitShard(name, shard, shard * g, tensors, group=g)
                 for name, (shard, tensors) in units.items())


def tokens_per_rank(spec: StepSpec, plan: ParallelPlan) -> int:
    """Tokens a rank routes through each layer: b · ⌈s / cp⌉ (the sequence is split over
    the context ranks; a decode step's one position is not)."""
    return spec.batch * ceil_div(spec.tokens, plan.cp if spec.phase == TRAIN else 1)


def dispatched_rows(tokens: int, layer: ExpertLayer, capacity_factor: float) -> int:
    """Token copies in a rank's dispatch buffer: tokens · k dropless (cf = 1.0); padded to
    capacity C = ⌈cf · tokens · k / E⌉ per expert otherwise, E · C in all."""
    copies = tokens * layer.top_k
    if capacity_factor == 1.0 or not layer.num_experts:
        return copies
    return layer.num_experts * math.ceil(capacity_factor * copies / layer.num_experts)


def remote_rows(rows: int, num_experts: int, ep: int) -> int:
    """Copies whose experts live on other ranks: balanced routing gives each expert
    rows / E, and rank 0 holds ⌈E/ep⌉ of them, so rows · (E − ⌈E/ep⌉) / E leave it
    ((ep − 1)/ep of them when ep divides E)."""
    return rows * (num_experts - experts_per_rank(num_experts, ep)) // num_experts


def _layer_traffic(layer: ExpertLayer, d_model: int, spec: StepSpec, plan: ParallelPlan,
                   capacity_factor: float) -> list[Sent]:
    """One layer's all-to-alls: the token counts (E int64, forward only), then dispatch
    and combine of the remote copies at d_model and the compute dtype, each once in the
    forward and once more in the backward (the gradient of an all-to-all is the reverse
    all-to-all of the same size)."""
    e = layer.num_experts
    rows = dispatched_rows(tokens_per_rank(spec, plan), layer, capacity_factor)
    payload = remote_rows(rows, e, plan.ep) * d_model * spec.compute_bytes
    passes = 4 if spec.phase == TRAIN else 2
    counts = (e - experts_per_rank(e, plan.ep)) * COUNT_BYTES
    return [("ep", "all_to_all", counts + passes * payload, passes + 1)]


def _tp_traffic(tokens: int, d_model: int, spec: StepSpec, plan: ParallelPlan) -> list[Sent]:
    """EP × TP: the experts' partial output (tokens · d) reduced over t in the forward and
    their input gradient in the backward; ring all-reduce 2·(t−1)/t·S, or with SP a
    reduce-scatter and an all-gather of (t−1)/t·S each way."""
    t = plan.tp
    size = tokens * d_model * spec.compute_bytes
    train = spec.phase == TRAIN
    if plan.sp:
        part = (t - 1) * size // t
        return [("tp", "reduce_scatter", part * (2 if train else 1), 2 if train else 1),
                ("tp", "all_gather", part * (2 if train else 1), 2 if train else 1)]
    return [("tp", "all_reduce", 2 * (t - 1) * size // t * (2 if train else 1),
             2 if train else 1)]


def expert_traffic(routing: Routing | None, d_model: int, spec: StepSpec,
                   plan: ParallelPlan) -> tuple[Sent, ...]:
    """Every collective the routed layers add to one step on one rank (none at ep = 1)."""
    if routing is None or plan.ep == 1:
        return ()
    sent: list[Sent] = []
    for layer in routing.layers:
        if not layer.num_experts or not layer.top_k:
            continue
        sent += _layer_traffic(layer, d_model, spec, plan, routing.capacity_factor)
        if plan.tp > 1:
            sent += _tp_traffic(tokens_per_rank(spec, plan), d_model, spec, plan)
    return tuple(sent)


def expert_cost(routing: Routing | None, shards: Sequence[UnitShard], d_model: int,
                spec: StepSpec, plan: ParallelPlan,
                stage: tuple[int, Sequence[str]] | None = None) -> ExpertCost | None:
    """The experts' figures on rank 0: how many, their states and their all-to-alls, over
    every routed layer, or with ``stage`` (a pipeline rank and its layer units) over the
    layers that stage runs, as a pipeline plan's per-device bytes count that rank. E, k
    and the experts per rank describe the model's largest routed layer either way."""
    layers = [x for x in routing.layers if x.num_experts and x.top_k] if routing else []
    if routing is None or plan.ep == 1 or not layers:
        return None
    here = layers
    if stage is not None:
        here = [x for x in layers if unit_of(x.module + ".", stage[1])]
        shards = [s for s in shards if unit_of(s.unit + ".", stage[1])]
    mine = [s for s in shards if s.group]
    params = sum(s.shard_elements for s in mine) * spec.param_bytes
    train = spec.phase == TRAIN
    biggest = max(layers, key=lambda x: x.num_experts)
    tokens = tokens_per_rank(spec, plan)
    sent = [s for s in expert_traffic(replace(routing, layers=tuple(here)), d_model, spec, plan)
            if s[0] == "ep"]
    return ExpertCost(
        layers=len(here), num_experts=biggest.num_experts, top_k=biggest.top_k,
        experts_per_rank=experts_per_rank(biggest.num_experts, plan.ep),
        uneven=any(x.num_experts % plan.ep for x in layers), shard_group=shard_group(plan),
        tokens_per_rank=tokens,
        dispatched_rows=dispatched_rows(tokens, biggest, routing.capacity_factor),
        capacity_factor=float(routing.capacity_factor), params=params,
        grads=params if train else 0,
        optimizer_states=params * spec.states_per_param
        + sum(s.tensors for s in mine) * spec.step_counter_bytes,
        all_to_all_bytes=sum(s[2] for s in sent), all_to_all_calls=sum(s[3] for s in sent),
        stage=None if stage is None else stage[0])

"""Parallel plans and what one device holds, sends and spends in a step under them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SOURCES = ("torch.distributed", "analytic")
"""Where a parallel cost comes from: the plan applied to the model on a fake process
group, or the closed-form model."""

PP_SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", "zero-bubble", "dualpipev")
"""Pipeline schedules, as torch.distributed.pipelining names its classes: ScheduleGPipe,
Schedule1F1B, ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble, ScheduleDualPipeV."""


@dataclass(frozen=True)
class ParallelPlan:
    """How a step is spread over GPUs: tensor, sequence, context, fully-sharded and
    replicated data, pipeline and expert parallelism.

    The mesh is (pp, dp, fsdp, cp, tp), outermost first; ``ep`` carves the expert groups
    out of the data-parallel and context ranks (fsdp · dp · cp), as torchtitan and Megatron
    do, so it adds no GPUs."""

    tp: int = 1
    """Tensor-parallel degree t: heads and MLP columns split over t GPUs."""
    sp: bool = False
    """Sequence parallelism beside TP: norms, dropouts and residuals split along the
    sequence over the same t GPUs."""
    fsdp: int = 1
    """Fully-sharded data-parallel degree (FSDP2 / ZeRO-3): parameters, gradients and
    optimizer states sharded over this many GPUs, each running its own micro-batch."""
    pp: int = 1
    """Pipeline stages: the layers split into this many consecutive groups."""
    ep: int = 1
    """Expert-parallel degree: each routed expert layer's experts split over this many
    ranks of the data-parallel × context group, tokens exchanged by all-to-all."""
    cp: int = 1
    """Context-parallel degree: the sequence split over this many ranks, K/V passed round
    a ring in every attention layer (torch's ``context_parallel``)."""
    dp: int = 1
    """Replicas beside ``fsdp`` (DDP, or HSDP's replicate dim): each holds whole copies of
    its shards; gradients are all-reduced across replicas."""
    pp_schedule: str = "1f1b"
    """Pipeline schedule (see :data:`PP_SCHEDULES`); read only when ``pp`` > 1."""
    microbatches: int = 1
    """Micro-batches per step and replica that the pipeline schedule interleaves."""

    @property
    def world_size(self) -> int:
        """GPUs the plan uses: tp · cp · fsdp · dp · pp."""
        return self.tp * self.cp * self.fsdp * self.dp * self.pp

    @property
    def data_ranks(self) -> int:
        """Ranks that see different samples or tokens of the step: fsdp · dp · cp, what
        ``ep`` divides."""
        return self.fsdp * self.dp * self.cp

    def text(self) -> str:
        """The plan in the ``--parallel`` grammar, e.g. ``tp=8,sp,fsdp=8,pp=1``; axes at
        their defaults beyond tp, fsdp and pp are left out."""
        parts = [f"tp={self.tp}"] + (["sp"] if self.sp else [])
        parts += [f"cp={self.cp}"] if self.cp > 1 else []
        parts += [f"fsdp={self.fsdp}"] + ([f"dp={self.dp}"] if self.dp > 1 else [])
        parts += [f"ep={self.ep}"] if self.ep > 1 else []
        parts += [f"pp={self.pp}"]
        if self.pp > 1:
            parts += [f"pp_schedule={self.pp_schedule}", f"microbatches={self.microbatches}"]
        return ",".join(parts)


@dataclass(frozen=True)
class DeviceBytes:
    """Bytes one GPU holds under a plan, by what they hold; parts a phase lacks are 0."""

    params: int
    """This rank's parameter shard (FSDP's padded dim-0 shard of its TP slice)."""
    grads: int
    """This rank's gradient shard, as reduce-scattered (0 outside training)."""
    optimizer_states: int
    """Optimizer states of this rank's parameter shard (0 outside training)."""
    activations: int
    """Activations saved for the backward on this rank, split by TP and SP."""
    kv_cache: int
    """KV cache on this rank (KV heads replicated when t > h_kv); 0 in training."""
    temporaries: int
    """FSDP's gathered parameters and collective buffers at the peak: the root unit's, and
    the largest layer's twice (running and prefetched)."""
    peak: int
    """Peak bytes of the step on this rank: the tensors' peak (``tensor_peak``) plus the
    memory beyond tensors (NCCL buffers, workspace, CUDA context, fragmentation): what the
    GPU must have free."""
    nccl_buffers: int = 0
    """NCCL's staging buffers, per communicator the plan opens on this rank."""
    workspace: int = 0
    """cuBLAS and cuDNN/attention-kernel workspaces."""
    cuda_context: int = 0
    """The CUDA context and the kernel images it loads."""
    fragmentation: int = 0
    """The caching allocator's rounding and a fragmentation margin over the tensors."""
    tensor_peak: int | None = None
    """Peak bytes of tensors alone: torch's measured peak, or the analytic sum of the parts
    (which leaves out the optimizer update's temporaries); None when ``peak`` is it."""

    @property
    def tensors(self) -> int:
        """The tensors' peak, without the memory beyond tensors."""
        return self.peak if self.tensor_peak is None else self.tensor_peak


@dataclass(frozen=True)
class CollectiveBytes:
    """Per-step figures of each collective, one field per kind."""

    all_gather: int = 0
    reduce_scatter: int = 0
    all_reduce: int = 0
    all_to_all: int = 0
    send_recv: int = 0
    """Point-to-point sends (pipeline boundaries)."""

    @property
    def total(self) -> int:
        """Sum over the kinds."""
        return (self.all_gather + self.reduce_scatter + self.all_reduce + self.all_to_all
                + self.send_recv)


@dataclass(frozen=True)
class MemoryTerm:
    """One part of a rank's memory beyond its tensors, and where its size comes from."""

    name: str
    """``nccl_buffers``, ``workspace``, ``cuda_context`` or ``fragmentation``."""
    bytes: int
    """Its size on one rank."""
    source: str
    """Where the figure comes from (a library default, an environment variable, a rule)."""


@dataclass(frozen=True)
class PipelineStage:
    """One pipeline stage: its layers and its peak."""

    layers: tuple[str, ...]
    """Qualified names of the layer units it runs (the first stage also holds the
    embeddings, the last the head); with v stages per rank, all of the rank's."""
    peak_bytes: int
    """Peak bytes of tensors on the stage's rank, with the micro-batches the schedule keeps
    in flight there."""
    in_flight: int = 1
    """Micro-batches whose activations the stage holds at its peak; with v stages per rank,
    forward chunks (one micro-batch through one of the rank's stages, 1/v of its layers)."""
    activations: int = 0
    """Bytes of those activations (and of the stage outputs kept for their backward)."""
    sent_bytes: int = 0
    """Bytes the rank sends per step: activations forward, gradients back in training."""
    rank: int = 0
    """The pipeline rank (stage index when v is 1)."""


@dataclass(frozen=True)
class PipelineCost:
    """A pipeline schedule on a plan: stages, bubble and point-to-point traffic."""

    schedule: str
    """One of :data:`PP_SCHEDULES`."""
    microbatches: int
    """Micro-batches per step."""
    bubble_fraction: float
    """Share of the step each stage idles (GPipe and 1F1B: (p − 1)/(m + p − 1) of the
    step, i.e. (p − 1)/m of the useful time, Narayanan et al. 2021)."""
    stages: tuple[PipelineStage, ...]
    """One per stage, first to last."""
    send_recv_bytes: int = 0
    """Bytes the busiest rank sends per step (activations forward, gradients back)."""
    uneven: bool = False
    """True when the layers do not split evenly over the stages."""
    source: str = "analytic"
    """``torch.distributed`` where torch's schedule ran on a fake process group."""
    virtual_stages: int = 1
    """Stages per rank v (2 for the interleaved, zero-bubble and DualPipeV schedules)."""
    worst_stage: int = 0
    """The rank whose peak is the largest: the one ``per_device_bytes`` reports."""
    tied_parameters: tuple[str, ...] = ()
    """Parameters the first and the last stage both use (tied embeddings), held by both."""
    timeline: tuple[tuple[tuple[str, float], ...], ...] = ()
    """Each rank's step as (``forward`` | ``backward`` | ``idle``, duration) segments in units
    of one micro-batch's forward through one stage (a backward takes 2): the schedule as
    drawn; empty for the schedules that interleave stages."""


@dataclass(frozen=True)
class ExpertCost:
    """Routed experts under expert parallelism, on the busiest rank (rank 0)."""

    layers: int
    """Routed-expert layers the figures count: those of the pipeline stage ``stage``, every
    one without pipeline stages."""
    num_experts: int
    """Experts E of the largest layer."""
    top_k: int
    """Experts each token is dispatched to."""
    experts_per_rank: int
    """⌈E / ep⌉: experts rank 0 holds (torch's Shard(0) gives the first ranks one more
    when ep does not divide E)."""
    uneven: bool
    """True when ep does not divide E: the ranks hold different numbers of experts."""
    shard_group: int
    """Ranks the expert shards are FSDP-sharded over: fsdp / gcd(ep, fsdp)."""
    tokens_per_rank: int
    """Tokens a rank routes per layer: b · ⌈s / cp⌉ (b in decode)."""
    dispatched_rows: int
    """Token copies in a rank's dispatch buffer per layer: tokens · k dropless, or
    E · ⌈cf · tokens · k / E⌉ padded to capacity."""
    capacity_factor: float
    """1.0 is dropless; otherwise each expert's buffer holds cf · tokens · k / E rows."""
    params: int
    """Bytes of this rank's expert parameters (the layers of its pipeline stage: all of them
    without one)."""
    grads: int
    """Bytes of their gradients (0 outside training)."""
    optimizer_states: int
    """Bytes of their optimizer states (0 outside training)."""
    all_to_all_bytes: int
    """Bytes this rank sends per step in the dispatch and combine all-to-alls (and the
    exchange of per-expert token counts), every layer of its pipeline stage."""
    all_to_all_calls: int
    """All-to-all calls per step for the experts."""
    stage: int | None = None
    """The pipeline rank whose layers ``layers``, the states and the all-to-alls count: the
    one ``per_device_bytes`` describes; None without pipeline stages (every layer)."""


@dataclass(frozen=True)
class ContextCost:
    """Context parallelism (ring attention) on one rank."""

    cp: int
    """Ranks the sequence is split over."""
    tokens_per_rank: int
    """⌈s / cp⌉ positions of each sequence on this rank."""
    kv_exchange_bytes: int
    """Bytes this rank sends per step passing K/V (and in the backward their gradients)
    round the ring, every attention layer."""
    kv_exchange_calls: int
    """Collective calls of that exchange per step."""
    load_balanced: bool
    """True when every block is causal: torch's head-tail load balancing applies."""
    chunk_scores_bytes: int
    """b · h · (s/cp)² · bytes one ring step of a score-materialising (math) kernel holds;
    0 where every block runs a fused (flash/efficient) kernel per chunk."""
    kv_cache_split: bool
    """False: torch's ``context_parallel`` splits a training step; a decode step's KV cache
    is not split over cp."""


@dataclass(frozen=True)
class GroupTime:
    """One communication group's traffic in a step: its link, time and overlap."""

    group: str
    """``tp`` (TP, SP), ``data`` (FSDP, HSDP, DDP), ``pp`` (stage sends), ``ep`` (the
    experts' all-to-alls) or ``cp`` (the context-parallel ring)."""
    link: str
    """``nvlink`` inside a node (PCIe where a GPU has no NVLink), ``infiniband`` across."""
    bytes: int
    """Bytes this rank sends in the group per step."""
    seconds: float
    """Time to send them on the link at its per-direction bandwidth."""
    overlapped: bool
    """True where the traffic runs beside the compute (FSDP's prefetched gathers and
    bucketed reductions, the ring passing K/V while a chunk computes); False where the
    next op waits for it (TP's all-reduces, stage sends, all-to-alls)."""
    exposed_s: float
    """The part of ``seconds`` the step waits for: all of it when not overlapped, what
    exceeds the compute when overlapped."""


@dataclass(frozen=True)
class StepTime:
    """A step's time on one rank: the compute's, and each group's traffic."""

    compute_s: float
    """The rank's share of the FLOPs at the target's peak (or the decode step's bytes at
    its bandwidth, if slower), stretched by the pipeline bubble."""
    groups: tuple[GroupTime, ...]
    """One per group that sends anything."""

    @property
    def total(self) -> float:
        """Compute plus every group's exposed time: the step time."""
        return self.compute_s + sum(g.exposed_s for g in self.groups)


@dataclass(frozen=True)
class ParallelCost:
    """One phase (training or decode step) under one plan, per device."""

    plan: ParallelPlan
    """The plan costed."""
    phase: str
    """``train`` or ``decode``."""
    per_device_bytes: DeviceBytes
    """What each rank holds."""
    comm_bytes_per_step: CollectiveBytes
    """Bytes each rank sends per step, by collective (ring algorithms: an all-reduce of S
    bytes sends 2·(g−1)/g·S, an all-gather or reduce-scatter of S gathered bytes
    (g−1)/g·S, over the g ranks of its group)."""
    comm_calls_per_step: CollectiveBytes
    """Collective calls per step, by kind."""
    step_time_s: float
    """Compute time on the target plus the communication not hidden behind it, seconds:
    a lower bound."""
    fits: bool
    """True when ``per_device_bytes.peak`` fits the target's memory."""
    max_batch_size: int | None
    """Largest micro-batch per data-parallel replica that fits (0 when nothing does);
    None when no held bytes grow with the batch."""
    source: str
    """``torch.distributed`` or ``analytic`` (see :data:`SOURCES`)."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """How the figures were obtained, and why the analytic model was used where it was."""
    analytic_activations: int | None = None
    """The analytic model's activations per rank (Korthikanti et al.'s split) beside the
    figure torch measured, when ``source`` is ``torch.distributed``; None otherwise."""
    memory_terms: tuple[MemoryTerm, ...] = ()
    """The memory beyond tensors in ``per_device_bytes``, each with its source."""
    pipeline: PipelineCost | None = None
    """The pipeline schedule's stages and bubble; None when pp is 1."""
    experts: ExpertCost | None = None
    """Routed experts under ``ep``; None without routed experts or with ep = 1."""
    context: ContextCost | None = None
    """Ring attention under ``cp``; None when cp is 1."""
    step_parts: StepTime | None = None
    """How ``step_time_s`` is made: the compute and each group's link, time and overlap."""
    mfu: float | None = None
    """Model FLOPs utilisation at ``step_time_s``: the step's model FLOPs (no recompute)
    per GPU per second over the target's dense peak; None where no FLOPs are known."""


def parallel_to_dict(cost: ParallelCost) -> dict[str, Any]:
    """The JSON object of one phase's ``parallel`` field (binding names, additive extras)."""
    plan = asdict(cost.plan)
    plan["world_size"] = cost.plan.world_size
    return {
        "plan": plan,
        "per_device_bytes": {**asdict(cost.per_device_bytes),
                             "tensor_peak": cost.per_device_bytes.tensors},
        "comm_bytes_per_step": asdict(cost.comm_bytes_per_step),
        "comm_calls_per_step": asdict(cost.comm_calls_per_step),
        "step_time_s": cost.step_time_s,
        "fits": cost.fits,
        "max_batch_size": cost.max_batch_size,
        "source": cost.source,
        "notes": list(cost.notes),
        "analytic_activations": cost.analytic_activations,
        "memory_terms": [asdict(t) for t in cost.memory_terms],
        "pipeline": None if cost.pipeline is None else asdict(cost.pipeline),
        "mfu": cost.mfu,
        "step_parts": None if cost.step_parts is None else {
            "compute_s": cost.step_parts.compute_s,
            "groups": [asdict(g) for g in cost.step_parts.groups]},
        "experts": None if cost.experts is None else asdict(cost.experts),
        "context": None if cost.context is None else asdict(cost.context),
    }

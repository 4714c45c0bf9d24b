"""The closed-form per-device model of a plan: sharded states, split activations, KV cache
per rank, gather buffers, collectives and step time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mhaudit.cost.devices import GpuProfile
from mhaudit.cost.stepspec import TRAIN, StepSpec
from mhaudit.data import AttentionBlock
from mhaudit.data.parallel import DeviceBytes, GroupTime, ParallelPlan, StepTime
from mhaudit.parallel.collectives import StepComm
from mhaudit.parallel.inventory import UnitShard
from mhaudit.parallel.shard import ceil_div, kv_heads_per_rank

_PAPER_BYTES = 2
"""Korthikanti et al. count activations at 16 bits."""


RECOMPUTE_MODES = ("none", "selective", "layers", "full")
"""Activation checkpointing the analytic model costs: ``none``; ``selective``, Korthikanti
et al.'s recomputation of the attention core alone; ``layers`` or ``full`` (one mode, two
names), each repeated layer recomputed from its input, the paper's full recomputation."""


def korthikanti_bytes(block: AttentionBlock, batch: int, element_bytes: int,
                      cp: int = 1, checkpointing: str = "none") -> tuple[int, int]:
    """(split part, unsplit part) of one layer's saved activations without SP at degree 1:
    s·b·h·(24 + 5·a·s/h) split by TP and s·b·h·10 not (norm inputs, dropout masks, the
    residual), at 16 bits per the paper and scaled to ``element_bytes``; the 5·a·s/h score
    term only where the layout materialises scores. Ignores the embedding and head.
    Context parallelism (``cp`` > 1) keeps ⌈s/cp⌉ positions per rank and no scores: the
    ring runs a fused kernel per chunk, saving its output and log-sum-exp. ``selective``
    drops the score term (s·b·h·34 in all); ``layers``/``full`` keep only the layer's
    input, 2·s·b·h, whole on every TP rank (not counting the one layer a recomputing
    backward holds at a time)."""
    lay = block.layout
    sbh = ceil_div(lay.seq_len_q, cp) * batch * lay.d_model
    scale = element_bytes / _PAPER_BYTES
    if checkpointing in ("layers", "full"):
        return 0, int(2 * sbh * scale)
    scores = 5 * lay.num_heads * lay.seq_len_q * lay.seq_len_kv * batch
    keeps = block.memory.scores_bytes is not None and cp == 1 and checkpointing != "selective"
    split = int((24 * sbh + (scores if keeps else 0)) * scale)
    return split, int(10 * sbh * scale)


def activation_bytes(blocks: Sequence[AttentionBlock], spec: StepSpec,
                     plan: ParallelPlan, checkpointing: str = "none") -> int:
    """Saved activations per rank: every stored tensor split by t with SP (the paper's
    s·b·h·(34 + 5·a·s/h)/t), only the TP part without it (s·b·h·(10 + 24/t + 5·a·s/(h·t))),
    under ``checkpointing`` (:func:`korthikanti_bytes`: 34·s·b·h/t selective with SP).
    A measured single-device figure, taken under the same checkpointing, is split in the
    same proportion; without one the paper's count is used. Pipeline stages under 1F1B
    keep about the whole model's."""
    if spec.phase != TRAIN:
        return 0
    parts = [korthikanti_bytes(b, spec.batch, spec.compute_bytes, 1, checkpointing)
             for b in blocks]
    paper = sum(p[0] + p[1] for p in parts)
    if plan.cp > 1:  # the sequence split over the context ranks (ring attention)
        parts = [korthikanti_bytes(b, spec.batch, spec.compute_bytes, plan.cp, checkpointing)
                 for b in blocks]
    split = sum(p[0] for p in parts)
    whole = sum(p[1] for p in parts)
    t = plan.tp
    per_rank = ceil_div(paper, t) if plan.sp else ceil_div(split, t) + whole
    if spec.activation_bytes is None:
        return per_rank
    return per_rank * spec.activation_bytes // paper if paper else ceil_div(
        spec.activation_bytes, (t if plan.sp else 1) * plan.cp)


def kv_cache_bytes(blocks: Sequence[AttentionBlock], spec: StepSpec, plan: ParallelPlan) -> int:
    """KV cache per rank at ``spec.context``: each block's K/V heads split over t, one whole
    head per rank (replicated) once t > h_kv; a latent cache is replicated on every rank."""
    total = 0
    for block in blocks:
        lay = block.layout
        mem = block.memory
        window = lay.window or spec.context
        full = mem.kv_cache_bytes_per_token * spec.batch * min(spec.context, window)
        full += mem.kv_cache_bytes_static
        if lay.latent_width is None and lay.num_kv_heads:
            full = full // lay.num_kv_heads * kv_heads_per_rank(lay.num_kv_heads, plan.tp)
        total += full
    return total if spec.phase != TRAIN else 0


@dataclass(frozen=True)
class StateBytes:
    """Parameter, gradient, optimizer and buffer bytes per rank."""

    params: int
    grads: int
    optimizer_states: int
    temporaries: int


def state_bytes(shards: Sequence[UnitShard], spec: StepSpec, plan: ParallelPlan) -> StateBytes:
    """Sharded states per rank and the FSDP gather buffers (each replica of ``dp`` holds its
    FSDP group's shards, so replicas change nothing here). Layer units split over pipeline
    stages; the root unit (embeddings, final norm, head) is counted whole (an upper bound
    for any stage). Buffers, as FSDP2 holds them: the root's parameters gathered for the
    whole step (the root is not resharded after the forward), and the largest layer twice,
    the running one and the one prefetched; unsharded gradients, freed layer by layer as
    they are reduce-scattered, are not counted."""
    layers = [s for s in shards if s.unit]
    root = [s for s in shards if not s.unit]
    elems = sum(s.shard_elements for s in root) + ceil_div(
        sum(s.shard_elements for s in layers), plan.pp)
    tensors = sum(s.tensors for s in root) + ceil_div(sum(s.tensors for s in layers), plan.pp)
    train = spec.phase == TRAIN
    params = elems * spec.param_bytes
    grads = params if train else 0
    states = params * spec.states_per_param + tensors * spec.step_counter_bytes
    temps = 0
    if plan.fsdp > 1:
        biggest = max((s.gathered_elements for s in layers), default=0)
        gathered = sum(s.gathered_elements for s in root) + 2 * biggest
        temps = gathered * spec.compute_bytes
    return StateBytes(params, grads, states, temps)


def device_bytes(states: StateBytes, activations: int, kv_cache: int) -> DeviceBytes:
    """The per-rank breakdown; the peak is the sum of the parts (all live at the end of
    the backward). The optimizer update's own temporaries (foreach intermediates) are not
    counted: a lower bound where the update, not the backward, peaks."""
    peak = (states.params + states.grads + states.optimizer_states + activations + kv_cache
            + states.temporaries)
    return DeviceBytes(states.params, states.grads, states.optimizer_states, activations,
                       kv_cache, states.temporaries, peak, tensor_peak=peak)


def step_parts(spec: StepSpec, comm: StepComm, held: DeviceBytes, plan: ParallelPlan,
               profile: GpuProfile, *, bubble: float = 0.0,
               share: float | None = None) -> StepTime:
    """Roofline time of the rank's share of the work (FLOPs / (t·cp) times the pipeline
    rank's share of the layers, 1/pp when even, at peak, or in decode the bytes read at
    memory bandwidth if slower: the generating part's share of the weights, and the cache),
    stretched by the pipeline bubble (÷ (1 − bubble)), and each group's traffic on its
    link: TP traffic inside the TP group (NVLink), exposed; data-parallel traffic (FSDP,
    replicas), over InfiniBand once tp · fsdp · dp exceeds a node, overlapped with the
    compute; pipeline sends and the experts' all-to-alls (which the next layer waits for),
    exposed; the context-parallel ring, overlapped with attention."""
    ring = plan.cp if spec.phase == TRAIN else 1  # context ranks split a training sequence
    flops = spec.flops / (plan.tp * ring) * (share if share is not None else 1 / plan.pp)
    compute = flops / (profile.peak_tflops_bf16 * 1e12)
    if spec.phase != TRAIN:
        read = held.params * plan.fsdp * spec.read_share + held.kv_cache
        compute = max(compute, read / (profile.bandwidth_gb_s * 1e9))
    compute /= 1.0 - bubble
    inside = "nvlink" if profile.nvlink_gb_s else "pcie"
    data_local = plan.tp * plan.fsdp * plan.dp <= profile.gpus_per_node
    world_local = plan.world_size <= profile.gpus_per_node
    groups = [("tp", comm.tp_bytes, True, False), ("data", comm.fsdp_bytes, data_local, True),
              ("pp", comm.pp_bytes, world_local, False), ("ep", comm.ep_bytes, world_local, False),
              ("cp", comm.cp_bytes, world_local, True)]
    out = []
    for name, sent, local, overlapped in groups:
        if not sent:
            continue
        rate = (profile.intra_node_gb_s if local else profile.infiniband_gb_s) * 1e9
        seconds = sent / rate
        out.append(GroupTime(name, inside if local else "infiniband", sent, seconds,
                             overlapped, max(0.0, seconds - compute) if overlapped else seconds))
    return StepTime(compute, tuple(out))


def step_time_s(spec: StepSpec, comm: StepComm, held: DeviceBytes, plan: ParallelPlan,
                profile: GpuProfile, *, bubble: float = 0.0,
                share: float | None = None) -> float:
    """The step time of :func:`step_parts`: compute plus every group's exposed traffic."""
    return step_parts(spec, comm, held, plan, profile, bubble=bubble, share=share).total


def max_batch_size(held: DeviceBytes, batch: int, profile: GpuProfile) -> int | None:
    """Largest micro-batch whose activations and KV cache, which grow linearly with it, fit
    beside the batch-free states, buffers and memory beyond tensors (the fragmentation
    margin grows with the tensors); None when nothing grows with the batch."""
    per_sample = (held.activations + held.kv_cache) / batch
    if per_sample <= 0:
        return None
    tensors = held.tensors
    share = held.fragmentation / tensors if tensors else 0.0
    fixed_terms = held.nccl_buffers + held.workspace + held.cuda_context
    fixed = tensors - held.activations - held.kv_cache
    room = (profile.memory_bytes - fixed_terms) / (1 + share) - fixed
    return max(0, int(room // per_sample))

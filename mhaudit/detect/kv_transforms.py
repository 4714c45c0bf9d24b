"""Maps on the way between a block's projections and its core: K/V transforms over
positions, and per-head maps absorbed into the query path and the context.

The projection maps the model's features to heads; a map after it that mixes positions
(a compressor of each block of ``l`` keys, ``Linear(l·d_k, d_k)``, as in compressed
attention; Linformer's learned n→k map) is a transform of K or V, found by
:func:`~mhaudit.detect.sources.along.position_map` on the walk back from the core. Here:

- its parameters belong to the block (``Layout.kv_transform_params``, in the total), a map
  several blocks read counted in the first one;
- its FLOPs are K's or V's (``Layout.kv_transform_flops``);
- K and V are projected over the positions before the map: the projection's own rows
  (``Layout.kv_rows``), not b·n_kv.

A per-head map (:func:`~mhaudit.detect.sources.projections.per_head`: one matrix per
head of a tensor already split into heads) between Q's projection and Q, or between the
context and O, is latent attention's absorbed W_UK or W_UV: its parameters are the block's
too (``Layout.absorbed_params``), its FLOPs Q's or O's (``Layout.absorbed_flops``).

FLOPs are 2·numel(out)·(input elements each output element reads) for each map's matmul.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from torch import fx

from mhaudit.data import Layout
from mhaudit.detect.cores import Core
from mhaudit.detect.sources.projections import ProjectionOp, per_head
from mhaudit.detect.sources.walker import Source
from mhaudit.trace.einsum import EinsumError, expand_einsum
from mhaudit.trace.graphs import numel, shape, tensor_inputs
from mhaudit.trace.ops import op_name
from mhaudit.trace.walks import Walk

_MAX_VISITS = 400

Finder = Callable[[fx.Node], ProjectionOp | None]
"""The walker's cached projection at a node."""
Read = tuple[Core, dict[str, tuple[Source, ...]], ProjectionOp | None]
"""One core of a block, its roles' sources and its output projection."""


def between(operand: fx.Node, root: fx.Node, projection: Finder) -> list[ProjectionOp]:
    """The projections on the way from ``root`` (a projection's output, a context) to
    ``operand``."""
    below: set[fx.Node] = set()
    walk = Walk([root], _MAX_VISITS)
    for node in walk:
        below.add(node)
        walk.push(node.users)
    found: dict[str, ProjectionOp] = {}
    back = Walk([operand], _MAX_VISITS)
    for node in back:
        if node is root or node not in below:
            continue
        proj = projection(node)
        if proj is not None and proj.node is not root:
            found.setdefault(proj.matmul.name, proj)
        back.push(tensor_inputs(node))
    return list(found.values())


def _flops(proj: ProjectionOp) -> int:
    """2·numel(out)·(input elements each output element reads): the letters an einsum
    sums over (a per-head map reads d of its h·d weights per output), else the weight
    elements per output feature."""
    per_output = proj.weight_numel // proj.out_width if proj.out_width else 0
    operands = proj.matmul.args[1] if op_name(proj.matmul) == "einsum" else None
    if isinstance(operands, (list, tuple)):
        try:
            inputs, output, sizes = expand_einsum(str(proj.matmul.args[0]),
                                                  [shape(o) for o in operands])
            per_output = math.prod(sizes[c] for c in set("".join(inputs)) - set(output))
        except EinsumError:
            pass
    return 2 * numel(proj.matmul) * per_output


def _projections(sources: tuple[Source, ...]) -> set[fx.Node]:
    """The matmuls of the sources' projections and of the factors feeding them: a part
    joined beside another (DeepSeek's K = [k_nope | k_rope], both from the latent) passes
    through the other's projection on a walk back, and it is no map of the first."""
    found: set[fx.Node] = set()
    todo = list(sources)
    while todo:
        source = todo.pop()
        if source.projection is not None:
            found.add(source.projection.matmul)
        todo.extend(source.upstream)
    return found


def _maps(own: list[Read], projection: Finder) -> tuple[dict[str, list[ProjectionOp]], int]:
    """The maps K and V pass through (each matmul once, for the first role that reads it)
    and the rows of the projections below them (0 when there are none)."""
    maps: dict[str, list[ProjectionOp]] = {"k": [], "v": []}
    counted: set[fx.Node] = set()
    rows = 0
    for core, sources, _ in own:
        for role, operand in (("k", core.k), ("v", core.v)):
            own_projections = _projections(sources[role])  # another part's own projection
            for source in sources[role]:
                found = [m for m in between(operand, source.root, projection)
                         if m.matmul not in counted and m.matmul not in own_projections
                         ] if source.projection else []
                counted.update(m.matmul for m in found)
                maps[role].extend(found)
                if found and source.projection is not None:
                    rows = max(rows, source.projection.rows)
    return maps, rows


def _absorbed(own: list[Read], projection: Finder) -> tuple[list[ProjectionOp], ...]:
    """The per-head maps between Q's projections and Q, and between the context and O."""
    q_maps: dict[fx.Node, ProjectionOp] = {}
    o_maps: dict[fx.Node, ProjectionOp] = {}
    for core, sources, o in own:
        for source in sources["q"]:
            if source.projection is not None:
                q_maps.update((m.matmul, m) for m in between(core.q, source.root, projection)
                              if per_head(m))
        if o is not None:
            o_maps.update((m.matmul, m) for m in between(o.activation, core.output, projection)
                          if per_head(m))
    return list(q_maps.values()), list(o_maps.values())


def with_kv_transforms(layouts: list[Layout], reads: list[list[Read]], projection: Finder
                       ) -> list[Layout]:
    """Each layout whose K or V passes a map over positions, with its parameters, FLOPs
    and the rows K and V are projected over, and each whose query path or context passes
    per-head maps (absorbed latent attention) with theirs (module docstring)."""
    seen: set[str] = set()
    result = []
    for layout, own in zip(layouts, reads, strict=True):
        q_maps, o_maps = _absorbed(own, projection)
        fresh_maps = {m.weight + str(m.matmul): m for m in q_maps + o_maps}
        if fresh_maps:
            layout = replace(
                layout, absorbed_params=sum(m.weight_numel for m in fresh_maps.values()),
                absorbed_flops=(sum(map(_flops, q_maps)), sum(map(_flops, o_maps))))
        maps, rows = _maps(own, projection)
        fresh = {m.weight: m for m in maps["k"] + maps["v"] if m.weight not in seen}
        seen.update(fresh)
        if rows:
            layout = replace(
                layout, kv_rows=rows,
                kv_transform_params=sum(m.weight_numel + m.bias_numel for m in fresh.values()),
                kv_transform_flops=(sum(map(_flops, maps["k"])), sum(map(_flops, maps["v"]))))
        result.append(layout)
    return result

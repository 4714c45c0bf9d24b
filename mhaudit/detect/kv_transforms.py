"""K/V transforms: learned maps over positions between K's or V's projection and the core.

The projection maps the model's features to heads; a map after it that mixes positions
(a compressor of each block of ``l`` keys, ``Linear(l·d_k, d_k)``, as in compressed
attention; Linformer's learned n→k map) is a transform of K or V, found by
:func:`~mhaudit.detect.sources.along.position_map` on the walk back from the core. Here:

- its parameters belong to the block (``Layout.kv_transform_params``, in the total), a map
  several blocks read counted in the first one;
- its FLOPs are K's or V's: 2·numel(out)·(weight elements per output feature) for each
  matmul with the map's weight (``Layout.kv_transform_flops``);
- K and V are projected over the positions before the map: the projection's own rows
  (``Layout.kv_rows``), not b·n_kv.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from torch import fx

from mhaudit.data import Layout
from mhaudit.detect.cores import Core
from mhaudit.detect.sources.projections import ProjectionOp
from mhaudit.detect.sources.walker import Source
from mhaudit.trace.graphs import numel, tensor_inputs
from mhaudit.trace.walks import Walk

_MAX_VISITS = 400

Finder = Callable[[fx.Node], ProjectionOp | None]
"""The walker's cached projection at a node."""
Read = tuple[Core, dict[str, tuple[Source, ...]]]
"""One core of a block and its roles' sources."""


def between(operand: fx.Node, source: Source, projection: Finder) -> list[ProjectionOp]:
    """The projections on the way from ``source``'s projection output to ``operand``."""
    root = source.root
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
    """2·numel(out)·(weight elements each output element reads)."""
    per_output = proj.weight_numel // proj.out_width if proj.out_width else 0
    return 2 * numel(proj.matmul) * per_output


def _maps(own: list[Read], projection: Finder) -> tuple[dict[str, list[ProjectionOp]], int]:
    """The maps K and V pass through (each matmul once, for the first role that reads it)
    and the rows of the projections below them (0 when there are none)."""
    maps: dict[str, list[ProjectionOp]] = {"k": [], "v": []}
    counted: set[fx.Node] = set()
    rows = 0
    for core, sources in own:
        for role, operand in (("k", core.k), ("v", core.v)):
            for source in sources[role]:
                found = [m for m in between(operand, source, projection)
                         if m.matmul not in counted] if source.projection else []
                counted.update(m.matmul for m in found)
                maps[role].extend(found)
                if found and source.projection is not None:
                    rows = max(rows, source.projection.rows)
    return maps, rows


def with_kv_transforms(layouts: list[Layout], reads: list[list[Read]], projection: Finder
                       ) -> list[Layout]:
    """Each layout whose K or V passes a map over positions, with its parameters, FLOPs
    and the rows K and V are projected over (module docstring)."""
    seen: set[str] = set()
    result = []
    for layout, own in zip(layouts, reads, strict=True):
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

"""Score biases: learned parameters that reach a core's logits outside W_Q, W_K, W_V and W_O."""

from __future__ import annotations

from collections.abc import Iterable

from torch import fx

from mhaudit.detect.sources.projections import ProjectionOp, as_projection
from mhaudit.trace.graphs import param_root, tensor_inputs, val
from mhaudit.trace.ops import FRESH_OPS, NORM_OPS, op_name

_MAX_VISITS = 256
"""Nodes one walk back from a logit term visits at most."""


def position_vector(add: fx.Node, before: fx.Node, params: dict[str, str]) -> str | None:
    """The parameter ``add`` adds to ``before`` when it is a score bias, not a role's bias.

    A bias of Q (or K) reaches every reader of the projection. A vector added to one
    reader only, while the projection is read elsewhere too (Transformer-XL's content
    bias ``q + r_w_bias`` beside its position bias ``q + r_r_bias``), biases one logit
    term: it belongs to the scores.
    """
    if op_name(add) != "add" or before not in add.args:
        return None
    readers = [u for u in before.users if val(u) is not None]
    if len(readers) < 2:
        return None
    others = [a for a in add.args if isinstance(a, fx.Node) and a is not before]
    return next((p for p in (param_root(o, params) for o in others) if p), None)


class ScoreBiasWalk:
    """Finds the score-bias parameters of one block's cores."""

    def __init__(self, params: dict[str, str], cache: dict[fx.Node, ProjectionOp | None],
                 owned: frozenset[str], inputs: frozenset[fx.Node]) -> None:
        self.params = params
        self.cache = cache
        self.owned = owned
        """Parameters counted in the block's Q, K, V and O (weights and biases)."""
        self.inputs = inputs
        """Activations the block's Q, K and V projections read (the walk stops there)."""

    def names(self, logits: Iterable[fx.Node], operands: Iterable[fx.Node]) -> set[str]:
        """Parameters of the terms added to the logits (relative-position tables and
        embeddings, position projections, bias vectors) and vectors added to one reader of
        Q or K only (content biases), none of them counted in Q, K, V or O."""
        found: set[str] = set()
        for term in logits:
            found |= self._term(term)
        for operand in operands:
            found |= self._operand(operand)
        return found - self.owned

    def _projection(self, node: fx.Node) -> ProjectionOp | None:
        if node not in self.cache:
            self.cache[node] = as_projection(node, self.params)
        return self.cache[node]

    def _term(self, start: fx.Node) -> set[str]:
        """Every parameter a logit term is computed from, up to the block's own inputs.

        A projection of another weight (DeBERTa's position key projection, ProphetNet's
        relative-position projection of the hidden states) is a score-bias parameter
        itself, and the block's own weights applied to a position input (a shared key
        projection) are not; either way the walk goes on to that input. A norm is walked
        to its own parameters only (the norm of a relative embedding table, never the
        residual stream behind a norm).
        """
        found: set[str] = set()
        seen: set[fx.Node] = set()
        frontier = [start]
        while frontier and len(seen) < _MAX_VISITS:
            node = frontier.pop()
            if node in seen or node in self.inputs:
                continue
            seen.add(node)
            root = param_root(node, self.params)
            if root is not None:
                found.add(root)
                continue
            proj = self._projection(node)
            if proj is not None:
                found.update(p for p in (proj.weight, proj.bias) if p)
                frontier.append(proj.activation)
                continue
            if node.op != "call_function" or op_name(node) in FRESH_OPS:
                continue
            inputs = list(tensor_inputs(node))
            if op_name(node) in NORM_OPS:
                inputs = [i for i in inputs if param_root(i, self.params) is not None]
            frontier.extend(inputs)
        return found

    def _operand(self, operand: fx.Node) -> set[str]:
        """Vectors added to Q or K on their way from the projection to the scores that
        only this read of the projection sees."""
        found: set[str] = set()
        seen: set[fx.Node] = set()
        frontier = [operand]
        while frontier and len(seen) < _MAX_VISITS:
            node = frontier.pop()
            if node in seen or node.op != "call_function" or self._projection(node):
                continue
            seen.add(node)
            inputs = [i for i in tensor_inputs(node) if param_root(i, self.params) is None]
            for before in inputs:
                vector = position_vector(node, before, self.params)
                if vector is not None:
                    found.add(vector)
            frontier.extend(inputs)
        return found


def score_bias_names(
    cores: Iterable[tuple[fx.Node, fx.Node, tuple[fx.Node, ...]]],
    projections: Iterable[ProjectionOp], params: dict[str, str],
    cache: dict[fx.Node, ProjectionOp | None],
) -> set[str]:
    """Score-bias parameters of one block: ``cores`` gives each core's Q and K operands
    and the terms combined with its logits; ``projections`` are the block's own."""
    ops = list(projections)
    owned = frozenset(p for op in ops for p in (op.weight, op.bias) if p)
    walk = ScoreBiasWalk(params, cache, owned, frozenset(op.activation for op in ops))
    found: set[str] = set()
    for q, k, logits in cores:
        found |= walk.names(logits, (q, k))
    return found

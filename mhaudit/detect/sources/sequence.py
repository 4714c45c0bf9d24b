"""Whether K reads the query's own sequence: self-attention, or cross-attention over another."""

from __future__ import annotations

from torch import fx

from mhaudit.detect.operands import is_activation_matmul
from mhaudit.detect.patterns.reduction import reduced_copy
from mhaudit.detect.patterns.windows import same_sequence, window_root
from mhaudit.detect.sources.mixes import sibling_mixes
from mhaudit.detect.sources.tokens import same_tokens_source
from mhaudit.trace.graphs import param_root, shape
from mhaudit.trace.ops import CORE_OPS, EMBEDDING_OPS, PROJECTION_OPS, TOKEN_REDUCING_OPS, op_name
from mhaudit.trace.walks import Walk

_LIMIT = 96
_MAX_MAPS = 2
"""Feature maps (linears, convolutions) a derived copy may pass: a reduction of the tokens
(PVT's strided conv, a pool then a 1×1 conv), not another tower."""
_MIXING_OPS = CORE_OPS | EMBEDDING_OPS
_MAP_OPS = PROJECTION_OPS | TOKEN_REDUCING_OPS


def one_sequence(q_in: fx.Node, k_in: fx.Node, params: dict[str, str],
                 user_inputs: frozenset[str]) -> bool:
    """Q and K read one sequence's tokens (self-attention), directly or through copies.

    A query pooled, strided or sliced along the tokens of K's input (Funnel's pooled
    queries), K from a strided reduction of Q's input, sibling mixes of one tensor's
    tokens, or K derived from Q's input by ops that bring in no other input (a
    convolution, an unfold of overlapping windows, a cache joined along the sequence).
    """
    return (q_in is k_in or same_tokens_source(q_in, k_in) or same_sequence(q_in, k_in)
            or reduced_copy(k_in, q_in, params) or sibling_mixes(q_in, k_in, params)
            or derived_copy(k_in, q_in, params, user_inputs))


def derived_copy(node: fx.Node, source: fx.Node, params: dict[str, str],
                 user_inputs: frozenset[str]) -> bool:
    """True when ``node`` derives from ``source`` (or the tensor it is a window of) and
    parameters alone: no other model input, no attention core, no embedding lookup, at
    most two feature maps on the way. A join along the positions (a cache before the new
    keys) counts when one of its parts derives from ``source`` and the others are its past
    (:func:`_joined_copy`). Queries that are no data
    (a resampler's learned latents, joined after the tokens it reads) read another input."""
    if not _from_data(source, user_inputs):
        return False
    bases = dict.fromkeys((source, window_root(source)))
    return any(_derives(node, base, params, user_inputs, _LIMIT) for base in bases)


def _from_data(node: fx.Node, user_inputs: frozenset[str]) -> bool:
    """``node`` reads a model input, within the first nodes of a walk back."""
    walk = Walk([node], _LIMIT * 4)
    for current in walk:
        if current.op == "placeholder" and current.name in user_inputs:
            return True
        walk.push(current.all_input_nodes)
    return walk.cut


def _derives(node: fx.Node, source: fx.Node, params: dict[str, str],
             user_inputs: frozenset[str], limit: int) -> bool:
    walk, reached, maps = Walk([node], limit), False, 0
    for current in walk:
        if current is source or param_root(current, params) is not None:
            reached = reached or current is source
            continue
        if current.op == "placeholder" and current.name in user_inputs:
            return False
        if current.op != "call_function":
            continue
        name = op_name(current)
        if name in _MIXING_OPS or is_activation_matmul(current, params):
            return False
        parts = _position_parts(current)
        if parts:
            if not _joined_copy(parts, source, params, user_inputs, limit // 2):
                return False
            reached = True
            continue
        maps += name in _MAP_OPS and any(param_root(i, params) for i in current.all_input_nodes)
        if maps > _MAX_MAPS:
            return False
        walk.push(current.all_input_nodes)
    return reached and not walk.cut


def _joined_copy(parts: list[fx.Node], source: fx.Node, params: dict[str, str],
                 user_inputs: frozenset[str], limit: int) -> bool:
    """A join along the positions is the query's sequence when a part derives from
    ``source`` and every other part is that sequence's past: read through the same weights
    as the new part (a cache of inputs) or through none (a cache of projected keys). A part
    projected by weights of its own is another sequence's (joint attention over added
    context keys), and the join is then cross-attention."""
    own = [p for p in parts if _derives(p, source, params, user_inputs, limit)]
    if not own:
        return False
    weights = set().union(*(_weights(p, params, limit) for p in own))
    return all(_weights(p, params, limit) <= weights for p in parts if p not in own)


def _weights(node: fx.Node, params: dict[str, str], limit: int) -> set[str]:
    """The parameters a short walk back from ``node`` reads."""
    found: set[str] = set()
    walk = Walk([node], limit)
    for current in walk:
        root = param_root(current, params)
        if root is not None:
            found.add(root)
            continue
        walk.push(current.all_input_nodes)
    return found


def _position_parts(node: fx.Node) -> list[fx.Node]:
    """The parts a ``cat`` joins along an axis other than the features (a cache and the
    new positions); empty for any other op."""
    if op_name(node) != "cat" or not node.args or not isinstance(node.args[0], (list, tuple)):
        return []
    rank = len(shape(node))
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    if not rank or not isinstance(dim, int) or dim % rank == rank - 1:
        return []
    return [p for p in node.args[0] if isinstance(p, fx.Node)]

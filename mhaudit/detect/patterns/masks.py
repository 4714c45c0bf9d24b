"""Read attention masks from the graph: causal or not, where the diagonal sits, the window.

A mask built from position indices (``arange``) is read by its index arithmetic: each
value is an affine form in the query index i and the key index j, each comparison a
linear constraint, ``&`` a conjunction. ``(i - j >= 0) & (i - j < w)`` keeps
j ≤ i (causal, top-left) and j > i − w (a window of w keys); ``kv > q − w`` and
``kv ≤ q`` as HF builds them read the same. Whether an ``arange`` indexes queries or
keys is read from the axis it is broadcast along (−2 queries, −1 keys). Positions read
through an index (``position_ids[b, q_idx]``, as HF masks do without a cache) are the
position tensor's form at the index's form. A conjunct that is not index arithmetic
(padding, packed-sequence boundaries) only removes keys: the rest still bounds what is
kept, so the reading stays an upper bound of every query's keys. A mask held in a buffer
is read from the buffer's value (:mod:`~mhaudit.detect.patterns.mask_values`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import fx

from mhaudit.detect.patterns.mask_values import (
    Known,
    Unknown,
    Values,
    band,
    from_arange,
    is_blocking,
    kept,
    negated,
)
from mhaudit.trace.graphs import arg, shape
from mhaudit.trace.ops import (
    AND_OPS,
    CAUSAL_MASK_OPS,
    COMPARE_OPS,
    MASK_PASS_OPS,
    NOT_OPS,
    ONES_OPS,
    SDPA_VARIANTS,
    TRIANGLE_OPS,
    op_name,
)
from mhaudit.trace.walks import Walk

_WINDOW_KWARGS = ("window_size", "window_size_left", "sliding_window")
_MAX_NODES = 96


@dataclass(frozen=True)
class MaskReading:
    """What a mask keeps, relative to the diagonal: key j is kept for query i when
    i + offset − window < j ≤ i + offset."""

    causal: bool = False
    """True when every query sees no key past i + offset."""
    offset: int | None = None
    """Keys past its own index a query may see (0 top-left); None when not causal."""
    window: int | None = None
    """Keys each query sees at most; None when unbounded."""
    unknown: str | None = None
    """Why the mask could not be read (a buffer whose value is not known); None when read."""

    def sees_ahead(self, n_q: int, n_kv: int) -> bool:
        """Some query sees keys past its own position: the bound lies beyond the diagonal
        that meets the last query with the last key (i + n_kv − n_q), as a band that keeps
        both sides does (``triu(-w).tril(w)``: w keys either side)."""
        return self.offset is not None and self.offset > max(0, n_kv - n_q)

    def alignment(self, n_q: int, n_kv: int) -> str:
        """``bottom-right`` when the diagonal ends at the last key, else ``top-left``."""
        if self.offset is not None and self.offset and self.offset == n_kv - n_q:
            return "bottom-right"
        return "top-left"


@dataclass(frozen=True)
class _Affine:
    """Σ coef·index + const over the ``arange`` nodes it derives from."""

    coefs: dict[object, int] = field(default_factory=dict)
    """Index to coefficient: ``"q"`` / ``"k"`` once the axis is known, else the arange."""
    const: int = 0

    def plus(self, other: _Affine, sign: int = 1) -> _Affine:
        coefs = dict(self.coefs)
        for node, coef in other.coefs.items():
            coefs[node] = coefs.get(node, 0) + sign * coef
        return _Affine({n: c for n, c in coefs.items() if c}, self.const + sign * other.const)

    def times(self, factor: int) -> _Affine:
        return _Affine({n: c * factor for n, c in self.coefs.items()}, self.const * factor)


_Constraint = tuple[int, int, int]
"""(a, b, c) meaning a·i + b·j + c ≥ 0 over query index i and key index j."""


@dataclass(frozen=True)
class _Mask:
    """A conjunction of constraints; ``keeps_all`` for a mask of ones."""

    constraints: tuple[_Constraint, ...] = ()
    partial: bool = False
    """True when unreadable conjuncts were dropped: the mask keeps at most this."""


class _Reader:
    """Evaluates the nodes that build a mask into affine forms and constraints."""

    def __init__(self) -> None:
        self.values: dict[fx.Node, object] = {}
        self.visits = 0
        self.known = Values()

    def value(self, node: object) -> object:
        if isinstance(node, bool):
            return _Mask() if node else None
        if isinstance(node, int):
            return _Affine(const=node)
        if not isinstance(node, fx.Node) or self.visits > _MAX_NODES:
            return None
        if node not in self.values:
            self.visits += 1
            self.values[node] = self._evaluate(node)
        return self.values[node]

    def _evaluate(self, node: fx.Node) -> object:  # index arithmetic, else buffer values
        found = self._symbolic(node)
        known = self.known.of(node) if found is None else None
        return known if isinstance(known, (Known, Unknown)) else found

    def _symbolic(self, node: fx.Node) -> object:
        name = op_name(node)
        args = node.args
        if name == "arange":
            numbers = [a for a in args if isinstance(a, int)]
            start, step = (numbers[0] if len(numbers) >= 2 else 0), (
                numbers[2] if len(numbers) >= 3 else 1)
            return _Affine({node: step}, start)
        if name in MASK_PASS_OPS and args:
            return self.value(args[0])
        if name in ONES_OPS:
            return _Mask()
        if name in ("add", "sub", "rsub") and len(args) >= 2:
            a, b = self._operands(args[0], args[1])
            if isinstance(a, _Affine) and isinstance(b, _Affine):
                return b.plus(a, -1) if name == "rsub" else a.plus(b, -1 if name == "sub" else 1)
            return None
        if name == "neg" and args:
            a = self.value(args[0])
            return a.times(-1) if isinstance(a, _Affine) else None
        if name == "mul" and len(args) >= 2:
            return self._mul(self.value(args[0]), self.value(args[1]))
        if name in COMPARE_OPS and len(args) >= 2:
            return self._compare(name, *self._operands(args[0], args[1]))
        if name in AND_OPS and len(args) >= 2:
            return self._and(self.value(args[0]), self.value(args[1]))
        if name in NOT_OPS and args:
            return _negate(self.value(args[0]))
        if name in TRIANGLE_OPS and args:
            return self._band(name, args[0], arg(node, 1, "diagonal", 0))
        if name == "where" and len(args) >= 3:
            return self._where(args)
        if name == "index" and len(args) >= 2 and isinstance(args[1], (list, tuple)):
            return self._index(args[0], args[1])
        return None

    def _index(self, base: object, indices: list[object] | tuple[object, ...]) -> object:
        """``positions[..., idx]`` of positions affine in one ``arange`` along their last
        axis: the same form at ``idx`` (earlier indices pick batch rows, which the
        positions do not vary over)."""
        positions = self.value(base)
        dims = shape(base) if isinstance(base, fx.Node) else ()
        if not isinstance(positions, _Affine) or not indices or len(indices) != len(dims):
            return None
        ranges = list(positions.coefs.items())
        if len(ranges) > 1 or any(isinstance(n, str) for n, _ in ranges):
            return None
        if ranges and (shape(ranges[0][0]) or (0,))[-1] != dims[-1]:
            return None
        at = self.value(indices[-1])
        if not isinstance(at, _Affine):
            return None
        coef = ranges[0][1] if ranges else 0
        return at.times(coef).plus(_Affine(const=positions.const))

    def _mul(self, a: object, b: object) -> object:
        if isinstance(a, _Affine) and isinstance(b, _Affine):
            if not a.coefs:
                return b.times(a.const)
            if not b.coefs:
                return a.times(b.const)
            return None
        return self._and(a, b)

    def _and(self, a: object, b: object) -> object:
        a, b = _as_mask(a), _as_mask(b)
        if isinstance(a, _Mask) and isinstance(b, _Mask):
            return _Mask(a.constraints + b.constraints, a.partial or b.partial)
        known = a if isinstance(a, _Mask) else b if isinstance(b, _Mask) else None
        if known is not None and (a is None or b is None):  # the unknown side only removes
            return _Mask(known.constraints, partial=True)
        return a if isinstance(a, Unknown) else b if isinstance(b, Unknown) else None

    def _band(self, name: str, base: object, diagonal: object) -> object:
        """What ``base`` keeps, less what the triangle zeroes (``triu(-w).tril(w)`` of ones
        keeps the band |i − j| ≤ w)."""
        kept = self.value(base)
        if not isinstance(kept, _Mask) or not isinstance(diagonal, int):
            return None
        if name == "tril":  # keeps j ≤ i + d: i − j + d ≥ 0
            return _Mask((*kept.constraints, (1, -1, diagonal)), kept.partial)
        return _Mask((*kept.constraints, (-1, 1, -diagonal)), kept.partial)  # triu: j ≥ i + d

    def _where(self, args: tuple[object, ...]) -> object:
        cond = self.value(args[0])
        if is_blocking(args[2]) and not is_blocking(args[1]):
            return cond
        if is_blocking(args[1]) and not is_blocking(args[2]):
            return _negate(cond)
        return None

    def _operands(self, first: object, second: object) -> tuple[object, object]:
        """Both operands' values; where two tensors meet, their indices are named."""
        a, b = self.value(first), self.value(second)
        if isinstance(first, fx.Node) and isinstance(second, fx.Node):
            return _resolve(a, first), _resolve(b, second)
        return a, b

    def _compare(self, name: str, a: object, b: object) -> object:
        if not (isinstance(a, _Affine) and isinstance(b, _Affine)):
            return None
        diff = a.plus(b, -1)  # a − b
        if name in ("le", "lt"):
            diff = diff.times(-1)  # b − a ≥ 0 (or > 0)
        if any(n not in ("q", "k") for n in diff.coefs):
            return None
        const = diff.const - (1 if name in ("gt", "lt") else 0)
        return _Mask(((diff.coefs.get("q", 0), diff.coefs.get("k", 0), const),))


def _resolve(value: object, node: object) -> object:
    """Name the index of a one-arange form by the axis ``node`` broadcasts it along where
    it meets another tensor: the last axis indexes keys, the one before queries."""
    if not isinstance(value, _Affine) or not isinstance(node, fx.Node):
        return value
    pending = [n for n in value.coefs if not isinstance(n, str)]
    dims = shape(node)
    wide = [i - len(dims) for i, size in enumerate(dims) if size != 1]
    if len(pending) != 1 or len(wide) != 1 or wide[0] not in (-1, -2):
        return value
    coefs = dict(value.coefs)
    axis = "k" if wide[0] == -1 else "q"
    coefs[axis] = coefs.get(axis, 0) + coefs.pop(pending[0])
    return _Affine(coefs, value.const)


@dataclass(frozen=True)
class _Not:
    """The complement of a conjunction of several constraints (kept only to be negated back)."""

    mask: _Mask


def _as_mask(value: object) -> object:
    """A known boolean mask as the band it keeps where True; anything else as it is."""
    if not isinstance(value, Known):
        return value
    constraints, partial = band(value.tensor.bool())
    return _Mask(constraints, partial)


def _negate(mask: object) -> object:
    """The complement: of one constraint (a·i + b·j + c ≥ 0 → −a·i − b·j − c − 1 ≥ 0), of
    a complement (the mask itself), of a known value its values', else a ``_Not`` to undo
    later."""
    if isinstance(mask, (Known, Unknown)):
        return negated(mask)
    if isinstance(mask, _Not):
        return mask.mask
    if isinstance(mask, _Mask) and mask.partial:  # the complement of an upper bound bounds
        return _Not(mask)  # nothing, but negated back it is the bound again
    if isinstance(mask, _Mask) and len(mask.constraints) == 1:
        a, b, c = mask.constraints[0]
        return _Mask(((-a, -b, -c - 1),))
    if isinstance(mask, _Mask) and mask.constraints:
        return _Not(mask)
    return None


def _reading(mask: _Mask) -> MaskReading:
    """Causal offset and window from constraints on j − i; others (padding) are ignored."""
    uppers, lowers = [], []
    for a, b, c in mask.constraints:
        if a == 0 or a != -b:
            continue
        if a > 0:  # a·(i − j) + c ≥ 0: j ≤ i + c/a
            uppers.append(c // a)
        else:  # |a|·(j − i) + c ≥ 0: j ≥ i − c/|a|
            lowers.append(c // -a)
    if not uppers:
        return MaskReading()
    offset = min(uppers)
    window = offset + min(lowers) + 1 if lowers else None
    return MaskReading(True, offset, window)


def _kept(mask: fx.Node) -> _Mask | Unknown | None:
    """What a mask node keeps: masked_fill's mask marks what it removes; a known value
    keeps the band around its kept scores; unknown where a buffer's value is."""
    value = _Reader().value(mask)
    removes = any(op_name(u) == "masked_fill" and len(u.args) > 1 and u.args[1] is mask
                  for u in mask.users)
    if isinstance(value, Known):
        scales = any(op_name(u) == "mul" for u in mask.users)
        constraints, partial = band(kept(value.tensor, removes, scales))
        return _Mask(constraints, partial)
    if isinstance(value, Unknown) or not isinstance(value, (_Mask, _Not)):
        return value if isinstance(value, Unknown) else None
    if removes:
        flipped = _negate(value)
        return flipped if isinstance(flipped, _Mask) else None
    return value if isinstance(value, _Mask) else None


def read_masks(masks: tuple[fx.Node, ...]) -> MaskReading:
    """The causal offset and window of the masks one attention core applies."""
    constraints: tuple[_Constraint, ...] = ()
    unknown: list[str] = []
    for mask in masks:
        keeps = _kept(mask)
        if isinstance(keeps, Unknown):
            unknown.append(keeps.why)
        elif keeps is not None:
            constraints += keeps.constraints
    reading = _reading(_Mask(constraints))
    return reading if reading.causal or not unknown else MaskReading(unknown=unknown[0])


def attention_call(output: fx.Node) -> fx.Node:
    """The attention op behind a core's output (SDPA variants return tuples)."""
    if op_name(output) == "getitem" and isinstance(output.args[0], fx.Node):
        return output.args[0]
    return output


def window_argument(call: fx.Node) -> int | None:
    """A sliding window the attention call takes as an argument (keys each query sees)."""
    for key in _WINDOW_KWARGS:
        value = call.kwargs.get(key)
        if isinstance(value, (tuple, list)) and value and isinstance(value[0], int):
            value = value[0] + 1  # (left, right): left keys before the query, plus itself
        if isinstance(value, int) and value > 0:
            return value
    return None


def core_mask(output: fx.Node, masks: tuple[fx.Node, ...], n_q: int, n_kv: int
              ) -> tuple[int | None, str]:
    """(window, causal alignment) of one attention core.

    ``is_causal=True`` is top-left (torch: query i sees keys 0..i); explicit masks by
    their index arithmetic; the window from the mask, else from the call's argument.
    """
    call = attention_call(output)
    name = op_name(call)
    if name in SDPA_VARIANTS and arg(call, SDPA_VARIANTS[name].causal_index, "is_causal"):
        return window_argument(call), "top-left"
    reading = read_masks(masks)
    return reading.window or window_argument(call), reading.alignment(n_q, n_kv)


def masks_causal(masks: tuple[fx.Node, ...] | list[fx.Node], n_q: int, n_kv: int
                 ) -> bool | None:
    """True when one of a core's masks is causal, None when one is unread, else False."""
    found = [looks_causal(m, n_q, n_kv) for m in masks]
    return True if True in found else None if None in found else False


def looks_causal(mask: fx.Node, n_q: int, n_kv: int) -> bool | None:
    """True when a mask keeps no key past the diagonal: read from its values (index
    arithmetic, triangles of ones, a buffer's known value), or built from tril/triu or a
    comparison of position ranges. A mask whose values bound the keys above past the
    diagonal (a band that keeps both sides) is not causal: it is a bidirectional window.
    None when it reads a buffer whose value is not known."""
    reading = read_masks((mask,))
    if reading.causal:
        return not reading.sees_ahead(n_q, n_kv)
    if reading.unknown is not None:
        return None
    walk = Walk([mask], 64)
    for node in walk:
        name = op_name(node)
        if name in TRIANGLE_OPS:
            return True
        if name in CAUSAL_MASK_OPS and from_arange(node):
            return True
        walk.push(a for a in node.all_input_nodes if a.op == "call_function")
    return False

"""Input shapes as a forward's docstring states them, resolved against the config.

transformers documents each input as ``name (`torch.LongTensor` of shape
`(batch_size, sequence_length)`)``; the dimension names are config attributes
(``state_dim``, ``num_input_channels``), sizes the caller chose (batch, sequence) or
small expressions of both (``dim * len(config.target_layer_ids)``).
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_ENTRY = re.compile(
    r"^[ \t]*(?P<name>\w+)[ \t]*(?:"
    r"\(`(?P<type>[^`]*)`[^`\n]*?of shape[ \t]*`(?P<shape>[(\[][^`\n]*[)\]])`(?P<rest>.*)$"
    r"|:[ \t]*an?[ \t]+(?P<type2>[\w.]+)[ \t]+of shape[ \t]+(?P<shape2>\[[^\]]*\]))",
    re.MULTILINE,
)

BATCH_DIMS = frozenset({"batch_size", "bs", "batch"})


@dataclass(frozen=True)
class DocInput:
    """One documented input of a forward."""

    name: str
    type_name: str
    """The documented tensor type (``torch.LongTensor``)."""
    dims: tuple[str, ...]
    """Each dimension as written (``"batch_size"``, ``"config.block_size"``, ``"1"``)."""
    optional: bool


def _split_dims(shape: str) -> tuple[str, ...]:
    """``"(a, b(c, d), e)"`` -> ``("a", "b(c, d)", "e")``; empty trailing items dropped."""
    inner = shape.strip()[1:-1]
    dims, depth, item = [], 0, ""
    for char in inner:
        depth += char in "(["
        depth -= char in ")]"
        if char == "," and depth == 0:
            dims.append(item.strip())
            item = ""
        else:
            item += char
    dims.append(item.strip())
    return tuple(d for d in dims if d)


def documented_inputs(forward: Callable[..., Any]) -> dict[str, DocInput]:
    """The inputs a forward's docstring gives a shape for, by name (first mention wins)."""
    doc = inspect.getdoc(forward) or ""
    found: dict[str, DocInput] = {}
    for match in _ENTRY.finditer(doc):
        name = match["name"]
        if name in found:
            continue
        type_name = match["type"] or match["type2"] or ""
        shape = match["shape"] or match["shape2"] or ""
        rest = match["rest"] or ""
        found[name] = DocInput(name, type_name, _split_dims(shape), "optional" in rest)
    return found


class Unresolved(Exception):
    """A dimension that neither the caller nor the config sizes."""


def _value(node: ast.AST, lookup: Callable[[str], int | None], config: Any) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return int(node.value)
    if isinstance(node, ast.Name):
        size = lookup(node.id)
        if size is None:
            raise Unresolved(node.id)
        return size
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
            and node.value.id == "config":
        value = getattr(config, node.attr, None)
        if isinstance(value, bool) or not isinstance(value, (int, list, tuple)):
            raise Unresolved(f"config.{node.attr}")
        return value if isinstance(value, int) else len(value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id == "len" and len(node.args) == 1:
        return _value(node.args[0], lookup, config)  # len(config.list) is read as its length
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add, ast.Sub)):
        left, right = _value(node.left, lookup, config), _value(node.right, lookup, config)
        if isinstance(node.op, ast.Mult):
            return left * right
        return left + right if isinstance(node.op, ast.Add) else left - right
    raise Unresolved(ast.unparse(node))


def resolve_dim(dim: str, lookup: Callable[[str], int | None], config: Any) -> int:
    """The size of one documented dimension; raises :class:`Unresolved` naming what is not
    known."""
    try:
        tree = ast.parse(dim, mode="eval")
    except SyntaxError as exc:
        raise Unresolved(dim) from exc
    size = _value(tree.body, lookup, config)
    if size < 1:
        raise Unresolved(dim)
    return size

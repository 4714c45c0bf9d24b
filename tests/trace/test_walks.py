"""Bounded walks: a chain through first arguments, a depth-first walk with a visit cap."""

from __future__ import annotations

import torch
from torch import fx

from mhaudit.trace.graphs import param_root
from mhaudit.trace.walks import Walk, chain

aten = torch.ops.aten


def _views(depth: int) -> tuple[fx.Graph, list[fx.Node]]:
    """A placeholder ``w`` then ``depth`` views of it, each of the one before."""
    graph = fx.Graph()
    nodes = [graph.placeholder("w")]
    for _ in range(depth):
        nodes.append(graph.call_function(aten.view.default, (nodes[-1], [-1])))
    return graph, nodes


def test_a_chain_follows_first_arguments_through_its_ops_only() -> None:
    graph = fx.Graph()
    x = graph.placeholder("x")
    y = graph.placeholder("y")
    added = graph.call_function(aten.add.Tensor, (x, y))
    view = graph.call_function(aten.view.default, (added, [-1]))
    copy = graph.call_function(aten.clone.default, (view,))
    assert chain(copy, frozenset({"view", "clone"}), 10) == [copy, view, added]
    assert chain(copy, frozenset({"clone"}), 10) == [copy, view]
    assert chain(added, frozenset({"add"}), 10) == [added, x]


def test_a_chain_takes_at_most_limit_steps_and_each_needs_the_step_test() -> None:
    _, nodes = _views(5)
    top = nodes[-1]
    assert chain(top, frozenset({"view"}), 2) == [nodes[5], nodes[4], nodes[3]]
    assert chain(top, frozenset({"view"}), 0) == [top]
    # Refuse the step into nodes[2]: the walk ends at nodes[3].
    assert chain(top, frozenset({"view"}), 9, lambda _, s: s is not nodes[2])[-1] is nodes[3]


def test_param_root_sees_a_parameter_at_most_depth_minus_one_views_away() -> None:
    _, nodes = _views(7)
    params = {"w": "layer.weight"}
    assert param_root(nodes[7], params, depth=8) == "w"
    assert param_root(nodes[7], params, depth=7) is None
    assert param_root(nodes[0], params, depth=1) == "w"
    assert param_root(nodes[0], params, depth=0) is None
    assert param_root(nodes[3], {}, depth=8) is None


def _diamond() -> tuple[fx.Node, list[fx.Node]]:
    """out = a + b, a = relu(x), b = relu(x): x is reached twice."""
    graph = fx.Graph()
    x = graph.placeholder("x")
    a = graph.call_function(aten.relu.default, (x,))
    b = graph.call_function(aten.relu.default, (x,))
    out = graph.call_function(aten.add.Tensor, (a, b))
    return out, [x, a, b, out]


def test_a_walk_visits_each_node_once_depth_first() -> None:
    out, (x, a, b, _) = _diamond()
    walk = Walk([out], 10)
    order = []
    for node in walk:
        order.append(node)
        walk.push(node.all_input_nodes)
    assert order == [out, b, x, a]
    assert not walk.cut


def test_a_walk_stops_at_its_cap_and_says_so() -> None:
    out, _ = _diamond()
    walk = Walk([out], 2)
    order = []
    for node in walk:
        order.append(node)
        walk.push(node.all_input_nodes)
    assert len(order) == 2
    assert walk.cut
    exact = Walk([out], 4)
    for node in exact:
        exact.push(node.all_input_nodes)
    assert len(exact.seen) == 4 and not exact.cut


def test_a_walk_of_tuples_dedups_by_their_node() -> None:
    out, (x, a, b, _) = _diamond()
    walk: Walk[tuple[fx.Node, tuple[fx.Node, ...]]] = Walk(
        [(out, (out,))], 10, key=lambda item: item[0])
    paths = {}
    for node, path in walk:
        paths[node] = path
        walk.push((i, (*path, i)) for i in node.all_input_nodes)
    assert paths[x] == (out, b, x)  # the first path to reach x wins
    assert set(paths) == {out, a, b, x}

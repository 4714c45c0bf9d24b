"""Hand-computed tests for every registered FLOP formula and the registry's rules."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from mhaudit.cost.formulas import (
    REGISTRY,
    SOFTMAX_FLOPS_PER_ELEMENT,
    FormulaInputError,
    OpCall,
    TensorArg,
    broadcast_matmul_flops,
    einsum_flops,
    is_zero_flop,
    lookup,
    matmul_flops,
    register,
)


def T(*shape: int, floating: bool = True) -> TensorArg:
    return TensorArg(shape, floating)


def call(*args: object, out: object = None, **kwargs: object) -> OpCall:
    return OpCall(args=args, kwargs=kwargs, out=out)


CASES: list[tuple[str, OpCall, int]] = [
    # 2 · 2·10 rows · 64 in · 192 out = 491,520
    ("aten.linear", call(T(2, 10, 64), T(192, 64), T(192)), 491_520),
    # 2 · 3 · 4 · 5 = 120
    ("aten.mm", call(T(3, 4), T(4, 5)), 120),
    # 2 · 2 batches · 3 · 4 · 5 = 240
    ("aten.bmm", call(T(2, 3, 4), T(2, 4, 5)), 240),
    # 6 dispatched rows (3 tokens · top-2) through (4 experts, 8, 5): 2·6·8·5 = 480
    ("transformers.grouped_mm_fallback", call(T(6, 8), T(4, 8, 5), T(4)), 480),
    ("aten._grouped_mm", call(T(6, 8), T(4, 8, 5), T(4)), 480),
    # both 3-D: 4 batched (3, 8) @ (8, 5): 2·4·3·8·5 = 960; both 2-D: 2·3·8·5 = 240
    ("aten._grouped_mm", call(T(4, 3, 8), T(4, 8, 5)), 960),
    ("aten._grouped_mm", call(T(3, 8), T(8, 5), T(2)), 240),
    # batch (2, 1) × (5,) broadcasts to (2, 5): 2 · 10 · 3 · 4 · 6 = 1,440
    ("aten.matmul", call(T(2, 1, 3, 4), T(5, 4, 6)), 1_440),
    # 2 · 7 = 14
    ("aten.dot", call(T(7), T(7)), 14),
    # 2 · 3 · 4 = 24
    ("aten.mv", call(T(3, 4), T(4)), 24),
    # bias ignored: 2 · 3 · 4 · 5 = 120
    ("aten.addmm", call(T(5), T(3, 4), T(4, 5)), 120),
    # bias ignored: 2 · 2 · 3 · 4 · 5 = 240
    ("aten.baddbmm", call(T(2, 3, 5), T(2, 3, 4), T(2, 4, 5)), 240),
    # 2 · b 2 · h 4 · q 10 · k 12 · d 8 = 15,360
    ("aten.einsum", call("bhqd,bhkd->bhqk", (T(2, 4, 10, 8), T(2, 4, 12, 8))), 15_360),
    # out 1·16·30·30 = 14,400; 2 · 14,400 · 3·3·3 = 777,600
    ("aten.convolution",
     call(T(1, 3, 32, 32), T(16, 3, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
          out=T(1, 16, 30, 30)), 777_600),
    # depthwise: out 1·8·8·8 = 512; 2 · 512 · (1 · 3·3) = 9,216
    ("aten.conv2d",
     call(T(1, 8, 10, 10), T(8, 1, 3, 3), None, [1, 1], [0, 0], [1, 1], 8,
          out=T(1, 8, 8, 8)), 9_216),
    # transposed: input 1·4·5·5 = 100; 2 · 100 · (2 · 3·3) = 3,600
    ("aten.conv_transpose2d", call(T(1, 4, 5, 5), T(4, 2, 3, 3), out=T(1, 2, 7, 7)), 3_600),
    # GQA, b·h = 2·8 = 16: scores 2·16·16·16·64 = 524,288; context 2·16·16·16·32 = 262,144;
    # softmax 3·16·16·16 = 12,288; total 798,720
    ("aten.scaled_dot_product_attention",
     call(T(2, 8, 16, 64), T(2, 2, 16, 64), T(2, 2, 16, 32), enable_gqa=True), 798_720),
    # flex_attention over b·h = 1·2 = 2 heads, n = 256, d = 16, causal block mask of 2×2
    # 128-tiles visiting 3 of 4: dense 2·2·256·256·16·2 = 8,388,608 products + 3·2·256·256
    # = 393,216 softmax = 8,781,824; times 3/4 = 6,586,368
    ("higher_order.flex_attention",
     call(T(1, 2, 256, 16), T(1, 2, 256, 16), T(1, 2, 256, 16), visited_fraction=0.75),
     6_586_368),
    # 3 · 2·4·10·10 = 2,400 (exp, sum, divide)
    ("aten.softmax", call(T(2, 4, 10, 10), -1, False), 2_400),
    # (5 + weight 1 + bias 1) · 2·10·64 = 8,960
    ("aten.layer_norm", call(T(2, 10, 64), [64], T(64), T(64), 1e-5), 8_960),
    # (5 + 1 + 1) · 4·8·5·5 = 5,600
    ("aten._native_batch_norm_legit_no_training",
     call(T(4, 8, 5, 5), T(8), T(8), T(8), T(8), 0.1, 1e-5), 5_600),
    # (3 + weight 1) · 2·10·64 = 5,120
    ("aten.rms_norm", call(T(2, 10, 64), [64], T(64), 1e-6), 5_120),
    # 1 · 2·10·64 = 1,280
    ("aten.add", call(T(2, 10, 64), T(64), out=T(2, 10, 64)), 1_280),
    # 1 · 4·8 = 32
    ("aten.sum", call(T(4, 8), [1]), 32),
    # max over dim 1 of (4, 8): 1 per input element = 32
    ("aten.max", call(T(4, 8), 1), 32),
    # max of two (4, 8) tensors: 1 per output element = 32; as maximum
    ("aten.max", call(T(4, 8), T(4, 8), out=T(4, 8)), 32),
    # 2 · 4·8 = 64 (square, add)
    ("aten.linalg_vector_norm", call(T(4, 8)), 64),
    # 4 · 4·8 = 128 (mean, subtract, square, sum)
    ("aten.var", call(T(4, 8), [1]), 128),
]


@pytest.mark.parametrize(("op", "op_call", "expected"), CASES, ids=[c[0] for c in CASES])
def test_formula(op: str, op_call: OpCall, expected: int) -> None:
    entry = lookup(op)
    assert entry is not None
    assert entry.formula(op_call) == expected


def test_every_registered_formula_has_a_hand_computed_case() -> None:
    tested = {id(REGISTRY[op].formula) for op, _, _ in CASES}
    untested = {e.op for e in REGISTRY.values() if id(e.formula) not in tested}
    assert not untested


def test_max_of_two_tensors_is_elementwise_and_of_one_a_reduction() -> None:
    entry = lookup("aten.max")
    assert entry is not None
    binary, reduce = call(T(4, 8), T(4, 8), out=T(4, 8)), call(T(4, 8), 1)
    assert entry.by_family(binary, entry.formula(binary)) == {"elementwise": 32}
    assert entry.by_family(reduce, entry.formula(reduce)) == {"other": 32}


def test_softmax_convention() -> None:
    assert SOFTMAX_FLOPS_PER_ELEMENT == 3
    entry = lookup("aten._log_softmax")
    assert entry is not None and entry.family == "softmax"
    # exp, sum, subtract the log-sum: 3 · 3·7 = 63
    assert entry.formula(call(T(3, 7), 1, False)) == 63


def test_convolution_transposed_flag() -> None:
    entry = REGISTRY["aten.convolution"]
    # same shapes as conv_transpose2d above: 2 · 100 · 18 = 3,600
    op_call = call(T(1, 4, 5, 5), T(4, 2, 3, 3), None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1,
                   out=T(1, 2, 7, 7))
    assert entry.formula(op_call) == 3_600


def test_elementwise_on_integers_is_zero() -> None:
    entry = REGISTRY["aten.mul"]
    assert entry.formula(call(T(4, floating=False), 2, out=T(4, floating=False))) == 0


def test_matmul_helpers() -> None:
    assert matmul_flops(3, 4, 5, batch=2) == 240  # 2 · 2 · 3 · 4 · 5
    assert broadcast_matmul_flops((4,), (4, 6)) == 48  # (1, 4) @ (4, 6): 2 · 4 · 6
    with pytest.raises(FormulaInputError):
        broadcast_matmul_flops((3, 4), (5, 6))
    with pytest.raises(FormulaInputError):
        broadcast_matmul_flops((2, 3, 4), (3, 4, 5))


@pytest.mark.parametrize(
    ("equation", "shapes", "expected"),
    [
        ("ij,jk", [(4, 5), (5, 6)], 240),  # implicit output ik: 2 · 4·5·6
        ("...qd,...kd->...qk", [(2, 3, 4, 5), (3, 6, 5)], 1_440),  # 2 · 2·3·4·5·6
        ("bi,bj->bij", [(2, 3), (2, 4)], 0),  # outer product, no sum: a broadcast mul
        ("i,j->ij", [(4,), (6,)], 0),  # rotary's position × frequency table
        ("...d,hd->...hd", [(2, 5, 8), (3, 8)], 0),  # a per-head scale, broadcast
        ("ij->ji", [(4, 5)], 0),  # a permutation
        ("ij->i", [(4, 5)], 0),  # a row sum: a sum, no product
        ("ij,ij->i", [(3, 4), (3, 4)], 24),  # rowwise dot products: 2·3·4
        ("ik,j->ij", [(3, 4), (5,)], 0),  # k summed alone first, then an outer product
        ("ijk,jl->il", [(2, 3, 4), (3, 5)], 60),  # k summed alone first: 2·2·3·5
        ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], 128),  # 2·2·3·4 + 2·2·4·5, left to right
    ],
)
def test_einsum_flops(equation: str, shapes: list[tuple[int, ...]], expected: int) -> None:
    assert einsum_flops(equation, shapes) == expected
    counter = FlopCounterMode(display=False)  # torch's count of a real call agrees
    with counter:
        torch.einsum(equation, *(torch.randn(s) for s in shapes))
    assert counter.get_total_flops() == expected


def test_einsum_rejects_mismatched_operands() -> None:
    with pytest.raises(FormulaInputError):
        einsum_flops("ij,jk->ik", [(2, 3)])
    with pytest.raises(FormulaInputError):
        einsum_flops("ijk,jk->ik", [(2, 3), (3, 4)])


def test_register_rejects_duplicates_and_zero_ops() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register("aten.mm", family="matmul")(lambda c: 0)
    with pytest.raises(ValueError, match="already registered"):
        register("aten.view", family="matmul")(lambda c: 0)
    assert "aten.mm" in REGISTRY and "aten.view" not in REGISTRY


def test_lookup_and_zero_ops() -> None:
    in_place = lookup("aten.add_")
    assert in_place is not None and in_place.op == "aten.add"
    assert lookup("aten.no_such_op") is None
    for op in ("aten.view", "aten.transpose", "aten.embedding", "aten.dropout",
               "aten._to_copy", "aten.detach_", "aten._assert_tensor_metadata",
               "operator.getitem", "aten.arange", "aten.cat"):
        assert is_zero_flop(op), op
    assert not is_zero_flop("aten.mm")
    assert not set(REGISTRY) & {op for op in REGISTRY if is_zero_flop(op)}


@pytest.mark.parametrize(
    ("op", "args", "kwargs"),
    [
        ("aten.convolution", (torch.randn(1, 4, 5, 5), torch.randn(4, 2, 3, 3), None,
                              [2, 2], [1, 1], [1, 1], True, [0, 0], 2), {}),
        ("aten.conv2d", (torch.randn(2, 6, 9, 9), torch.randn(12, 3, 3, 3), None,
                         [1, 1], [1, 1], [1, 1], 2), {}),
        ("aten.baddbmm", (torch.randn(3, 4, 6), torch.randn(3, 4, 5), torch.randn(3, 5, 6)),
         {}),
        ("aten.scaled_dot_product_attention",
         (torch.randn(2, 4, 8, 16), torch.randn(2, 4, 10, 16), torch.randn(2, 4, 10, 8)), {}),
    ],
)
def test_matches_torch_flop_counter(op: str, args: tuple[object, ...],
                                    kwargs: dict[str, object]) -> None:
    fn = getattr(torch.ops.aten, op.split(".")[1]).default
    with FlopCounterMode(display=False) as counter:
        out = fn(*args, **kwargs)
    first = out[0] if isinstance(out, tuple) else out

    def shape(value: object) -> object:
        return T(*value.shape) if isinstance(value, torch.Tensor) else value

    op_call = OpCall(tuple(shape(a) for a in args), {}, shape(first))
    expected = counter.get_total_flops()
    if op == "aten.scaled_dot_product_attention":
        # torch counts the two matmuls only; add our softmax: 3 · 2·4·8·10 = 1,920
        expected += 1_920
    assert REGISTRY[op].formula(op_call) == expected

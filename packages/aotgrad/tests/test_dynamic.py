"""Traces with symbolic sizes: one aten graph serves every size, its sizes read
from its inputs, with the relations it assumed listed as guards."""

import pytest
import sympy
import torch
from aot_helpers import graph_of, module_fn
from test_joint import Block  # its mask is built from the sequence length

from ember_aotgrad import aot_compile, trace_to_aten
from ember_aotgrad.layout import Dynamic
from ember_aotgrad.symbolic import ShapeEnv


class Counting:
    """A compiler that runs the aten graph through torch and counts its calls."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm


def _compiled_block(requires_grad):
    torch.manual_seed(0)
    model = Block()
    fn, state = module_fn(model)
    x = torch.randn(2, 5, 16, requires_grad=requires_grad)
    compiler = Counting()
    compiled = aot_compile(
        graph_of(fn, 1 + len(state)), [x, *state], compiler, dynamic_dims={0: [0, 1]}
    )
    return model, state, compiled, compiler


@pytest.mark.parametrize("sizes", [(2, 5), (3, 9), (1, 2), (4, 17)])
def test_block_forward_serves_every_size(sizes):
    model, state, compiled, compiler = _compiled_block(requires_grad=False)
    assert compiled.dynamic is not None and compiled.specialized is None
    assert compiled.dynamic.symbols == {"s0": (0, 0), "s1": (0, 1)}
    assert compiled.dynamic.guards == ()
    x = torch.randn(*sizes, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, *state)[0], model(x))
    assert len(compiler.graphs) == 1


def test_block_training_gradients_at_new_sizes():
    model, state, compiled, compiler = _compiled_block(requires_grad=True)
    assert compiled.dynamic is not None and compiled.dynamic.guards == ()
    for b, t in [(2, 5), (3, 11), (1, 7)]:
        x = torch.randn(b, t, 16, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_(True)
        for p in state:
            p.grad = None
        out = compiled(x, *state)[0]
        grad = torch.randn_like(out)
        out.backward(grad)
        got = [x.grad, *(p.grad.clone() for p in state)]
        for p in state:
            p.grad = None
        model(x_ref).backward(grad)
        want = [x_ref.grad, *(p.grad for p in state)]
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
    assert len(compiler.graphs) == 2  # one forward, one backward, for all sizes


def test_sizes_are_read_from_the_inputs_in_the_graph():
    def fn(x):
        return (x.view(x.shape[0], x.shape[1] * 2, 2) + 1,)

    gm = trace_to_aten(graph_of(fn, 1), [torch.randn(3, 6, 4)])
    assert "sym_size" not in gm.code  # without dynamic_dims: constants
    traced = aot_compile(
        graph_of(fn, 1), [torch.randn(3, 6, 4)], Counting(), dynamic_dims={0: [1]}
    )
    code = traced.forward.code
    assert "sym_size_int = torch.ops.aten.sym_size.int(arg0, 1)" in code
    assert "mul = 2 * sym_size_int" in code
    assert "torch.ops.aten.view.default(arg0, [3, mul, 2])" in code
    x = torch.randn(3, 10, 4)
    torch.testing.assert_close(traced(x)[0], fn(x)[0])


def test_a_slice_past_a_constant_guards_the_relation():
    def fn(x):
        return (x[:, :4] * 2, x[:, 1:].sum(1))

    compiled = aot_compile(
        graph_of(fn, 1), [torch.randn(2, 7)], Counting(), dynamic_dims={0: [1]}
    )
    (guard,) = compiled.dynamic.guards
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    assert guard == sympy.Ge(s0, 4)
    for t in (4, 5, 12):
        x = torch.randn(2, t)
        for got, want in zip(compiled(x), fn(x)):
            torch.testing.assert_close(got, want)


def test_an_op_without_a_shape_rule_specializes_and_says_why():
    def fn(x):
        return (torch.cdist(x, x) + 1,)

    compiled = aot_compile(
        graph_of(fn, 1), [torch.randn(2, 7)], Counting(), dynamic_dims={0: [1]}
    )
    assert "cdist" in compiled.specialized
    # the graph is for size 7 only; other sizes run the torch-level graph
    (pinned,) = compiled.dynamic.guards
    assert str(pinned) == "Eq(s0, 7)"
    for t in (7, 9):
        x = torch.randn(2, t)
        torch.testing.assert_close(compiled(x)[0], fn(x)[0])


def test_an_op_that_reads_a_size_as_a_number_pins_it():
    """max_pool1d's C++ kernel reads the length as an int: the trace guards
    that length's value, and ``pinned`` says so (the batch stays a symbol)."""

    def fn(x):
        return (torch.nn.functional.max_pool1d(x, 2) * 2,)

    compiled = aot_compile(
        graph_of(fn, 1),
        [torch.randn(2, 3, 10)],
        Counting(),
        dynamic_dims={0: [0, 2]},
    )
    assert compiled.specialized is None
    assert compiled.dynamic.pinned() == {"s1": 10}
    for shape in [(2, 3, 10), (5, 3, 10), (2, 3, 13)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(compiled(x)[0], fn(x)[0])
    s0, s1 = (sympy.Symbol(f"s{i}", integer=True, positive=True) for i in range(2))
    divisible = sympy.Eq(s1, 4 * sympy.floor(s1 / 4))  # pins nothing
    relations = (sympy.Eq(2 * s0, 20), sympy.Eq(s0, s1), sympy.Eq(0, s1 - 3), divisible)
    assert Dynamic({"s0": (0, 0), "s1": (0, 1)}, relations).pinned() == {
        "s0": 10,
        "s1": 3,
    }


def test_an_in_place_op_on_a_split_view_keeps_the_views_strides():
    """``unsafe_split`` (as torch.lstm splits its gates) and ``sigmoid_`` on
    one chunk: the result is the chunk itself, strided, at every size."""

    def fn(x):  # (gates is not read after: unsafe_split's chunks are not views)
        gates = (x * 1).view(x.size(0), 4, -1)
        first, _, third, _ = gates.unsafe_split(1, 1)
        return (first.sigmoid_().sum(1), third.tanh_() * 2)

    compiled = aot_compile(
        graph_of(fn, 1), [torch.randn(3, 8)], Counting(), dynamic_dims={0: [0]}
    )
    assert compiled.specialized is None
    for n in (3, 5):
        x = torch.randn(n, 8)
        for got, want in zip(compiled(x), fn(x)):
            torch.testing.assert_close(got, want)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (torch.roll(x, 3, -1) * 2,),
        lambda x: (torch.nn.functional.glu(x, -1) + 1,),
        lambda x: (torch.nn.functional.adaptive_max_pool1d(x[None], 3)[0] + 1,),
        lambda x: ((x * 2).masked_fill_(x > 0, -1.0) + 1,),
        lambda x: ((x * 2).index_copy_(1, torch.tensor([3, 0]), x[:, 1:3] + 1),),
        lambda x: (x.index_copy(0, torch.tensor(1), x[:1] * 3) * 2,),
        lambda x: ((x * 2).copy_(x[:1].exp()) + x,),
        lambda x: ((x * 2).scatter_(1, torch.zeros_like(x, dtype=torch.long), x) + 1,),
        lambda x: ((x * 1).tril_() + (x * 1).zero_() + x,),
    ],
    ids=[
        "roll",
        "glu",
        "adaptive_max_pool",
        "masked_fill_",
        "index_copy_",
        "index_copy",
        "copy_",
        "scatter_",
        "tril_ zero_",
    ],
)
def test_rules_of_ops_a_user_found_specializing(fn):
    """roll, glu, adaptive max pooling, an in-place masked_fill (xglm's
    attention mask), index_copy and copy_ (a static KV cache's writes), and
    in-place ops by their functional twin's rule keep their sizes symbolic,
    forward and backward."""
    x0 = torch.randn(3, 8, requires_grad=True)
    compiled = aot_compile(graph_of(fn, 1), [x0], Counting(), dynamic_dims={0: [0, 1]})
    assert compiled.specialized is None
    for n, m in [(3, 8), (5, 10)]:
        x = torch.randn(n, m, requires_grad=True)
        got, want = compiled(x)[0], fn(x)[0]
        torch.testing.assert_close(got, want)
        grads = [torch.autograd.grad(out.sum(), x)[0] for out in (got, want)]
        torch.testing.assert_close(*grads)


def test_shape_env_knows_what_holds_for_every_size():
    env = ShapeEnv()
    s0, s1 = env.symbol("s0", 7), env.symbol("s1", 3)
    assert env.decide(sympy.Ne(s0, 1)) and env.decide(sympy.Lt(4, 4 * s0 * s1))
    assert not env.decide(sympy.Eq(s0 - 1, 0))
    assert env.guards == []  # all three hold for every size >= 2
    assert env.decide(sympy.Gt(s0, s1 + 2))
    assert env.guards == [sympy.Gt(s0, s1 + 2)]
    size = env.sym_int(s0 * 2)
    assert size.node.hint == 14 and int(size) == 14
    assert sympy.Eq(2 * s0, 14) in env.guards  # int() specialized it
    with pytest.raises(ValueError):
        env.symbol("s2", 1)


def test_sizes_outside_the_guards_run_the_eager_graph():
    def fn(x):
        return (x[:, :4] * 2,)

    compiler = Counting()
    compiled = aot_compile(
        graph_of(fn, 1), [torch.randn(2, 7)], compiler, dynamic_dims={0: [1]}
    )
    assert not compiled.dynamic.holds([torch.randn(2, 3)])
    assert not compiled.dynamic.holds([torch.randn(2, 1)])  # 1 specializes
    x = torch.randn(2, 3)  # s0 >= 4 fails: the compiled graph would be wrong
    torch.testing.assert_close(compiled(x)[0], fn(x)[0])


def test_an_integer_input_is_a_symbol():
    def fn(x, n):
        return (x[:, :n] * n, x.new_zeros(n, 2))

    compiler = Counting()
    compiled = aot_compile(
        graph_of(fn, 2), [torch.randn(3, 9), 4], compiler, dynamic_dims={1: ()}
    )
    assert compiled.dynamic.symbols == {"s0": (1, None)}
    code = compiler.graphs[0].code
    assert "torch.ops.aten.slice.Tensor(arg0, 1, 0, arg1)" in code
    for n in (2, 5, 9):
        x = torch.randn(3, 9)
        for got, want in zip(compiled(x, n), fn(x, n)):
            torch.testing.assert_close(got, want)
    assert not compiled.dynamic.holds([torch.randn(3, 9), 10])  # s0 <= 9
    assert len(compiler.graphs) == 1


@pytest.mark.parametrize("requires_grad", [False, True])
def test_a_size_the_graph_returns_is_computed_for_each_call(requires_grad):
    """torch.compile's graphs return sizes (``s0 * 2``) beside tensors: the
    compiled graph must return this call's value, never the trace's symbol."""

    def fn(x, w):
        return (x @ w, x.shape[0] * 2, x.shape[0] // 3 + x.shape[1])

    compiler = Counting()
    w = torch.randn(6, 4, requires_grad=requires_grad)
    compiled = aot_compile(
        graph_of(fn, 2), [torch.randn(5, 6), w], compiler, dynamic_dims={0: (0,)}
    )
    for rows in (5, 7, 12):
        x = torch.randn(rows, 6)
        out, doubled, mixed = compiled(x, w)
        assert (doubled, mixed) == (rows * 2, rows // 3 + 6)
        assert type(doubled) is int and type(mixed) is int
        torch.testing.assert_close(out, x @ w)
        if requires_grad:
            w.grad = None
            out.sum().backward()
            torch.testing.assert_close(w.grad, x.sum(0)[:, None].expand(6, 4))
    assert len([g for g in compiler.graphs]) == (2 if requires_grad else 1)

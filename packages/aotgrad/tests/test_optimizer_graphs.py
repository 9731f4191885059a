"""What optimizer steps and training steps bring to aotgrad: foreach ops
decomposed per tensor, ``out=`` ops, in-place writes to parameters under
no_grad in a joint trace, a backward inside the graph, and the forward
graph's ``input_updates``. Compared with eager on fresh data."""

import pytest
import torch
from aot_helpers import graph_of

from ember_aotgrad import CORE_OPS, aot_compile, is_core, trace_to_aten

aten = torch.ops.aten


def _capture_graphs():
    seen = []

    def compiler(gm, inputs):
        seen.append(gm)
        return gm

    return seen, compiler


FOREACH = {
    "add_list_alpha": lambda xs, ys, s: torch._foreach_add(xs, ys, alpha=0.5),
    "mul_scalar": lambda xs, ys, s: torch._foreach_mul(xs, 0.9),
    "mul_tensor": lambda xs, ys, s: torch._foreach_mul(xs, s[0]),
    "sqrt": lambda xs, ys, s: torch._foreach_sqrt([y.abs() for y in ys]),
    "lerp_scalar": lambda xs, ys, s: torch._foreach_lerp(xs, ys, 0.1),
    "pow_scalar_and_tensor": lambda xs, ys, s: torch._foreach_pow(0.9, ys),
    "norm": lambda xs, ys, s: torch._foreach_norm(xs),
}


@pytest.mark.parametrize("name", FOREACH)
def test_foreach_ops_decompose_per_tensor_like_eager(name):
    fn = FOREACH[name]

    def graph_fn(a, b, c, d, s):
        return tuple(fn([a, b], [c, d], s))

    torch.manual_seed(0)
    inputs = [torch.randn(3), torch.randn(2, 4), torch.randn(3), torch.randn(2, 4)]
    inputs.append(torch.rand(2))
    gm = graph_of(graph_fn, 5)
    aten_gm = trace_to_aten(gm, inputs)
    assert all(
        is_core(n.target) for n in aten_gm.graph.nodes if n.op == "call_function"
    )
    for got, want in zip(aten_gm(*inputs), graph_fn(*inputs)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_in_place_foreach_with_a_tensor_of_scalars():
    def step(p, q, a, b, scalars):
        torch._foreach_addcdiv_([p, q], [a, a], [b, b], scalars)
        return ()

    torch.manual_seed(0)
    inputs = [torch.randn(4), torch.randn(4), torch.randn(4), torch.rand(4) + 1]
    inputs.append(torch.tensor([0.5, -2.0]))
    expected = [t.clone() for t in inputs]
    step(*expected)
    compiled = aot_compile(graph_of(step, 5), inputs, lambda gm, _: gm)
    compiled(*inputs)
    for got, want in zip(inputs, expected):
        assert torch.equal(got, want)


def test_out_ops_are_functional_writes():
    def fn(a, b, out):
        torch.maximum(a, b, out=out)
        return (out * 2,)

    torch.manual_seed(0)
    inputs = [torch.randn(5), torch.randn(5), torch.zeros(5)]
    expected = [t.clone() for t in inputs]
    want = fn(*expected)
    aten_gm = trace_to_aten(graph_of(fn, 3), inputs)
    assert aten.maximum.out not in {n.target for n in aten_gm.graph.nodes}
    compiled = aot_compile(graph_of(fn, 3), inputs, lambda gm, _: gm)
    torch.testing.assert_close(compiled(*inputs)[0], want[0])
    assert torch.equal(inputs[2], expected[2])


def test_parameters_written_under_no_grad_in_a_joint_trace():
    """An optimizer step: parameters require grad, the writes happen under
    no_grad; nothing is differentiated, so no autograd node runs, and each
    write is an ``input_updates`` output."""

    def step(p, g, lr):
        with torch.no_grad():
            p.add_(g * lr)
        return ()

    p = torch.nn.Parameter(torch.randn(4))
    g, lr = torch.randn(4), torch.tensor(-0.1)
    expected = p.detach() + g * lr
    seen, compiler = _capture_graphs()
    compiled = aot_compile(graph_of(step, 3), [p, g, lr], compiler)
    compiled(p, g, lr)
    assert torch.equal(p.detach(), expected)
    assert p.grad_fn is None and p.is_leaf
    assert seen[0].meta["input_updates"] == ((0, 0),)


def test_written_with_grad_on_is_refused():
    def bad(p):
        p.add_(1)
        return ()

    from ember_aotgrad import AotGradError

    p = torch.nn.Parameter(torch.randn(3))
    with pytest.raises(AotGradError, match="in-place"):  # eager refuses it too
        aot_compile(graph_of(bad, 1), [p], lambda gm, _: gm)


def test_backward_inside_the_graph_then_an_update():
    """``torch.autograd.grad`` as a node: the backward ops are recorded in the
    same forward graph, and the update that reads the gradients follows."""

    def train(w, x):
        loss = (x @ w).tanh().sum()
        (grad,) = torch.autograd.grad((loss,), (w,), retain_graph=True)
        with torch.no_grad():
            w.add_(grad, alpha=-0.1)
        return (loss.detach(),)

    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(3, 2))
    x = torch.randn(4, 3)
    w_eager = torch.nn.Parameter(w.detach().clone())
    want = train(w_eager, x)
    seen, compiler = _capture_graphs()
    got = aot_compile(graph_of(train, 2), [w, x], compiler)(w, x)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(w, w_eager)
    forward = seen[0]
    assert all(
        n.target in CORE_OPS or is_core(n.target)
        for n in forward.graph.nodes
        if n.op == "call_function"
    )
    assert len(seen) == 1  # no backward graph: nothing left to differentiate

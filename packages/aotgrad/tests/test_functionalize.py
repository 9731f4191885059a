"""Functionalization: in-place ops and writes through views, input mutations
written back, and outputs that alias inputs returned as their views."""

import pytest
import torch
from aot_helpers import check_against_eager, graph_of

from ember_aotgrad import AotGradError, aot_compile, trace_to_aten
from ember_aotgrad.functionalize import mutated_args


def assert_functional(fn, inputs):
    gm = trace_to_aten(graph_of(fn, len(inputs)), inputs)
    for node in gm.graph.nodes:
        if isinstance(node.target, torch._ops.OpOverload):
            assert not mutated_args(node.target), node.format_node()
    return gm


def mutate_input(x):
    x.add_(1)
    return (x * 2,)


def write_through_select(x):
    x[0].mul_(2)
    return (x.sum(),)


def setitem_slice(x, y):
    x[:, 1] = y
    return (x + 1,)


def write_through_reshape(x):
    x.view(-1)[2] = 5.0
    return (x.clone(),)


def write_through_transpose_chain(x):
    x.t()[1].zero_()
    x.transpose(0, 1).unsqueeze(0)[0, 2].fill_(7.0)
    return (x * 1,)


def view_sees_later_write(x):
    y = x * 1
    row = y[1]
    y.add_(10)
    return (row * 2, y)


def write_into_split_and_unbind(x):
    a, b = x.split(2)
    a.mul_(3)
    x.unbind(0)[3].sub_(1)
    return (b + 0, x.sum(0))


def half_plus_float(x, y):
    x.add_(y)
    return (x.float(),)


@pytest.mark.parametrize(
    "fn, shapes",
    [
        (mutate_input, [(3, 4)]),
        (write_through_select, [(3, 4)]),
        (setitem_slice, [(3, 4), (3,)]),
        (write_through_reshape, [(3, 4)]),
        (write_through_transpose_chain, [(3, 4)]),
        (view_sees_later_write, [(3, 4)]),
        (write_into_split_and_unbind, [(4, 3)]),
    ],
)
def test_mutations_match_eager_and_graph_is_functional(fn, shapes):
    inputs = [torch.randn(s) for s in shapes]
    assert_functional(fn, inputs)
    check_against_eager(fn, inputs)


def test_in_place_that_casts_back_to_the_inputs_dtype():
    x, y = torch.randn(5).half(), torch.randn(5)
    check_against_eager(half_plus_float, [x, y], atol=1e-3, rtol=1e-3)


def test_mutated_buffer_alongside_inputs_that_require_grad():
    def fn(x, buf):
        buf.mul_(0.9).add_(x.detach().mean(0) * 0.1)
        return (torch.tanh(x) * buf,)

    compiled = check_against_eager(
        fn, [torch.randn(4, 3, requires_grad=True), torch.randn(3)]
    )
    assert compiled.backward_plan is not None


def test_outputs_aliasing_inputs_are_views_of_the_callers_tensors():
    def fn(x):
        return (x.view(-1), x[1], x, x.t().detach())

    compiled = aot_compile(graph_of(fn, 1), [torch.randn(3, 4)], lambda g, e: g)
    x = torch.randn(3, 4)
    flat, row, same, detached = compiled(x)
    assert same is x
    for out in (flat, row, detached):
        assert out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    row.fill_(3.0)
    assert torch.equal(x[1], torch.full((4,), 3.0))
    torch.testing.assert_close(detached, x.t())


def test_alias_outputs_keep_autograd_like_eager():
    def fn(x):
        return (x.view(-1), x.detach(), x * 2)

    x = torch.randn(2, 3, requires_grad=True)
    check_against_eager(fn, [x])
    compiled = aot_compile(graph_of(fn, 1), [x], lambda g, e: g)
    flat, detached, _ = compiled(x)
    assert flat.grad_fn is not None and not detached.requires_grad


def test_output_aliasing_a_mutated_input_sees_the_write():
    def fn(x):
        x.mul_(2)
        return (x.t(),)

    check_against_eager(fn, [torch.randn(3, 2)])


def test_inputs_sharing_memory_with_a_mutated_input_run_eagerly():
    def fn(x, y):
        x.add_(1)
        return (y * 2,)

    compiled = aot_compile(
        graph_of(fn, 2), [torch.randn(3), torch.randn(3)], lambda g, e: g
    )
    # Apart first, so that the check's memory of unshared addresses is filled;
    # then the same tensor twice, and a view of a tensor it already saw.
    b, c = torch.zeros(3), torch.zeros(3)
    (out,) = compiled(b, c)
    torch.testing.assert_close(out, torch.zeros(3))
    (out,) = compiled(b, b)
    torch.testing.assert_close(out, torch.full((3,), 4.0))
    torch.testing.assert_close(b, torch.full((3,), 2.0))
    (out,) = compiled(b, c)
    torch.testing.assert_close(out, torch.zeros(3))
    (out,) = compiled(b, b.view(3))
    torch.testing.assert_close(out, torch.full((3,), 8.0))


def test_in_place_on_an_input_that_requires_grad_is_refused():
    def fn(x):
        return (x.add_(1),)

    with pytest.raises(AotGradError):
        aot_compile(
            graph_of(fn, 1), [torch.randn(3, requires_grad=True)], lambda g, e: g
        )


def test_changing_an_inputs_shape_in_place_is_refused():
    def fn(x):
        x.t_()
        return (x + 1,)

    with pytest.raises(AotGradError, match="t_"):
        aot_compile(graph_of(fn, 1), [torch.randn(2, 3)], lambda g, e: g)


def test_in_place_view_op_on_an_intermediate():
    def fn(x):
        y = x + 1
        y.t_()
        y.unsqueeze_(0)
        y[0, 0].mul_(5)
        return (y, x * 3)

    check_against_eager(fn, [torch.randn(2, 3)])

"""Shared helpers for aotgrad tests: graphs from Python functions, and eager
comparisons of outputs, gradients and input mutations."""

import copy

import torch
import torch.fx

from ember_aotgrad import aot_compile, default_partition

aten = torch.ops.aten


def graph_of(fn, num_inputs):
    """A torch-level GraphModule with one node calling ``fn`` on its inputs.

    The recorder sees every aten op ``fn`` makes, as for a captured graph whose
    module calls were inlined.
    """
    graph = torch.fx.Graph()
    args = [graph.placeholder(f"x{i}") for i in range(num_inputs)]
    graph.output(graph.call_function(fn, tuple(args)))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def module_fn(model):
    """``(fn, state)``: fn(*inputs, *state) runs ``model`` with ``state`` as its
    parameters and buffers, returning a tuple."""
    names = [n for n, _ in model.named_parameters()] + [
        n for n, _ in model.named_buffers()
    ]
    state = [p for _, p in model.named_parameters()] + [
        b for _, b in model.named_buffers()
    ]

    def fn(*args):
        inputs, values = args[: len(args) - len(state)], args[len(args) - len(state) :]
        out = torch.func.functional_call(model, dict(zip(names, values)), inputs)
        return out if isinstance(out, tuple) else (out,)

    return fn, state


def clone_inputs(inputs):
    out = []
    for t in inputs:
        if isinstance(t, torch.Tensor):
            c = t.detach().clone()
            out.append(c.requires_grad_(t.requires_grad))
        else:
            out.append(copy.deepcopy(t))
    return out


def run_and_backward(fn, inputs, seed):
    """Outputs and input gradients of ``fn`` under a weighted-sum loss."""
    torch.manual_seed(seed)
    outs = fn(*inputs)
    float_outs = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
    if float_outs:
        gen = torch.Generator().manual_seed(1234)
        loss = sum((o * torch.randn(o.shape, generator=gen)).sum() for o in float_outs)
        loss.backward()
    grads = [t.grad if isinstance(t, torch.Tensor) else None for t in inputs]
    return outs, grads


def check_against_eager(
    fn, inputs, partitioner=default_partition, atol=1e-5, rtol=1e-4, seed=0, **kwargs
):
    """Compiles ``fn`` through aotgrad and asserts outputs, gradients and input
    mutations match eager; returns the compiled callable."""
    eager_inputs = clone_inputs(inputs)
    compiled_inputs = clone_inputs(inputs)
    compiled = aot_compile(
        graph_of(fn, len(inputs)),
        clone_inputs(inputs),
        lambda gm, example_inputs: gm,
        partitioner=partitioner,
        **kwargs,
    )
    expected, expected_grads = run_and_backward(fn, eager_inputs, seed)
    actual, actual_grads = run_and_backward(compiled, compiled_inputs, seed)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a, e, atol=atol, rtol=rtol)
            assert a.requires_grad == e.requires_grad
        else:
            assert a == e
    for a, e in zip(actual_grads, expected_grads):
        if e is None:
            assert a is None
        else:
            torch.testing.assert_close(a, e, atol=atol, rtol=rtol)
    for a, e in zip(compiled_inputs, eager_inputs):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a.detach(), e.detach(), atol=atol, rtol=rtol)
    return compiled

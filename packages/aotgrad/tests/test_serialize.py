"""save_compiled_aot / load_compiled_aot: a rebuilt callable matches eager (outputs,
input mutations, views of inputs, gradients) without tracing or compiling again."""

import pickle

import pytest
import torch
import torch.nn as nn
from aot_helpers import clone_inputs, graph_of, module_fn, run_and_backward

import ember_aotgrad.aot
from ember_aotgrad import (
    AotGradError,
    aot_compile,
    load_compiled_aot,
    save_compiled_aot,
)


class CountingCompiler:
    """Runs aten graphs with torch; records the example inputs of each compile."""

    def __init__(self):
        self.calls = []

    def __call__(self, gm, example_inputs):
        self.calls.append(
            [(t.shape, t.stride(), t.dtype, t.device) for t in example_inputs]
        )
        return gm


def no_tracing(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("load_compiled_aot traced a graph")

    monkeypatch.setattr(ember_aotgrad.aot, "trace", refuse)


def round_trip(fn, inputs, monkeypatch):
    compiler = CountingCompiler()
    compiled = aot_compile(graph_of(fn, len(inputs)), clone_inputs(inputs), compiler)
    data = save_compiled_aot(compiled, pickle.dumps)
    compiles = len(compiler.calls)
    no_tracing(monkeypatch)
    loaded = load_compiled_aot(data, graph_of(fn, len(inputs)), pickle.loads)
    assert len(compiler.calls) == compiles
    return loaded, compiler


def mutate_view_and_constants(x, y):
    y.add_(1.0)
    return torch.sin(x) * y, x.t(), x.shape, x.dtype, 3


def test_inference_round_trip_keeps_mutations_views_and_constants(monkeypatch):
    inputs = [torch.randn(3, 4), torch.randn(3, 4)]
    loaded, _ = round_trip(mutate_view_and_constants, inputs, monkeypatch)
    assert loaded.backward_plan is None
    for _ in range(2):
        fresh = [torch.randn(3, 4), torch.randn(3, 4)]
        eager_inputs, loaded_inputs = clone_inputs(fresh), clone_inputs(fresh)
        expected = mutate_view_and_constants(*eager_inputs)
        actual = loaded(*loaded_inputs)
        torch.testing.assert_close(actual[0], expected[0])
        torch.testing.assert_close(actual[1], expected[1])
        assert actual[1]._base is loaded_inputs[0]  # a real view of the input
        assert actual[2:] == expected[2:]
        torch.testing.assert_close(loaded_inputs[1], eager_inputs[1])


def test_training_round_trip_gives_eager_gradients(monkeypatch):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.LayerNorm(8), nn.Linear(8, 3))
    fn, state = module_fn(model)
    x = torch.randn(5, 6, requires_grad=True)
    loaded, compiler = round_trip(fn, [x, *state], monkeypatch)
    assert len(compiler.calls) == 2  # the backward was compiled before it ran
    assert loaded.backward_plan.graph is None
    for seed in range(2):
        fresh = [torch.randn(5, 6, requires_grad=True), *state]
        expected, expected_grads = run_and_backward(fn, clone_inputs(fresh), seed)
        actual, actual_grads = run_and_backward(loaded, clone_inputs(fresh), seed)
        torch.testing.assert_close(actual[0], expected[0])
        assert actual[0].requires_grad
        for a, e in zip(actual_grads, expected_grads):
            torch.testing.assert_close(a, e)


def test_backward_compiled_ahead_sees_the_layouts_of_a_real_backward():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    fn, state = module_fn(model)
    inputs = [torch.randn(5, 6, requires_grad=True), *state]
    lazy, ahead = CountingCompiler(), CountingCompiler()
    gm = graph_of(fn, len(inputs))
    compiled = aot_compile(gm, clone_inputs(inputs), lazy)
    run_and_backward(compiled, clone_inputs(inputs), seed=0)
    aot_compile(gm, clone_inputs(inputs), ahead).backward_plan.compile_now()
    assert ahead.calls[1] == lazy.calls[1]


def test_a_value_the_format_cannot_write_is_refused():
    def complex_constant(x):
        return x + 1, 1j

    compiled = aot_compile(
        graph_of(complex_constant, 1), [torch.randn(2)], lambda gm, inputs: gm
    )
    with pytest.raises(AotGradError, match="cannot serialize a complex"):
        save_compiled_aot(compiled, pickle.dumps)


def test_bytes_in_another_format_are_refused():
    compiled = aot_compile(
        graph_of(torch.cos, 1), [torch.randn(2)], lambda gm, inputs: gm
    )
    data = save_compiled_aot(compiled, pickle.dumps)
    gm = graph_of(torch.cos, 1)
    for bad in (b"short", b"X" + data[1:], data[:-3], data + b"\0"):
        with pytest.raises(ValueError):
            load_compiled_aot(bad, gm, pickle.loads)

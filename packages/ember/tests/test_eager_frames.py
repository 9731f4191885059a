"""A frame capture cannot take runs eagerly, with its reason recorded once, and the
user code it calls (helpers, methods, submodules) is still compiled."""

import warnings

import pytest
import torch
import torch.nn.functional as F

import ember
from ember_capture import CaptureError


class CountingBackend:
    """Counts the graphs it is given and runs each as captured."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm


def ops(gm):
    return sorted(
        getattr(n.target, "__name__", n.target)
        for n in gm.graph.nodes
        if n.op in ("call_function", "call_method")
    )


@pytest.fixture(autouse=True)
def _fresh():
    ember.reset()
    yield
    ember.reset()


def scale_shift(x, w):
    return torch.tanh(x) * w + 1.0


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class PrintsInTry(torch.nn.Module):
    """print() inside a try block: a graph break capture cannot resume after."""

    def __init__(self):
        super().__init__()
        self.mlp = Mlp()
        self.w = torch.nn.Parameter(torch.randn(8))
        self.norm = torch.nn.LayerNorm(8)  # a torch leaf module: runs as it is

    def forward(self, x):
        try:
            print("forward")
            y = self.mlp(x)
        except RuntimeError:
            y = x
        return self.norm(scale_shift(y, self.w)) + F.gelu(x)


PRINT_LINE = PrintsInTry.forward.__code__.co_firstlineno + 2


def test_try_block_frame_runs_eagerly_and_its_calls_compile(capsys):
    model = PrintsInTry()
    counter = CountingBackend()
    compiled = ember.compile(model, backend=counter)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            x = torch.randn(4, 8)
            torch.testing.assert_close(compiled(x), model(x))
    # the submodule and the helper, once each; the frame itself is never captured
    # again, and F.gelu and LayerNorm are not compiled as frames of their own
    assert len(counter.graphs) == 2
    forward = compiled._compiled_forward
    counters = forward.dispatcher.counters
    assert counters.compiles == 0 and counters.misses == counters.eager_calls == 3
    assert not forward.dispatcher.entries  # no entry: misses run the fallback
    (reason,) = forward.breaks
    assert reason.location == f"{__file__}:{PRINT_LINE}"
    assert "print()" in reason.reason
    assert "cannot resume inside a try/except/finally block" in reason.reason
    (warning,) = [str(w.message) for w in caught]
    assert "PrintsInTry.forward runs eagerly" in warning
    assert capsys.readouterr().out == "forward\n" * 6


def test_gradients_flow_through_the_compiled_calls(capsys):
    model = PrintsInTry()
    compiled = ember.compile(model, backend="aot_eager")
    x = torch.randn(3, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled(x).square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).square().sum().backward()
    # aotgrad's decomposed backwards sum in another order than eager's kernels:
    # float32 reassociation over gradients of size ~1 (seen up to 2.6e-5).
    for got, expected in zip(grads, [p.grad for p in model.parameters()]):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_explain_counts_the_graphs_of_the_calls(capsys):
    out = ember.explain(PrintsInTry(), backend="aot_eager")(torch.randn(2, 8))
    assert out.graph_count == 2 and out.graph_break_count == 1
    assert {"torch.tanh": 1, "operator.mul": 1, "operator.add": 1} in (
        out.ops_per_graph
    )
    (reason,) = out.break_reasons
    assert str(reason).startswith(f"{__file__}:{PRINT_LINE}: print()")


def decay(x):
    return x * 0.5 - 0.1


def shrink(x):
    while x.sum() > 0:  # a data-dependent while loop
        x = decay(x)
    return x


WHILE_LINE = shrink.__code__.co_firstlineno + 1


def test_data_dependent_while_loop_stays_bounded_and_compiles_its_calls():
    counter = CountingBackend()
    compiled = ember.compile(shrink, backend=counter)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for scale in (1.0, 10.0, 1000.0, 1.0):  # 2 to 15 iterations
            x = torch.rand(4) * scale
            torch.testing.assert_close(compiled(x), shrink(x))
    # the test before the loop (it resumes), then decay's graph: the loop body
    # runs in Python in the resume function, however many times it turns
    assert [ops(g) for g in counter.graphs] == [["gt", "sum"], ["mul", "sub"]]
    assert [r.location for r in compiled.breaks] == [f"{__file__}:{WHILE_LINE}"] * 2
    assert all("tensor's value" in r.reason for r in compiled.breaks)
    assert "cannot resume inside a while loop" in compiled.breaks[-1].reason


def test_fullgraph_still_raises_for_a_frame_that_runs_eagerly(capsys):
    compiled = ember.compile(PrintsInTry(), fullgraph=True)
    with pytest.raises(CaptureError, match="print"):
        compiled(torch.randn(2, 8))


def plain_or_printing(x, mode):
    if mode == "print":
        try:  # a break here cannot be resumed: the frame runs as Python
            print("printing")
        except ValueError:
            return x
    return torch.relu(x) * 2


def test_a_frame_that_ran_eagerly_leaves_the_compiled_entries_serving(capsys):
    compiled = ember.compile(plain_or_printing)
    x = torch.randn(6)
    compiled(x, "plain")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        compiled(x, "print")
    for _ in range(3):
        torch.testing.assert_close(compiled(x, "plain"), plain_or_printing(x, "plain"))
    compiled(x, "print")
    counters = compiled.dispatcher.counters
    assert len(compiled.dispatcher.entries) == 1  # the compiled one, no eager entry
    assert counters.hits == 3 and counters.eager_calls == 2 and counters.compiles == 1

"""The on-disk graph cache: a new process (or a fresh compile) loads what an earlier
one stored and matches eager; anything that changes the compiled code misses; a
damaged entry is deleted, compiled again and replaced, with a warning."""

import functools
import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import ember
from ember.cache import Uncacheable, custom_op_text, graph_hash


def mlp(x, w1, w2):
    return torch.tanh(F.gelu(x @ w1) @ w2).sum(-1)


def mlp_inputs(rows=4, dtype=torch.float32, requires_grad=False):
    return [
        torch.randn(rows, 6, dtype=dtype),
        torch.randn(6, 8, dtype=dtype, requires_grad=requires_grad),
        torch.randn(8, 3, dtype=dtype, requires_grad=requires_grad),
    ]


def compile_and_run(fn, args, tmp_path, backend="ember", **options):
    """A fresh compile (new dispatcher, empty memory) run once; its cache result."""
    compiled = ember.compile(
        fn, backend=backend, options={"cache_dir": tmp_path, **options}
    )
    out = compiled(*args)
    torch.testing.assert_close(out, fn(*args))
    return compiled.log.cache_results


_CHILD = """
import json, sys, torch, ember
from ember.demo import Block
torch.manual_seed(0)
model = Block(dim=16, heads=2).eval()
x = torch.randn(2, 5, 16)
compiled = ember.compile(model)
with torch.no_grad():
    diff = (compiled(x) - model(x)).abs().max().item()
print(json.dumps({
    "cache": compiled._compiled_forward.log.cache_results,
    "diff": diff,
    "frontend": sorted(m for m in ("torch._dynamo", "sympy") if m in sys.modules),
}))
"""


def start_child(cache_dir):
    env = dict(os.environ, EMBER_CACHE_DIR=str(cache_dir))
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def child_result(child):
    stdout, stderr = child.communicate(timeout=300)
    assert child.returncode == 0, stderr
    return json.loads(stdout.strip().splitlines()[-1])


def test_new_processes_store_at_once_then_load(tmp_path):
    cold = [start_child(tmp_path) for _ in range(2)]  # both write the same entry
    for result in map(child_result, cold):
        assert result["cache"] in (["miss"], ["hit"]) and result["diff"] < 1e-4
        # ember's meta rules answered every op: torch's Python meta kernels,
        # whose first run imports torch._dynamo and sympy, never ran
        assert result["frontend"] == []
    assert len(list((tmp_path / "graphs" / "artifacts").iterdir())) == 1
    warm = child_result(start_child(tmp_path))
    assert warm["cache"] == ["hit"] and warm["diff"] < 1e-4
    # Capture replayed the meta results the cold processes stored.
    assert len(list((tmp_path / "meta" / "artifacts").iterdir())) == 1
    assert warm["frontend"] == []


@pytest.mark.parametrize("backend", ["ember", "aot_eager"])
def test_a_fresh_compile_hits_and_matches_eager(tmp_path, backend):
    assert compile_and_run(mlp, mlp_inputs(), tmp_path, backend) == ["miss"]
    for _ in range(2):
        assert compile_and_run(mlp, mlp_inputs(), tmp_path, backend) == ["hit"]


def test_what_changes_the_code_misses(tmp_path):
    assert compile_and_run(mlp, mlp_inputs(), tmp_path) == ["miss"]
    changed = {
        "shape": (mlp, mlp_inputs(rows=5), {}),
        "dtype": (mlp, mlp_inputs(dtype=torch.float64), {}),
        "requires_grad": (mlp, mlp_inputs(requires_grad=True), {}),
        "codegen_target": (mlp, mlp_inputs(), {"codegen_target": "torch"}),
        "code": (lambda x, w1, w2: mlp(x, w1, w2) + 1, mlp_inputs(), {}),
    }
    for what, (fn, args, options) in changed.items():
        assert compile_and_run(fn, args, tmp_path, **options) == ["miss"], what
    with torch.no_grad():
        assert compile_and_run(mlp, mlp_inputs(requires_grad=True), tmp_path) == [
            "miss"
        ]


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(6, 8), torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(F.silu(self.fc1(x))).softmax(-1)


def test_training_graphs_round_trip_with_eager_gradients(tmp_path):
    torch.manual_seed(0)
    model = Tiny()
    for expected in ("miss", "hit", "hit"):
        compiled = ember.compile(model, options={"cache_dir": tmp_path})
        x = torch.randn(5, 6, requires_grad=True)
        x_eager = x.detach().clone().requires_grad_()
        weights = torch.randn(5, 2)
        (compiled(x) * weights).sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        (model(x_eager) * weights).sum().backward()
        torch.testing.assert_close(x.grad, x_eager.grad)
        for g, p in zip(grads, model.parameters()):
            torch.testing.assert_close(g, p.grad)
        model.zero_grad()
        assert compiled._compiled_forward.log.cache_results == [expected]


def test_a_truncated_entry_is_deleted_compiled_again_and_replaced(tmp_path):
    assert compile_and_run(mlp, mlp_inputs(), tmp_path) == ["miss"]
    [entry] = (tmp_path / "graphs" / "artifacts").glob("*.art")
    entry.write_bytes(entry.read_bytes()[:-7])
    with pytest.warns(UserWarning, match="is damaged"):
        assert compile_and_run(mlp, mlp_inputs(), tmp_path) == ["miss"]
    assert compile_and_run(mlp, mlp_inputs(), tmp_path) == ["hit"]


def transpose_in_place(x):
    x.t_()  # aotgrad refuses to change an input's shape; the graph runs as captured
    return x + 1


def test_a_hit_repeats_the_warnings_compiling_gave(tmp_path):
    for expected in ("miss", "hit"):
        compiled = ember.compile(transpose_in_place, options={"cache_dir": tmp_path})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            x = torch.randn(2, 3)
            torch.testing.assert_close(compiled(x.clone()), transpose_in_place(x))
        assert compiled.log.cache_results == [expected]
        [reason] = compiled.log.eager_graph_reasons
        assert "aten.t_.default" in reason
        assert [str(w.message) for w in caught] == [
            f"ember: a captured graph runs as captured, with torch: {reason}"
        ]


def test_the_graph_hash_covers_constants_and_refuses_submodules():
    def with_constant(value):
        root = torch.nn.Module()
        root.register_buffer("c", torch.full((2,), value))
        graph = torch.fx.Graph()
        x = graph.placeholder("x")
        graph.output((graph.call_function(torch.add, (x, graph.get_attr("c"))),))
        return torch.fx.GraphModule(root, graph)

    assert graph_hash(with_constant(1.0)) == graph_hash(with_constant(1.0))
    assert graph_hash(with_constant(1.0)) != graph_hash(with_constant(2.0))
    with pytest.raises(Uncacheable, match="submodule"):
        graph_hash(torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.ReLU())))


def test_an_unusable_cache_folder_does_not_fail_a_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = ember.compile(mlp, options={"cache_dir": blocked})
        args = mlp_inputs()
        torch.testing.assert_close(compiled(*args), mlp(*args))
    # One warning says why and where ember went instead; the kernels went there.
    (message,) = [str(w.message) for w in caught if "cache folder" in str(w.message)]
    fallback = tmp_path / "xdg" / "ember"
    assert f"{blocked} cannot be used: it is not a folder" in message
    assert f"uses {fallback} instead" in message
    assert list((fallback / "kernels").glob("*.so"))


def _decorate(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


@_decorate
def _doubled(x):
    return x * 2


@_decorate
def _sine(x):
    return x.sin()


def test_functions_that_share_a_wrapper_are_remembered_apart(tmp_path):
    """A decorator's wrapper is one code object for every function it wraps
    (transformers' can_return_tuple): what one function taught automatic
    dynamic is not applied to another."""
    doubled = ember.compile(_doubled, options={"cache_dir": tmp_path})
    for n in (4, 5):
        doubled(torch.randn(n))
    assert doubled.log.dynamic_reasons == [
        "L['args'][0].size(0) is dynamic: it was 4, now 5"
    ]
    sine = ember.compile(_sine, options={"cache_dir": tmp_path})
    sine(torch.randn(4))
    assert sine.log.dynamic_reasons == []
    again = ember.compile(_doubled, options={"cache_dir": tmp_path})
    again(torch.randn(4))
    assert "earlier run" in again.log.dynamic_reasons[0]


# A custom operator as transformers defines its MoE fallback: eager code the
# compiled graph calls, a fake function for its sizes, a Python backward.
@torch.library.custom_op("ember_cache_tests::row_scale", mutates_args=())
def row_scale(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * w.sum(-1, keepdim=True)


@row_scale.register_fake
def _row_scale_fake(x, w):
    return torch.empty_like(x)


def _row_scale_backward(ctx, grad):
    x, w = ctx.saved_tensors
    return grad * w.sum(-1, keepdim=True), (grad * x).sum(-1, keepdim=True).expand_as(w)


def _row_scale_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


row_scale.register_autograd(_row_scale_backward, setup_context=_row_scale_setup)


@torch.library.custom_op("ember_cache_tests::no_fake", mutates_args=())
def no_fake(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def uses_row_scale(x, w):
    return torch.relu(torch.ops.ember_cache_tests.row_scale(x.sin(), w)) * 2


def test_a_custom_operator_is_cached_where_no_gradient_is_traced(tmp_path):
    x, w = torch.randn(4, 3), torch.randn(4, 5, requires_grad=True)
    with torch.no_grad():
        assert compile_and_run(uses_row_scale, (x, w), tmp_path) == ["miss"]
        assert compile_and_run(uses_row_scale, (x, w), tmp_path) == ["hit"]
    # With a gradient to trace, the backward comes from the operator's Python
    # autograd formula, which the key cannot pin down.
    (result,) = compile_and_run(uses_row_scale, (x, w), tmp_path)
    assert result == (
        "not cached: the graph differentiates the custom operator "
        "ember_cache_tests::row_scale, whose backward is Python"
    )


def test_the_key_of_a_custom_operator_is_its_schema_and_fake_function():
    op = torch.ops.ember_cache_tests.row_scale
    text = custom_op_text(op, differentiable=False)
    assert text.startswith("ember_cache_tests::row_scale(Tensor x, Tensor w) -> Tensor")
    assert "_row_scale_fake" in text
    assert custom_op_text(op.default, differentiable=False) == text
    with pytest.raises(Uncacheable, match="no plain fake function"):
        custom_op_text(torch.ops.ember_cache_tests.no_fake, differentiable=False)
    with pytest.raises(Uncacheable, match="defined outside torch"):
        custom_op_text(uses_row_scale, differentiable=False)

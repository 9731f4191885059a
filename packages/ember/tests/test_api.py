"""The umbrella's public API: compile forms, backends, caching, explain, errors."""

import json
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import ember
from ember_capture import CaptureError


def thin(x, w, b):
    return torch.relu(x @ w + b).sum(-1)


def inputs(dtype=torch.float32):
    return (
        torch.randn(4, 3, dtype=dtype),
        torch.randn(3, 5, dtype=dtype),
        torch.randn(5, dtype=dtype),
    )


class CountingBackend:
    """A backend that counts compilations and runs the graph as captured."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm


@pytest.fixture(autouse=True)
def _fresh():
    ember.reset()
    yield
    ember.reset()


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "ember", CountingBackend()])
def test_every_backend_matches_eager(backend):
    compiled = ember.compile(thin, backend=backend)
    for _ in range(3):
        args = inputs()
        torch.testing.assert_close(compiled(*args), thin(*args))


def test_same_types_compile_once_new_dtype_compiles_again():
    counter = CountingBackend()
    compiled = ember.compile(thin, backend=counter)
    compiled(*inputs())
    compiled(*inputs())
    assert len(counter.graphs) == 1
    doubles = inputs(torch.float64)
    torch.testing.assert_close(compiled(*doubles), thin(*doubles))
    assert len(counter.graphs) == 2
    compiled(*inputs())
    compiled(*inputs(torch.float64))
    assert len(counter.graphs) == 2
    reasons = compiled.dispatcher.recompile_reasons
    assert reasons == ["L['x']: dtype changed from torch.float32 to torch.float64"]


def test_default_backend_counts_compiles_in_the_dispatcher():
    compiled = ember.compile(thin)
    compiled(*inputs())
    compiled(*inputs())
    compiled(*inputs(torch.float64))
    c = compiled.dispatcher.counters
    assert (c.compiles, c.hits, c.misses) == (2, 1, 2)


def test_reset_clears_every_cache():
    counter = CountingBackend()
    compiled = ember.compile(thin, backend=counter)
    compiled(*inputs())
    ember.reset()
    compiled(*inputs())
    assert len(counter.graphs) == 2


def test_decorator_forms():
    @ember.compile
    def a(x):
        return x.sin() + 1

    @ember.compile(backend="aot_eager", options={"recompile_limit": 3})
    def b(x):
        return x.cos() * 2

    x = torch.randn(5)
    torch.testing.assert_close(a(x), x.sin() + 1)
    torch.testing.assert_close(b(x), x.cos() * 2)
    assert a.__name__ == "a" and b.dispatcher.recompile_limit == 3


def test_methods_bound_and_decorated():
    class Scaler:
        def __init__(self, k):
            self.k = k

        @ember.compile
        def decorated(self, x):
            return x * self.k

        def plain(self, x):
            return x - self.k

    s2, s3 = Scaler(2.0), Scaler(3.0)
    x = torch.randn(4)
    torch.testing.assert_close(s2.decorated(x), x * 2)
    torch.testing.assert_close(s3.decorated(x), x * 3)  # self.k is guarded
    bound = ember.compile(s3.plain)
    torch.testing.assert_close(bound(x), x - 3)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)
        self.register_buffer("shift", torch.randn(4))

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x))) + self.shift


def test_module_wrapper_shares_state_with_the_original():
    model = MLP()
    compiled = ember.compile(model)
    assert isinstance(compiled, torch.nn.Module)
    assert list(compiled.state_dict()) == list(model.state_dict())
    assert all(a is b for a, b in zip(compiled.parameters(), model.parameters()))
    x = torch.randn(2, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        model.fc1.weight.mul_(0.5)  # updated weights are read on every call
        torch.testing.assert_close(compiled(x), model(x))
    compiled.eval()
    assert not model.training and not model.fc1.training


@pytest.mark.parametrize("called_first", [False, True])
@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_copies_of_a_compiled_module_are_compiled_modules_of_their_own(
    called_first, how
):
    import copy
    import pickle

    model = MLP()
    compiled = ember.compile(model, backend="aot_eager")
    x = torch.randn(2, 8)
    if called_first:
        compiled(x)
    twin = (
        copy.deepcopy(compiled)
        if how == "deepcopy"
        else pickle.loads(pickle.dumps(compiled))
    )
    assert type(twin) is type(compiled)
    assert all(a is not b for a, b in zip(twin.parameters(), model.parameters()))
    with torch.no_grad():  # an EMA-style update of the copy alone
        for p in twin.parameters():
            p.mul_(0.9)
        torch.testing.assert_close(twin(x), twin.original(x))
        torch.testing.assert_close(compiled(x), model(x))
    assert twin._compiled_forward.dispatcher.counters.compiles == 1


def test_a_model_holding_a_compiled_method_deep_copies():
    import copy

    model = MLP()
    model.forward = ember.compile(model.forward)
    x = torch.randn(2, 8)
    model(x)
    twin = copy.deepcopy(model)
    with torch.no_grad():
        twin.fc2.bias.add_(1)
        torch.testing.assert_close(twin(x), MLP.forward(twin, x))
        torch.testing.assert_close(model(x), MLP.forward(model, x))


def test_module_hooks_still_run():
    model = MLP()
    compiled = ember.compile(model)
    calls = []
    model.register_forward_hook(lambda m, i, o: calls.append(1) or o * 0)
    with torch.no_grad():
        out = compiled(torch.randn(2, 8))
    assert calls == [1] and torch.count_nonzero(out) == 0


def test_graph_needing_backward_keeps_correct_gradients():
    model = MLP()
    compiled = ember.compile(model)
    x = torch.randn(3, 8)
    out = compiled(x)
    out.sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for g, p in zip(got, model.parameters()):
        torch.testing.assert_close(g, p.grad)


def data_dependent(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


def cannot_resume(x):
    try:  # a break inside a try block cannot resume yet
        if x.sum() > 0:
            return x * 2
        return x - 1
    except RuntimeError:
        return x


def test_data_dependent_branch_breaks_the_graph_and_stays_correct():
    compiled = ember.compile(data_dependent)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a graph break is not a warning
        for sign in (1, -1, 1, -1):
            x = torch.rand(3) * sign
            torch.testing.assert_close(compiled(x), data_dependent(x))
    (reason,) = compiled.breaks
    assert reason.location == f"{__file__}:{data_dependent.__code__.co_firstlineno + 1}"


def normalized_by_item(x, y):
    peak = x.abs().max().item()
    return torch.tanh(y / peak) * 0.5 + peak


@pytest.mark.parametrize("backend", ["ember", "aot_eager"])
def test_item_values_reach_the_compiled_code_as_inputs(backend):
    before = ember.stats()["compiles"]
    compiled = ember.compile(normalized_by_item, backend=backend)
    for _ in range(10):
        x, y = torch.randn(5), torch.randn(4, 5)
        torch.testing.assert_close(
            compiled(x, y), normalized_by_item(x, y), rtol=0, atol=1e-6
        )
    # the function and its resume function, once each, whatever value .item() gives
    assert ember.stats()["compiles"] - before == 2


def test_unsupported_function_runs_eagerly_with_one_warning():
    compiled = ember.compile(cannot_resume)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for sign in (1, -1, 1):
            x = torch.rand(3) * sign
            torch.testing.assert_close(compiled(x), cannot_resume(x))
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1
    line = cannot_resume.__code__.co_firstlineno + 2
    assert f"{__file__}:{line}" in messages[0]


def test_fullgraph_raises_the_reason():
    compiled = ember.compile(data_dependent, fullgraph=True)
    with pytest.raises(CaptureError) as info:
        compiled(torch.randn(3))
    assert info.value.lineno == data_dependent.__code__.co_firstlineno + 1


def test_explain_counts_graphs_ops_and_fallbacks():
    out = ember.explain(thin)(*inputs())
    assert out.graph_count == 1 and out.graph_break_count == 0
    assert out.ops_per_graph == [
        {"operator.matmul": 1, "operator.add": 1, "torch.relu": 1, "Tensor.sum": 1}
    ]
    assert out.fallback_ops == []  # the C++ target generates code for every op
    (source,) = out.generated_code
    assert "extern" in source or "mm" in source
    assert "4 of 4 tensor ops ran in 1 graph(s) (100%), 0 as Python" in str(out)
    on_torch = ember.explain(thin, options={"codegen_target": "torch"})(*inputs())
    assert on_torch.fallback_ops == [
        "aten.add.Tensor",
        "aten.mm.default",
        "aten.relu.default",
        "aten.sum.dim_IntList",
    ]


def breaks_then_sums(x, n):
    y = x.sin() * n
    scale = y.sum().item()
    return (y @ y.T).relu().sum(-1) * scale


def test_explain_answers_the_four_questions():
    line = breaks_then_sums.__code__.co_firstlineno
    compiled = ember.compile(breaks_then_sums)
    compiled(torch.randn(4, 4), 2)
    compiled(torch.randn(5, 4), 2)  # a recompile before explain
    out = ember.explain(compiled, repeat=3)(torch.randn(6, 4), 2)
    text = str(out)
    # (1) what ran in graphs and what ran as Python, per function
    (frame,) = out.frames
    assert frame.frame == f"breaks_then_sums ({__name__})"
    assert (frame.in_graphs, frame.in_python) == (9, 1)  # .item() ran as Python
    assert (
        "1. Captured: 9 of 10 tensor ops ran in 2 graph(s) (90%), 1 as Python" in text
    )
    # (2) each break with its reason and the user's line
    assert "Tensor.item() reads the tensor's values into Python, at " in text
    assert f"at {__file__}:{line + 2}" in text
    # (3) the recompiles: this run's (none), and the compiled function's history
    assert out.recompiles == []
    assert out.history[1] == (
        f"breaks_then_sums ({__file__}:{line}): L['x']: size changed from "
        "[4, 4] to [5, 4] (size(0): 4 -> 5)"
    )
    # (4) compile seconds per stage against steady state
    assert {"capture", "aotgrad", "codegen"} <= set(out.stage_seconds())
    assert out.compiled_seconds > 0 and out.eager_seconds > 0
    assert "4. Compile time: " in text and "steady state: " in text
    assert (
        ember.explain(breaks_then_sums, repeat=0)(torch.randn(3, 4), 1).eager_seconds
        is None
    )


def test_explain_of_a_function_that_ran_in_python():
    out = ember.explain(cannot_resume)(torch.randn(3))
    assert out.graph_count == 0 and out.graph_break_count == 1
    (reason,) = out.break_reasons
    assert reason.location == f"{__file__}:{cannot_resume.__code__.co_firstlineno + 2}"


def test_explain_counts_a_break_and_the_graphs_around_it():
    out = ember.explain(data_dependent)(torch.rand(3))
    assert out.graph_count == 2 and out.graph_break_count == 1
    assert out.ops_per_graph == [
        {"Tensor.sum": 1, "operator.gt": 1},
        {"operator.mul": 1},
    ]


def prints_twice(x):
    y = x * 2
    print("first")
    z = y + 1
    print("second")
    return z.sum()


def test_a_break_met_again_by_a_recompile_is_counted_once():
    compiled = ember.compile(prints_twice)
    compiled(torch.randn(3))
    compiled(torch.randn(4))  # new shapes: every frame compiles again
    first = prints_twice.__code__.co_firstlineno
    assert [b.location for b in compiled.breaks] == [
        f"{__file__}:{first + 2}",
        f"{__file__}:{first + 4}",
    ]


def reads_a_set_after_a_break(x, obj):
    y = x.sin()
    n = len(y.tolist())
    return y * n * len(obj.items)


class HoldsASet:
    def __init__(self):
        self.items = {1, 2}


def test_warnings_name_the_users_file_line_and_variables():
    compiled = ember.compile(reads_a_set_after_a_break)
    x = torch.randn(3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = compiled(x, HoldsASet())
    torch.testing.assert_close(out, reads_a_set_after_a_break(x, HoldsASet()))
    messages = [w for w in caught if "ember" in str(w.message)]
    assert messages
    line = reads_a_set_after_a_break.__code__.co_firstlineno + 3
    for w in messages:
        text = str(w.message)
        assert w.filename == __file__, w.filename  # the user's call, not ember's
        assert f"{__file__}:{line}" in text, text
        for internal in ("<ember", "L[", "___", "__resume", "__ember"):
            assert internal not in text, text
        assert "reads_a_set_after_a_break (from line" in text


def helper_that_prints(y):
    y = y * 2
    print("inside the helper")
    return y + 1


def calls_a_helper_that_prints(x):
    y = helper_that_prints(x.sin())
    return y.cos(), json.dumps({"n": 3})


def test_explain_counts_a_break_inside_a_call_at_the_call_site_and_in_the_callee():
    out = ember.explain(calls_a_helper_that_prints)(torch.randn(3))
    # sin | the helper's mul | its add | cos: the caller breaks once at the call
    # (the helper then compiles on its own and breaks once at its print), and
    # json.dumps, library code that breaks inside, runs as it is.
    assert out.graph_count == 4 and out.graph_break_count == 3
    caller, callee, library = out.break_reasons
    first = calls_a_helper_that_prints.__code__.co_firstlineno
    printed = f"{__file__}:{helper_that_prints.__code__.co_firstlineno + 2}"
    assert caller.location == f"{__file__}:{first + 1}"
    assert caller.reason.startswith(f"a call into code that breaks at {printed} (print")
    assert callee.location == printed
    assert library.location == f"{__file__}:{first + 2}"
    assert "json" in library.reason


def test_bad_arguments_name_the_problem():
    with pytest.raises(TypeError, match="int"):
        ember.compile(42)
    with pytest.raises(ValueError, match="eager, aot_eager, ember"):
        ember.compile(thin, backend="inductor")
    with pytest.raises(ValueError, match="'fast_math'"):
        ember.compile(thin, options={"fast_math": True})
    with pytest.raises(ValueError, match="mode"):
        ember.compile(thin, mode="turbo")
    with pytest.raises(ValueError, match="dynamic"):
        ember.compile(thin, dynamic="yes")


def test_cache_dir_setting(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    assert ember.Config.from_options().cache_dir == tmp_path
    assert ember.Config.from_options({"cache_dir": "/x"}).cache_dir == Path("/x")
    monkeypatch.delenv("EMBER_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ember.Config.from_options().cache_dir == tmp_path / "xdg" / "ember"


def test_compile_new_sizes_after_setting(monkeypatch):
    assert ember.Config.from_options().compile_new_sizes_after == 2
    monkeypatch.setenv("EMBER_COMPILE_NEW_SIZES_AFTER", "1")
    assert ember.Config.from_options().compile_new_sizes_after == 1
    with pytest.raises(ValueError, match="compile_new_sizes_after must be"):
        ember.Config.from_options({"compile_new_sizes_after": 0})


def grows_input_in_place(x):
    x.unsqueeze_(0)  # aotgrad cannot functionalize this: the graph runs as captured
    return x * 2


def test_explain_reports_graphs_left_to_torch():
    x = torch.randn(3)
    out = ember.explain(grows_input_in_place, repeat=0)(x)  # x grows each call
    assert out.graph_count == 1 and x.shape == (1, 3)
    (reason,) = out.eager_graph_reasons
    assert reason.startswith("in-place view op aten.unsqueeze_.default")
    assert "\n" not in reason


offset = torch.ones(2)


class UsesGlobal(torch.nn.Module):
    def forward(self, t):
        return t + offset


def test_global_read_in_an_inlined_call_is_not_shadowed_by_a_parameter():
    inner = UsesGlobal()

    def fn(offset):
        return inner(offset * 0)

    x = torch.full((2,), 5.0)
    torch.testing.assert_close(ember.compile(fn)(x), fn(x))


def test_hook_added_after_compiling_is_honoured():
    inner = torch.nn.Linear(3, 3)

    def fn(x):
        return inner(x) + 1

    compiled = ember.compile(fn)
    x = torch.randn(2, 3)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), fn(x))
        handle = inner.register_forward_hook(lambda m, i, o: o * 0)
        torch.testing.assert_close(compiled(x), fn(x))  # a break at the hooked call
        handle.remove()
        torch.testing.assert_close(compiled(x), fn(x))
    assert compiled.dispatcher.recompile_reasons == [
        "C['inner']: a forward or backward hook was registered"
    ]


def test_stats_count_calls_compiles_and_stage_times():
    before = ember.stats()
    compiled = ember.compile(thin)
    compiled(*inputs())
    compiled(*inputs())
    after = ember.stats()
    assert after["calls"] - before["calls"] == 2
    assert after["compiles"] - before["compiles"] == 1
    assert after["hits"] - before["hits"] == 1
    assert after["compile_seconds"]["capture"] > before["compile_seconds"].get(
        "capture", 0.0
    )


def test_guards_run_in_the_runtime_checker():
    compiled = ember.compile(thin)
    compiled(*inputs())
    (entry,) = compiled.dispatcher.entries
    x, w, b = inputs()
    assert entry.check({"x": x, "w": w, "b": b})
    assert not entry.check({"x": x.double(), "w": w, "b": b})
    assert entry.failure({"x": x[:2], "w": w, "b": b}) == (
        "L['x']: size changed from [4, 3] to [2, 3] (size(0): 4 -> 2)"
    )


def test_a_tensor_read_through_an_import_compiles_once(monkeypatch):
    holder = types.ModuleType("ember_test_weights")
    holder.w = torch.randn(3)
    monkeypatch.setitem(sys.modules, "ember_test_weights", holder)

    def scaled(x):
        import ember_test_weights

        return x * ember_test_weights.w

    compiled = ember.compile(scaled)
    for _ in range(3):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), scaled(x))
    # the tensor guard reads sys.modules by the name the checks give it
    assert len(compiled.log.compiles) == 1


def test_profile_reports_the_kernels_of_a_forward_and_its_backward():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
    compiled = ember.compile(model)
    x = torch.randn(4, 8)
    compiled(x).sum().backward()
    with ember.profile(measure_bandwidth=False) as report:
        out = compiled(x)
        out.sum().backward()
    torch.testing.assert_close(out, model(x))
    titles = [graph.title.split(",")[0] for graph in report.graphs]
    assert titles == ["ForwardGraph", "BackwardGraph"]
    for graph in report.graphs:
        assert graph.calls == 1
        assert any(row.kind == "loop" for row in graph.rows)

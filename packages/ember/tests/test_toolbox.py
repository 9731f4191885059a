"""torch.compiler's toolbox in ember, each against the torch.compile behaviour
it copies: disable, allow_in_graph, set_stance, is_compiling, list_backends,
and compiling a module in place (compile_module_, as nn.Module.compile())."""

import copy
import threading
import warnings

import pytest
import torch

import ember
import ember_runtime
from ember_runtime import RecompileError


def _compiles(compiled) -> int:
    return compiled.dispatcher.counters.compiles


@pytest.fixture(autouse=True)
def default_stance():
    yield
    ember.set_stance("default")


@ember.disable
def _eager_helper(x):
    return x.tolist()


def test_disable_a_function_breaks_the_graph_and_runs_it_as_python():
    inner = ember.compile(lambda y: y * 2)

    @ember.disable
    def calls_a_compiled_function(x):
        return inner(x) + 1

    def fn(x):
        return x.sin() * len(_eager_helper(x)) + calls_a_compiled_function(x)

    compiled = ember.compile(fn)
    x = torch.randn(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a disabled function is no failure
        torch.testing.assert_close(compiled(x), fn(x))
    assert compiled.breaks[0].reason.startswith(
        "calling _eager_helper, which is marked never to be captured"
    )
    assert _compiles(inner) == 0  # recursive: what it calls runs as Python too
    direct = ember.compile(_eager_helper)
    assert direct(x) == x.tolist() and _compiles(direct) == 0


def test_disable_as_a_context_manager_and_decorator():
    compiled = ember.compile(lambda x: x.cos())
    x = torch.randn(4)
    with ember.disable():
        torch.testing.assert_close(compiled(x), x.cos())
    assert _compiles(compiled) == 0

    @ember.disable()
    def outer(x):
        return compiled(x)

    outer(x)
    assert _compiles(compiled) == 0
    compiled(x)
    assert _compiles(compiled) == 1


def _clamped_norm(x):
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-6)


def test_allow_in_graph_puts_one_call_in_the_graph():
    ember.allow_in_graph(_clamped_norm)

    def fn(x):
        return _clamped_norm(x * 2) + 1

    compiled = ember.compile(fn)
    x = torch.randn(3, 5, requires_grad=True)
    torch.testing.assert_close(compiled(x), fn(x))
    (gm,) = compiled.log.graphs
    assert sum(n.target is _clamped_norm for n in gm.graph.nodes) == 1
    assert "norm" not in gm.code.replace("_clamped_norm", "")
    got = torch.autograd.grad(compiled(x).sum(), x)[0]
    torch.testing.assert_close(got, torch.autograd.grad(fn(x).sum(), x)[0])


def test_set_stance_force_eager_as_function_context_and_decorator():
    compiled = ember.compile(lambda x: x + 1)
    x = torch.randn(2)
    ember.set_stance("force_eager")
    compiled(x)
    ember.set_stance("default")
    assert _compiles(compiled) == 0
    with ember.set_stance("force_eager"):
        compiled(x)
    assert _compiles(compiled) == 0

    @ember.set_stance("force_eager")
    def eager_caller(x):
        return compiled(x)

    compiled(x)  # decorating changed nothing
    assert _compiles(compiled) == 1
    eager_caller(torch.randn(7))  # a new size, but no recompile
    assert _compiles(compiled) == 1


def test_eager_and_fail_on_recompile():
    compiled = ember.compile(lambda x: x * 3, dynamic=False)
    compiled(torch.randn(2))
    with ember.set_stance("eager_on_recompile"):
        torch.testing.assert_close(compiled(torch.ones(5)), torch.full((5,), 3.0))
        compiled(torch.randn(2))  # the entry that matches still runs
    assert _compiles(compiled) == 1
    with (
        ember.set_stance("fail_on_recompile"),
        pytest.raises(RecompileError, match=r"size changed from \[2\] to \[6\]"),
    ):
        compiled(torch.randn(6))
    with pytest.raises(ValueError, match="valid stances: 'default', 'force_eager'"):
        ember.set_stance("sometimes")


def test_is_compiling_and_list_backends():
    def fn(x):
        return x + 1 if ember.is_compiling() else x - 1

    compiled = ember.compile(fn)
    x = torch.zeros(3)
    assert compiled(x).tolist() == [1.0] * 3
    assert fn(x).tolist() == [-1.0] * 3 and not ember.is_compiling()
    with ember.set_stance("force_eager"):
        assert compiled(x).tolist() == [-1.0] * 3
    assert ember.list_backends() == ["aot_eager", "eager", "ember"]


def test_compile_module_in_place():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
    keys = list(model.state_dict())
    want = model(torch.ones(2, 4))
    ember.compile_module_(model)
    assert type(model) is torch.nn.Sequential and list(model.state_dict()) == keys
    compiled = model._compiled_call_impl
    x = torch.randn(3, 4)
    torch.testing.assert_close(model(x), model[1](model[0](x)))
    torch.testing.assert_close(model(torch.ones(2, 4)), want)
    model[0].register_forward_hook(lambda mod, args, out: out * 2)
    torch.testing.assert_close(model(x), model[1](model[0](x)))  # hooks captured
    assert _compiles(compiled) == 3  # the new size, then the hook
    twin = copy.deepcopy(model)
    torch.testing.assert_close(twin(x), model(x))
    assert twin._compiled_call_impl is not compiled
    with pytest.raises(TypeError, match=r"takes an nn\.Module"):
        ember.compile_module_(lambda x: x)


def test_disable_is_per_thread_and_takes_parentheses():
    compiled = ember.compile(lambda x: x * 2)
    inside, done = threading.Event(), threading.Event()

    @ember.disable()  # torch's spelling with parentheses: a decorator
    def waits(x):
        inside.set()
        done.wait(timeout=30)
        return compiled(x)

    worker = threading.Thread(target=waits, args=(torch.randn(3),))
    worker.start()
    inside.wait(timeout=30)
    compiled(torch.randn(3))  # another thread still compiles
    done.set()
    worker.join()
    assert _compiles(compiled) == 1 and compiled.dispatcher.counters.calls == 1

    def fn(x):
        return x * len(waits_not(x))

    @ember.disable(recursive=False)
    def waits_not(x):
        return x.tolist()

    breaks = ember.compile(fn)
    breaks(torch.randn(2))
    assert "marked never to be captured" in breaks.breaks[0].reason


def test_a_stance_decorator_puts_back_the_stance_it_found():
    @ember.set_stance("force_eager")
    def eager_inside():
        return ember_runtime.get_stance()

    ember.set_stance("fail_on_recompile")
    assert eager_inside() is ember_runtime.Stance.FORCE_EAGER
    assert ember_runtime.get_stance() is ember_runtime.Stance.FAIL_ON_RECOMPILE

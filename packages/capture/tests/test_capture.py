"""Capture on straight-line programs: the transformed function run with the captured
graph itself (no other stage) must return what eager returns."""

import builtins
import math
import sys
import types

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_tree_equal

import ember_capture
from ember_capture import CaptureError, GuardKind, capture

SCALE = 2.0


def run_captured(fn, *args, **kwargs):
    result = capture(fn, *args, **kwargs)
    compiled = [g.gm for g in result.graphs]
    return result, result.build(compiled)(*args, **kwargs)


def run_source(source: str, namespace: dict, *args):
    """Define ``fn`` from ``source`` with ``namespace`` as its globals, and run
    it captured on ``args``: the capture and the result."""
    exec(source, namespace)
    return run_captured(namespace["fn"], *args)


def assert_same(fn, *args, **kwargs):
    expected = fn(*args, **kwargs)
    result, actual = run_captured(fn, *args, **kwargs)
    assert_tree_equal(actual, expected)
    return result


def test_thin_path_program():
    result = assert_same(
        lambda x, w, b: torch.relu(x @ w + b).sum(-1),
        torch.randn(4, 3),
        torch.randn(3, 5),
        torch.randn(5),
    )
    assert len(result.graphs) == 1
    ops = [n.target for n in result.graphs[0].gm.graph.nodes if n.op != "placeholder"]
    assert torch.relu in ops


def helper(x, y=3.0):
    return x * y + SCALE


def test_inlines_user_functions_with_defaults_and_globals():
    def fn(x):
        return helper(x) - helper(x, y=0.5)

    result = assert_same(fn, torch.randn(5))
    names = {g.source.name() for g in result.guards if g.source is not None}
    # The inlined helper's global is guarded through the helper's own globals.
    assert "G['helper'].__globals__['SCALE']" in names


def test_tensor_methods_operators_and_metadata_constants():
    def fn(x):
        n = x.shape[0]
        y = x.view(n, -1).transpose(0, 1).contiguous()
        z = (-y) ** 2 / (x.size(-1) + 1) % 3
        return z.mean(dim=0, keepdim=True), x.dtype, x.ndim, len(x)

    assert_same(fn, torch.randn(4, 6))


def test_functional_calls_kwargs_star_args_and_unpacking():
    def fn(x, *rest, alpha=0.5):
        a, b = rest
        parts = [x, a, b]
        return F.gelu(torch.cat(parts, dim=-1), approximate="tanh") * alpha

    assert_same(fn, torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 1), alpha=2.0)


def test_returns_nested_structures_and_constants():
    def fn(x):
        return [x + 1, (x * 2, "tag", None)], 3, math.pi

    result = assert_same(fn, torch.randn(3))
    assert "math" not in result.transformed_source  # pi is a literal


def test_returning_an_input_unchanged_needs_no_graph():
    result = assert_same(lambda x, y: (y, x), torch.randn(2), torch.randn(3))
    assert result.graphs == ()


def test_closure_variables_are_read_and_guarded():
    w = torch.randn(3, 3)
    k = 4

    def fn(x):
        return x @ w * k

    result = assert_same(fn, torch.randn(2, 3))
    names = {g.source.name() for g in result.guards if g.source is not None}
    assert {"C['w']", "C['k']"} <= names


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.scale = 0.5

    def forward(self, x):
        return self.norm(F.silu(self.fc(x))) * self.scale


def test_module_forward_inlined_and_parameters_lifted():
    block = Block()
    x = torch.randn(3, 4)
    result = capture(block.forward, x)
    graph = result.graphs[0]
    sources = [s.name() for s in graph.input_sources]
    assert sources == [
        "L['x']",
        "L['self'].fc.weight",
        "L['self'].fc.bias",
        "L['self'].norm.weight",
        "L['self'].norm.bias",
    ]
    assert all(isinstance(t, torch.Tensor) for t in graph.example_inputs)
    out = result.build([graph.gm])(block, x)
    torch.testing.assert_close(out, block(x))
    guards = [str(g) for g in result.guards]
    assert "L['self'].scale == 0.5" in guards


def test_guards_print_and_fail_with_reasons():
    def fn(x, n, flag):
        return x * n, flag

    x = torch.randn(2, 3)
    result = capture(fn, x, 3, True)
    kinds = {g.kind for g in result.guards}
    assert {GuardKind.TENSOR_MATCH, GuardKind.EQUALS_MATCH} <= kinds
    check = result.guard_checker()
    assert check.check({"x": torch.randn(2, 3), "n": 3, "flag": True})
    cases = {
        "L['x']: dtype changed from torch.float32 to torch.float64": (
            x.double(),
            3,
            True,
        ),
        "L['x']: size changed from [2, 3] to [3, 2]"
        " (size(0): 2 -> 3, size(1): 3 -> 2)": (torch.randn(3, 2), 3, True),
        "L['x']: stride changed from [3, 1] to [1, 2]": (
            x.t().contiguous().t(),
            3,
            True,
        ),
        "L['n']: value changed from 3 to 4": (x, 4, True),
        "L['n']: value changed from 3 to 3.0": (x, 3.0, True),
        "L['x']: requires_grad changed from False to True": (
            x.clone().requires_grad_(),
            3,
            True,
        ),
    }
    for reason, (a, n, flag) in cases.items():
        f_locals = {"x": a, "n": n, "flag": flag}
        assert not check.check(f_locals)
        assert check.failure(f_locals) == reason


def test_grad_mode_is_guarded():
    result = capture(lambda x: x + 1, torch.randn(2))
    check = result.guard_checker()
    assert check.check({"x": torch.randn(2)})
    with torch.no_grad():
        assert not check.check({"x": torch.randn(2)})
        assert "torch global state changed" in check.failure({"x": torch.randn(2)})


def test_global_rebinding_is_guarded():
    namespace = {"torch": torch}
    exec("def fn(x):\n    return x * factor\n", namespace)
    namespace["factor"] = 2.0
    result = capture(namespace["fn"], torch.randn(3))
    check = result.guard_checker()
    assert check.check({"x": torch.randn(3)})
    namespace["factor"] = 3.0
    assert check.failure({"x": torch.randn(3)}) == (
        "G['factor']: value changed from 2.0 to 3.0"
    )


@pytest.mark.parametrize("name", ["len", "abs"])
def test_builtin_shadowed_by_a_global_fails_its_guard(name):
    """Each builtin the code reads through one globals dict is guarded: the
    guards were keyed by the dict alone, so the second one's was dropped."""
    namespace = {"torch": torch}
    exec("def fn(x):\n    return x * len(x) + abs(-2)\n", namespace)
    result = capture(namespace["fn"], torch.randn(3))
    check = result.guard_checker()
    assert check.check({"x": torch.randn(3)})
    namespace[name] = lambda v: 7
    assert check.failure({"x": torch.randn(3)}) == (
        f"G: a module global '{name}' now shadows the builtin"
    )


def test_a_patched_builtin_fails_its_guard(monkeypatch):
    namespace = {"torch": torch}
    exec("def fn(x):\n    return x * abs(-2)\n", namespace)
    result = capture(namespace["fn"], torch.randn(3))
    check = result.guard_checker()
    assert check.check({"x": torch.randn(3)})
    monkeypatch.setattr(builtins, "abs", lambda v: 100)
    assert check.failure({"x": torch.randn(3)}).startswith(
        "sys.modules['builtins'].abs: object changed"
    )


def test_a_function_with_its_own_builtins_is_not_captured():
    """Python reads a function's builtins from its globals' ``__builtins__``:
    one of its own is not ember's to fold (the function runs as Python)."""
    own = {**vars(builtins), "abs": lambda v: 100}
    namespace = {"torch": torch, "__builtins__": own}
    exec("def fn(x):\n    return x * abs(-2)\n", namespace)
    with pytest.raises(CaptureError, match="'abs' of a function with its own"):
        capture(namespace["fn"], torch.randn(3))


def test_a_builtin_patched_inside_the_function_is_read_patched():
    namespace = {"torch": torch, "builtins": builtins, "real": builtins.abs}
    namespace["fake"] = lambda v: 100
    source = (
        "def fn(x):\n    builtins.abs = fake\n    r = x * abs(-2)\n"
        "    builtins.abs = real\n    return r\n"
    )
    x = torch.randn(3)
    _, got = run_source(source, namespace, x)
    torch.testing.assert_close(got, x * 100)
    assert builtins.abs is namespace["real"]


def test_a_copy_of_the_builtins_holding_the_real_ones_is_captured():
    """torch.package gives each module a copy of the builtins with its own
    ``__import__``: the builtins it holds as they are are read, and guarded
    there too."""
    own = {**vars(builtins), "__import__": lambda *a, **k: None}
    namespace = {"torch": torch, "__builtins__": own}
    x = torch.randn(3)
    result, got = run_source("def fn(x):\n    return x * abs(-2)\n", namespace, x)
    torch.testing.assert_close(got, x * 2)
    check = result.guard_checker()
    assert check.check({"x": x})
    own["abs"] = lambda v: 100
    assert not check.check({"x": x})


def test_an_inlined_function_given_new_code_fails_its_guards():
    """``helper.__code__ = ...`` keeps the function object, so its identity
    guard still holds: its code is guarded too."""
    namespace = {"torch": torch}
    exec(
        "def helper(x):\n    return x * 2\n"
        "def other(x):\n    return x * 3\n"
        "def fn(x):\n    return helper(x) + 1\n",
        namespace,
    )
    result = capture(namespace["fn"], torch.randn(3))
    check = result.guard_checker()
    assert check.check({"x": torch.randn(3)})
    namespace["helper"].__code__ = namespace["other"].__code__
    assert check.failure({"x": torch.randn(3)}).startswith("G['helper'].__code__: ")


def test_one_module_global_read_by_several_inlined_functions_is_guarded_once():
    """Two helpers of one module read its ``mode`` through their own
    ``__globals__``: the one dict (a function's globals never change), so the
    compiled check tests ``mode`` once, and still fails when it changes. Two
    names of one function stay two guards: each pins its own name."""
    namespace = {"torch": torch, "mode": "double"}
    exec(
        "def one(x):\n    return x * 2 if mode == 'double' else x\n"
        "def two(x):\n    return x + 1 if mode == 'double' else x\n"
        "def fn(x):\n    return first(x) + second(x)\n",
        namespace,
    )
    namespace["first"], namespace["second"] = namespace["one"], namespace["two"]
    result = capture(namespace["fn"], torch.randn(3))
    check = result.guard_checker()
    modes = [g for g in result.guards if g.source and "'mode'" in g.source.name()]
    assert len(modes) == 2
    assert len([g for g in check.guards if g in modes]) == 1
    assert check.check({"x": torch.randn(3)})
    namespace["mode"] = "single"
    assert check.failure({"x": torch.randn(3)}) == (
        "G['first'].__globals__['mode']: value changed from 'double' to 'single'"
    )
    namespace["mode"] = "double"
    assert check.check({"x": torch.randn(3)})
    namespace["second"] = namespace["one"]
    assert not check.check({"x": torch.randn(3)})


_HELPERS = """
mode = "double"
def one(x):
    return x * 2 if mode == "double" else x - 7
def two(x):
    return x * 3
def swap():
    global one
    one = two
"""


@pytest.mark.parametrize(
    "body",
    [
        # a ``global`` statement in the module's function, then an attribute read
        "a = helpers.one(x)\n    helpers.swap()\n    return a + helpers.one(x)",
        # an attribute write on the module, then its function's global read
        "a = helpers.one(x)\n    helpers.mode = 'one'\n    return a + helpers.one(x)",
    ],
    ids=["global_statement", "attribute_write"],
)
def test_a_module_global_written_one_way_is_read_the_other(body):
    """A module's globals are its attributes: a write either way is what a
    later read either way sees, in the graph and after the call."""

    def fresh():
        helpers = types.ModuleType("helpers")
        exec(_HELPERS, vars(helpers))
        namespace = {"helpers": helpers}
        exec(f"def fn(x):\n    {body}\n", namespace)
        return namespace["fn"], helpers

    x = torch.randn(3)
    fn, helpers = fresh()
    want, want_state = fn(x), (helpers.one.__name__, helpers.mode)
    fn, helpers = fresh()
    _, got = run_captured(fn, x)
    torch.testing.assert_close(got, want)
    assert (helpers.one.__name__, helpers.mode) == want_state


def test_a_global_written_in_a_module_imported_inside_the_function(monkeypatch):
    """The write is replayed into the module's globals as the import found
    them (the replay named the modules table without binding it)."""
    helpers = types.ModuleType("ember_test_helpers")
    exec(
        "mode = 'double'\ndef set_mode(m):\n    global mode\n    mode = m\n",
        vars(helpers),
    )
    monkeypatch.setitem(sys.modules, "ember_test_helpers", helpers)
    source = (
        "def fn(x):\n    import ember_test_helpers\n"
        "    ember_test_helpers.set_mode('minus')\n    return x * 2\n"
    )
    x = torch.randn(3)
    _, got = run_source(source, {"torch": torch}, x)
    torch.testing.assert_close(got, x * 2)
    assert helpers.mode == "minus"


def test_a_module_namespace_is_not_read_as_a_dict():
    """``helpers.__dict__['k'] = 5`` then a helper reading ``k``: capture
    tracks a module's globals by name, so its namespace read as a dict is left
    to Python (the helper read the old ``k``)."""
    helpers = types.ModuleType("helpers")
    exec("k = 1\ndef get():\n    return k\n", vars(helpers))
    namespace = {"torch": torch, "helpers": helpers}
    exec(
        "def fn(x):\n    helpers.__dict__['k'] = 5\n    return x * helpers.get()\n",
        namespace,
    )
    with pytest.raises(CaptureError, match="a module's globals, as a dict"):
        capture(namespace["fn"], torch.randn(3))


def test_a_guard_on_an_object_that_computes_its_names_prints():
    """torch.classes raises RuntimeError for every name it does not know."""
    guard = ember_capture.Guard(
        GuardKind.ID_MATCH, ember_capture.LocalSource("m"), torch.classes
    )
    assert str(guard) == "L['m'] is <_Classes torch.classes>"


def test_transformed_code_has_the_original_signature():
    def fn(a, /, b, *args, c, d=2, **kwargs):
        return a + b + c

    x = torch.randn(2)
    result = capture(fn, x, x, c=x)
    assert result.code.co_varnames[:6] == ("a", "b", "c", "d", "args", "kwargs")
    assert result.code.co_name == "fn"
    out = result.build([g.gm for g in result.graphs])(x, x, c=x)
    torch.testing.assert_close(out, fn(x, x, c=x))


def test_unsupported_construct_breaks_the_graph_at_the_users_line():
    def fn(x):
        if x.sum() > 0:
            return x
        return -x

    result = capture(fn, torch.randn(3))
    err = result.break_reason
    assert isinstance(err, CaptureError)
    assert err.filename == __file__
    assert err.lineno == fn.__code__.co_firstlineno + 1
    assert f"{__file__}:{err.lineno}" in str(err)
    run = result.build([g.gm for g in result.graphs])
    for sign in (1.0, -1.0):
        x = torch.rand(3) * sign
        torch.testing.assert_close(run(x), fn(x))


def test_data_dependent_op_breaks_instead_of_guessing():
    result = capture(lambda x: x.item() + 1, torch.randn(1))
    assert "item" in result.break_reason.reason
    x = torch.randn(1)
    assert result.build([g.gm for g in result.graphs])(x) == x.item() + 1


def test_global_side_effect_functions_are_never_run_at_capture():
    x = torch.randn(2)
    state = torch.random.get_rng_state()
    result = capture(lambda x: torch.manual_seed(0) and x, x)
    assert "manual_seed" in result.break_reason.reason
    assert torch.equal(torch.random.get_rng_state(), state)


def test_module_with_backward_hooks_is_not_inlined():
    lin = torch.nn.Linear(2, 2)
    lin.register_full_backward_hook(lambda m, gi, go: None)

    def fn(x):
        return lin(x) + 1

    x = torch.randn(1, 2)
    result = capture(fn, x)
    assert "that has backward or global hooks" in result.break_reason.reason
    with torch.no_grad():
        torch.testing.assert_close(
            result.build([g.gm for g in result.graphs])(x), fn(x)
        )


def test_nothing_runs_for_real_during_capture():
    calls = []

    class Spy(torch.nn.Module):
        def forward(self, x):
            return x.add_(1)

    x = torch.zeros(3)
    capture(Spy().forward, x)
    assert torch.equal(x, torch.zeros(3)) and calls == []


def test_capture_rejects_non_functions():
    with pytest.raises(TypeError, match="int"):
        capture(42)


class Config:
    def __init__(self, scale):
        self.scale = scale

    @property
    def double(self):
        return self.scale * 2

    def apply(self, x):
        return x * self.double


def test_user_objects_attributes_properties_methods_and_isinstance():
    def fn(x, cfg):
        if_config = isinstance(cfg, Config)
        return cfg.apply(x) + cfg.scale, if_config

    assert_same(fn, torch.randn(3), Config(1.5))
    result = capture(fn, torch.randn(3), Config(1.5))
    guards = [str(g) for g in result.guards]
    assert "type(L['cfg']) is Config" in guards and "L['cfg'].scale == 1.5" in guards


def test_break_that_cannot_resume_raises_with_a_location():
    def fn(x):
        try:  # resuming inside a try block is not supported yet
            return x.item()
        except ValueError:
            return 0.0

    with pytest.raises(CaptureError) as info:
        capture(fn, torch.randn(1))
    assert info.value.filename == __file__
    assert info.value.lineno == fn.__code__.co_firstlineno + 2


def test_in_place_operator_on_a_python_number_takes_a_tensor():
    # T5's attention: ``position_bias = 0; position_bias += tensor``.
    def accumulate(x, y):
        total = 0
        total += x * 2
        scale = 1.0
        scale *= y
        pair = (1,)
        pair += (2,)
        return total, scale, pair

    result = assert_same(accumulate, torch.randn(3), torch.randn(3))
    assert len(result.graphs) == 1


def test_a_factory_given_device_none_makes_the_default_device():
    """nn.Transformer.generate_square_subsequent_mask passes device=None."""

    def fn(x):
        return x + torch.full((3, 3), 1.0, device=None)

    result = capture(fn, torch.randn(3, 3))
    assert result.break_reason is None
    x = torch.randn(3, 3)
    torch.testing.assert_close(result.graphs[0].gm(x)[0], fn(x))

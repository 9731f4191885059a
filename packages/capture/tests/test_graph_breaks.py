"""Graph breaks: the graph so far, the instruction that broke run for real, and a
resume function for the rest, each compiled on its first call through a hook."""

import json
import types

import pytest
import torch
from code_checker import check_code
from conftest import CaptureCache, assert_tree_equal

from ember_capture import (
    CaptureError,
    call_in_graph,
    called_in_graph,
    capture,
    never_capture,
    never_captured,
)

COUNTER = 0


class Runtime:
    """Functions compiled through CaptureCache, with the hook a runtime passes."""

    def __init__(self):
        self.caches: dict = {}
        self.codes: list[types.CodeType] = []

    def compile(self, fn):
        if fn not in self.caches:
            self.caches[fn] = CaptureCache(fn, hook=self.hook, on_result=self._seen)
        return self.caches[fn]

    def hook(self, target):
        if isinstance(target, types.FunctionType):
            return self.compile(target)
        if isinstance(target, types.MethodType):
            return types.MethodType(self.compile(target.__func__), target.__self__)
        return target

    def _seen(self, result):
        self.codes.extend(result.resume_codes)
        self.codes.append(result.code)

    @property
    def captures(self):
        return sum(c.captures for c in self.caches.values())

    @property
    def breaks(self):
        return len(set().union(*(c.breaks for c in self.caches.values())))


def run_both(fn, make_args, calls=3):
    runtime = Runtime()
    compiled = runtime.compile(fn)
    for _ in range(calls):
        args = make_args()
        assert_tree_equal(compiled(*args), fn(*args))
    for code in runtime.codes:
        check_code(code)
    return runtime


def one_break(x):
    y = x * 2
    print("between graphs")
    return y + 1


def two_breaks(x):
    y = x.sin()
    scale = y.sum().item()
    z = y * scale
    print("z is ready")
    return z.cos()


def many_breaks(x):
    for_print = x + 1
    print(1)
    a = for_print * 2
    print(2)
    b = a - 3
    print(3)
    c = b.tolist()
    return b * len(c)


def branch_on_data(x):
    y = x * 3
    if y.sum() > 0:  # noqa: SIM108 - the if/else statement is what is tested
        y = y + 10
    else:
        y = y - 10
    return y.abs()


def unknown_library_call(x):
    text = json.dumps({"n": x.shape[0]})
    return x * len(text)


def nested_call_breaks(x):
    return helper_that_breaks(x * 2) + 1


def helper_that_breaks(y):
    y = y + 1
    print("inside the helper")
    return y * 3


def keyword_call_breaks(x):
    return x + kw_helper(x, scale=2.0)


def kw_helper(x, *, scale):
    if x.mean() > 100:  # data-dependent inside an inlined call
        return x
    return x * scale


@pytest.mark.parametrize(
    "fn, breaks",
    [
        (one_break, 1),
        (two_breaks, 2),
        (many_breaks, 4),
        (unknown_library_call, 1),
        # The caller breaks at the call site; the helper, compiled on its own,
        # breaks at its own line.
        (nested_call_breaks, 2),
        (keyword_call_breaks, 2),
    ],
)
def test_breaks_match_eager(fn, breaks, capsys):
    runtime = run_both(fn, lambda: (torch.randn(4),))
    assert runtime.breaks == breaks


def test_branch_on_data_runs_both_sides_on_one_compiled_object():
    runtime = Runtime()
    compiled = runtime.compile(branch_on_data)
    for sign in (1.0, -1.0, 1.0, -1.0):
        x = torch.rand(4) * sign
        torch.testing.assert_close(compiled(x), branch_on_data(x))
    # the function, then each side's resume function: one capture each
    assert runtime.captures == 3


class _Doubled(torch.nn.Embedding):
    def forward(self, ids):
        return super().forward(ids) * 2


class _Positions(_Doubled):
    """transformers' RoFormerSinusoidalPositionalEmbedding, with a break
    before its zero-argument ``super()``."""

    def forward(self, length, start=0):
        ids = torch.arange(start, start + length, device=self.weight.device)
        print("a break")
        return super().forward(ids)


def test_zero_argument_super_works_after_a_break():
    """The resume function keeps the instance as its local 0, where
    ``super()`` looks for it (it took the stack values first, and raised
    ``super(): __class__ cell not found``)."""
    runtime = Runtime()
    module = _Positions(16, 4)
    compiled = runtime.compile(module.forward)
    for start in (0, 3):
        torch.testing.assert_close(compiled(5, start), module(5, start))
    assert runtime.captures >= 2


class _Holder:
    def __init__(self):
        self.buf = torch.zeros(3)


def _swap(holder):
    holder.buf = torch.ones(3)
    print("a break inside")


def test_the_resume_function_gets_what_the_frame_read_before_the_break():
    """An attribute read before the call a graph broke at is passed on as read
    then, though the call changed it (it was read again after the call)."""

    def fn(x, holder):
        kept = holder.buf
        y = x * 2
        _swap(holder)
        return kept + y

    compiled = Runtime().compile(fn)
    x = torch.arange(3.0)
    torch.testing.assert_close(compiled(x, _Holder()), fn(x, _Holder()))


def test_item_values_that_change_reuse_the_resume_function():
    def fn(x, y):
        k = x.sum().item()
        return (y / k) * 2.0 + k

    runtime = Runtime()
    compiled = runtime.compile(fn)
    for dtype in (torch.float32, torch.float64):
        for _ in range(4):
            x, y = torch.randn(3), torch.randn(2, 3, dtype=dtype)
            assert_tree_equal(compiled(x, y), fn(x, y))  # bit for bit
    # the function once, then its resume function once per dtype of y: the
    # float travels into the graph as an input, not guarded by its value
    assert runtime.captures == 3


def test_item_values_used_as_python_numbers_are_guarded():
    def fn(x):
        k = x.sum().item()
        if k > 0:  # a decision on the value itself
            return x * 2
        return x * k

    runtime = Runtime()
    compiled = runtime.compile(fn)
    for sign in (1, -1, 1, -1):
        x = sign * torch.rand(3)
        assert_tree_equal(compiled(x), fn(x))
    assert runtime.captures == 1 + 4  # each new value recaptures the resume


def test_resume_functions_are_named_after_the_function_and_line():
    result = capture(one_break, torch.randn(2))
    (code,) = result.resume_codes
    line = one_break.__code__.co_firstlineno + 2
    assert code.co_name == f"__resume_one_break_at_{line}"
    assert code.co_filename == one_break.__code__.co_filename
    check_code(code)


def test_transformed_code_reads_as_the_break():
    result = capture(branch_on_data, torch.randn(3))
    source = result.transformed_source
    assert "__ember_graph0(" in source
    assert "if not __ember_out0" in source  # the branch on the graph's output
    assert source.count("return __ember_resume") == 2


class Stateful(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.history = []
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x, log):
        global COUNTER
        self.calls = self.calls + 1
        self.last = x * 2
        log.append(x.sum())
        log[0] = "first"
        COUNTER += 1
        x.add_(1)
        print("state changed")
        self.history.append(self.calls)
        return self.lin(x) + self.last


def test_side_effects_are_replayed_in_order():
    global COUNTER
    torch.manual_seed(0)
    model, twin = Stateful(), Stateful()
    twin.load_state_dict(model.state_dict())
    runtime = Runtime()
    compiled = runtime.compile(model.forward)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(2, 3)
            x_twin = x.clone()
            log, log_twin = ["start"], ["start"]
            before = COUNTER
            out = compiled(x, log)
            assert before + 1 == COUNTER
            COUNTER = before
            expected = twin(x_twin, log_twin)
            torch.testing.assert_close(out, expected)
            torch.testing.assert_close(x, x_twin)  # in-place update of an input
            assert log[0] == log_twin[0] == "first" and len(log) == len(log_twin)
            torch.testing.assert_close(log[1], log_twin[1])
            assert model.calls == twin.calls
            assert model.history == twin.history
            torch.testing.assert_close(model.last, twin.last)


def pops_and_reinserts(x, **kwargs):
    # transformers' output decorators pop keyword arguments and put them back.
    mask = kwargs.pop("mask")
    scale = kwargs.pop("scale", 1.0)
    kwargs.update({"mask": mask, "seen": True})
    return x * mask * scale, kwargs


def test_replay_reads_values_as_the_function_first_saw_them():
    runtime = Runtime()
    compiled = runtime.compile(pops_and_reinserts)
    for _ in range(2):
        x, mask = torch.randn(3), torch.randn(3)
        kwargs, kwargs_twin = {"mask": mask, "scale": 2.0}, {"mask": mask, "scale": 2.0}
        out, returned = compiled(x, **kwargs)
        expected, expected_kwargs = pops_and_reinserts(x, **kwargs_twin)
        torch.testing.assert_close(out, expected)
        assert list(returned) == list(expected_kwargs) == ["mask", "seen"]
        assert returned["mask"] is mask and returned["seen"] is True
    assert runtime.captures == 1


class Cache:
    def __init__(self):
        self.table = [1]


def rebinds_then_returns_old(x, cache):
    old = cache.table
    cache.table = [2]
    old.append(3)
    return x + 1, old


def test_replay_writes_into_the_object_first_read_not_its_replacement():
    cache, twin = Cache(), Cache()
    x = torch.randn(2)
    out, old = Runtime().compile(rebinds_then_returns_old)(x, cache)
    expected, expected_old = rebinds_then_returns_old(x, twin)
    torch.testing.assert_close(out, expected)
    assert old == expected_old == [1, 3] and cache.table == twin.table == [2]


def changes_made_containers(x, out):
    lst = [3, 1, 2]
    lst.sort()
    out.append(lst)
    ranked = [1, 2, 3, 2]
    ranked.reverse()
    ranked.insert(0, 9)
    ranked.remove(2)
    ranked.sort(reverse=True)
    del ranked[0]
    out.append(ranked)
    d = {"a": 1, "b": 2, "c": 3}
    d.setdefault("e", 5)
    last = d.popitem()
    del d["a"]
    out.append((d, last))
    emptied = [x]
    emptied.clear()
    out.append(emptied)
    return x * 2


def _negate(v):
    return -v


def breaks_while_a_made_list_is_live(x, out):
    lst = [3, 1, 2]
    out.append(lst)
    lst.sort(key=_negate)  # a key function breaks the graph
    return x * len(lst)


def augments_containers(x, out):
    a = [1, 2]
    alias = a
    a += [3]
    b = [1, 2, 3]
    b[1:2] = (7, 8)
    c = [1]
    c *= 2
    d = {"a": 1}
    d |= {"b": 2}
    d.update(c=3)
    d["a"] += 5
    out += [alias, b, c, d | {"e": 4}]
    return x * 2


@pytest.mark.parametrize(
    "fn",
    [changes_made_containers, breaks_while_a_made_list_is_live, augments_containers],
)
def test_in_place_changes_to_made_containers_reach_what_escapes(fn):
    x = torch.randn(3)
    out, out_twin = [], []
    actual = Runtime().compile(fn)(x, out)
    expected = fn(x, out_twin)
    torch.testing.assert_close(actual, expected)
    assert out == out_twin


def in_no_grad(x, w):
    y = x @ w
    with torch.no_grad():
        z = y * 2
        print("inside no_grad")
        z = z + 1
    return y + z, z.requires_grad


def test_break_inside_no_grad_keeps_the_mode_in_the_resume_function():
    runtime = Runtime()
    compiled = runtime.compile(in_no_grad)
    for _ in range(2):
        x, w = torch.randn(2, 3), torch.randn(3, 3, requires_grad=True)
        out, z_requires_grad = compiled(x, w)
        expected, expected_flag = in_no_grad(x, w)
        torch.testing.assert_close(out, expected)
        assert z_requires_grad is expected_flag is False
        assert torch.is_grad_enabled()
        out.sum().backward()  # gradients flow through y only, as in eager
        torch.testing.assert_close(w.grad, x.sum(0, keepdim=True).t().expand(3, 3))
    for code in runtime.codes:
        check_code(code)


def raises_inside_no_grad(x):
    with torch.no_grad():
        y = x * 2
        json.loads(y.shape)  # TypeError at run time, inside the block
    return y


def test_an_exception_at_the_break_leaves_the_block_like_eager():
    runtime = Runtime()
    compiled = runtime.compile(raises_inside_no_grad)
    with pytest.raises(TypeError):
        compiled(torch.randn(2))
    assert torch.is_grad_enabled()


def printing_loop(x, layers):
    for i, layer in enumerate(layers):
        x = layer(x) + i
        print("layer", i)
    return x


def test_breaks_inside_a_for_loop_resume_over_the_items_left():
    layers = torch.nn.ModuleList(torch.nn.Linear(3, 3) for _ in range(3))
    runtime = Runtime()
    compiled = runtime.compile(printing_loop)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(2, 3)
            torch.testing.assert_close(compiled(x, layers), printing_loop(x, layers))
    assert runtime.breaks == 1  # one line, reached once per iteration
    for code in runtime.codes:
        check_code(code)


def test_breaks_inside_try_blocks_refuse_with_the_reason():
    def in_try(x):
        try:
            print("in try")
            return x * 2
        except RuntimeError:
            return x

    with pytest.raises(CaptureError) as info:
        capture(in_try, torch.randn(2))
    assert info.value.lineno == in_try.__code__.co_firstlineno + 2
    assert "print()" in info.value.reason


class Recorder:
    """A user context manager: capture enters it for real at a graph break."""

    def __init__(self):
        self.events = []

    def __enter__(self):
        self.events.append("enter")
        return self

    def __exit__(self, *exc):
        self.events.append("exit" if exc[0] is None else "exit with error")
        return False


def with_user_manager(x, rec):
    y = x * 2
    with rec as r:
        r.events.append("body")
        y = y + 1
    return y * 3


def test_user_context_manager_is_entered_for_real_and_exits_in_order():
    runtime = Runtime()
    compiled = runtime.compile(with_user_manager)
    for _ in range(2):
        x = torch.randn(3)
        ours, theirs = Recorder(), Recorder()
        torch.testing.assert_close(compiled(x, ours), with_user_manager(x, theirs))
        assert ours.events == theirs.events == ["enter", "body", "exit"]
    for code in runtime.codes:
        check_code(code)


def turns_on_gradients(x):
    w = x.detach() * 2
    w.requires_grad_(True)
    return w.sum(), w


def test_requires_grad_inside_breaks_so_the_tensor_becomes_a_leaf():
    runtime = Runtime()
    compiled = runtime.compile(turns_on_gradients)
    total, w = compiled(torch.randn(3))
    assert w.requires_grad and w.is_leaf and total.requires_grad
    reasons = [str(e) for c in runtime.caches.values() for e in c.refused]
    assert not reasons and runtime.breaks == 1


@never_capture
def _runs_as_python(y):
    return y * 3


@call_in_graph
def _one_call(y):
    return (y.relu() * 2).sum(-1)


def test_a_function_marked_never_capture_is_a_graph_break():
    def fn(x):
        return _runs_as_python(x + 1) - 1

    result = capture(fn, torch.randn(3))
    assert "marked never to be captured (ember.disable)" in result.break_reason.reason
    runtime = run_both(fn, lambda: (torch.randn(3),))
    # a runtime that compiles what the resumed code calls gets a refusal
    assert runtime.caches[_runs_as_python].captures == 0
    with pytest.raises(CaptureError, match="is marked never to be captured"):
        capture(_runs_as_python, torch.randn(3))
    assert never_captured(_runs_as_python) and not never_captured(fn)


def test_a_function_marked_call_in_graph_is_one_node():
    def fn(x):
        return _one_call(x * 2) + 1

    result = capture(fn, torch.randn(2, 3))
    gm = result.graphs[0].gm
    calls = [n for n in gm.graph.nodes if n.target is _one_call]
    assert len(calls) == 1 and result.break_reason is None
    assert "relu" not in gm.code  # its body is not traced
    x = torch.randn(2, 3)
    torch.testing.assert_close(gm(x)[0], fn(x))
    assert called_in_graph(_one_call)
    with pytest.raises(TypeError, match="takes a Python function"):
        call_in_graph(torch.relu)


class _WithMarkedMethod(torch.nn.Module):
    @never_capture
    def eager_part(self, y):
        return y.tolist()

    def forward(self, x):
        return x * len(self.eager_part(x + 1))


def test_a_method_marked_never_capture_is_a_graph_break():
    model = _WithMarkedMethod()
    result = capture(model.forward, torch.randn(3))
    assert "eager_part, which is marked never" in result.break_reason.reason
    run_both(model.forward, lambda: (torch.randn(4),))


_KEPT_OUT_OF_TORCH_COMPILE = """
import json, torch, torch._dynamo
import ember_capture

# What torch's compiler does to torch's own functions once it is imported.
relu = torch._dynamo.disable(torch.nn.functional.relu)


def users_helper(x):
    return x.tolist()


helper = torch.compiler.disable(users_helper)


def inlined(x):
    return relu(x) * 2


def broken(x):
    return helper(x.sin())


a = ember_capture.capture(inlined, torch.randn(3))
b = ember_capture.capture(broken, torch.randn(3))
print(json.dumps({
    "graphs": len(a.graphs),
    "relu": "relu" in a.graphs[0].gm.code,
    "inlined_break": a.break_reason is not None,
    "break": str(b.break_reason),
}))
"""


def test_functions_kept_out_of_torch_compile():
    """Once torch's compiler is imported, torch wraps some of its own functions
    so that compiler stays out (Optimizer.add_param_group): ember interprets
    what they wrap. A user's function kept out of torch.compile is a break."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _KEPT_OUT_OF_TORCH_COMPILE],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["graphs"] == 1 and result["relu"]
    assert not result["inlined_break"]
    assert "users_helper, which is marked torch.compiler.disable" in result["break"]

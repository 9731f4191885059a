"""route_calls: a frame that runs eagerly sends the calls it makes to user code
through a hook, and computes exactly what the plain function computes."""

import inspect
import math
import sys
import textwrap
import traceback
import types
import warnings

import pytest
import torch
import torch.nn.functional as F
from bytecode import Bytecode, Instr, Label
from code_checker import check_code
from conftest import assert_tree_equal

from ember_capture import CaptureError, capture, is_user_callable, route_calls
from ember_capture.call_routing import _rewrite


class Recorder:
    """A hook that records each callee it is given and runs it unchanged."""

    def __init__(self):
        self.seen = []

    def __call__(self, callee):
        self.seen.append(callee)
        return callee

    @property
    def names(self):
        return [getattr(c, "__qualname__", type(c).__name__) for c in self.seen]


def codes_of(code):
    """``code`` and every code object nested in it."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from codes_of(const)


def check_routed(fn):
    """Structural check of a routed function's code and its nested code, except
    generator code: the checker does not model RETURN_GENERATOR's first send."""
    for code in codes_of(fn.__code__):
        if not code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE):
            check_code(code)


def helper(x, scale=1.0):
    return x * scale + 1


def failing_helper(x):
    raise ValueError(f"bad input of shape {tuple(x.shape)}")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.tanh(self.lin(x))


class Scaler:
    def __init__(self, k):
        self.k = k

    def apply(self, x, *, shift=0.0):
        return x * self.k + shift


def plain_calls(x):
    return helper(x) + helper(x, 2.0)


def method_and_keyword_calls(x, scaler):
    return scaler.apply(x, shift=1.5) + helper(x, scale=3.0)


def star_calls(x, *args, **kwargs):
    parts = (x, 2.0)
    options = {"scale": 0.5}
    return helper(*parts) + helper(x, **options) + helper(*args, **kwargs)


def try_except_finally(x):
    total = torch.zeros_like(x)
    try:
        total = total + failing_helper(x)
    except ValueError:
        total = total + helper(x)
    finally:
        total = total + helper(x, 2.0)
    return total


def while_loop(x):
    steps = 0
    while steps < 3:
        x = helper(x, 0.5)
        steps += 1
    return x


def with_block(x):
    with torch.no_grad():
        y = helper(x)
    return y + helper(x)


def comprehensions(xs):
    listed = [helper(x) for x in xs]
    summed = sum(helper(x, 2.0) for x in xs)
    keyed = {i: helper(x) for i, x in enumerate(xs)}
    return listed, summed, keyed


def closures(x):
    k = 2.0

    def inner(t):
        return helper(t, k)

    def counter():
        nonlocal k
        k = k + 1.0
        return helper(x, k)

    return inner(x) + counter() + (lambda t: helper(t))(x)


def module_calls(block, x):
    return block(x) + F.gelu(x) + torch.relu(x)


def library_calls(x):
    text = textwrap.dedent("  abc")
    return helper(x) * len(text) * math.sqrt(4.0) + F.gelu(x)


def generator(xs):
    for x in xs:
        yield helper(x)


async def coroutine(x):
    return helper(x) * 2


def frame_introspection(x):
    names = sorted(locals())
    warnings.warn("from the user's frame", UserWarning, stacklevel=1)
    return helper(x), names


def raises_from_callee(x):
    return failing_helper(x)


def fresh(*shape):
    return torch.randn(*shape)


@pytest.mark.parametrize(
    "fn, make_args, expected",
    [
        (plain_calls, lambda: (fresh(3),), ["helper", "helper"]),
        (
            method_and_keyword_calls,
            lambda: (fresh(3), Scaler(2.0)),
            ["Scaler.apply", "helper"],
        ),
        (star_calls, lambda: (fresh(3), fresh(3), 4.0), ["helper"] * 3),
        (
            try_except_finally,
            lambda: (fresh(3),),
            ["failing_helper", "helper", "helper"],
        ),
        (while_loop, lambda: (fresh(3),), ["helper"] * 3),
        (with_block, lambda: (fresh(3),), ["helper", "helper"]),
        (
            comprehensions,
            lambda: ([fresh(2), fresh(2)],),
            ["helper"] * 6,
        ),
        # inner functions and lambdas are made by the routed frame itself: they
        # run as they are (new objects on every call) and route their own calls
        (closures, lambda: (fresh(3),), ["helper"] * 3),
        (module_calls, lambda: (Block(), fresh(2, 4)), ["Block"]),
        (library_calls, lambda: (fresh(3),), ["helper"]),
    ],
)
def test_routed_calls_match_the_plain_function(fn, make_args, expected):
    hook = Recorder()
    routed = route_calls(fn, hook)
    for _ in range(3):
        args = make_args()
        torch.manual_seed(0)
        expected_result = fn(*args)
        torch.manual_seed(0)
        assert_tree_equal(routed(*args), expected_result)
    assert hook.names == expected * 3
    check_routed(routed)


def test_generators_and_coroutines_route_their_calls():
    hook = Recorder()
    xs = [fresh(3), fresh(3)]
    routed = route_calls(generator, hook)
    assert_tree_equal(list(routed(xs)), list(generator(xs)))
    assert hook.names == ["helper", "helper"]

    x = fresh(3)
    with pytest.raises(StopIteration) as done:
        route_calls(coroutine, hook)(x).send(None)
    torch.testing.assert_close(done.value.value, helper(x) * 2)
    assert hook.names[-1] == "helper"


def test_the_hook_result_is_what_runs():
    def doubled(callee):
        return lambda *args, **kwargs: 2 * callee(*args, **kwargs)

    x = fresh(3)
    routed = route_calls(method_and_keyword_calls, doubled)
    scaler = Scaler(3.0)
    expected = 2 * scaler.apply(x, shift=1.5) + 2 * helper(x, scale=3.0)
    torch.testing.assert_close(routed(x, scaler), expected)


def test_an_exception_from_a_callee_propagates_with_the_users_lines():
    routed = route_calls(raises_from_callee, Recorder())
    with pytest.raises(ValueError, match="bad input") as info:
        routed(fresh(2))
    frames = traceback.extract_tb(info.value.__traceback__)
    code = raises_from_callee.__code__
    assert (frames[1].filename, frames[1].lineno, frames[1].name) == (
        code.co_filename,
        code.co_firstlineno + 1,
        "raises_from_callee",
    )
    assert frames[-1].name == "failing_helper"


def test_calls_run_in_the_users_frame():
    routed = route_calls(frame_introspection, Recorder())
    with pytest.warns(UserWarning) as caught:
        _, names = routed(fresh(2))
    assert names == ["x"]
    assert caught[0].filename == __file__


class Base(torch.nn.Module):
    def forward(self, x):
        return x + 1


class Derived(Base):
    def forward(self, x):
        return super().forward(x) * 2


def test_zero_argument_super_still_finds_the_frame():
    hook = Recorder()
    routed = route_calls(Derived.forward, hook)
    module, x = Derived(), fresh(3)
    torch.testing.assert_close(routed(module, x), module(x))
    assert hook.names == ["Base.forward"]  # super() itself is a builtin


def test_the_copy_keeps_the_functions_identity():
    def described(x, k=2, *, shift=1):
        """Documented."""
        return helper(x, k) + shift

    described.tag = "kept"
    routed = route_calls(described, Recorder())
    assert routed.__name__ == "described"
    assert routed.__qualname__ == described.__qualname__
    assert routed.__doc__ == "Documented."
    assert routed.__defaults__ == (2,) and routed.__kwdefaults__ == {"shift": 1}
    assert routed.tag == "kept"
    code, original = routed.__code__, described.__code__
    assert code.co_filename == original.co_filename
    assert code.co_firstlineno == original.co_firstlineno
    lines = {line for *_, line in code.co_lines() if line is not None}
    assert lines == {line for *_, line in original.co_lines() if line is not None}


def test_each_copy_uses_its_own_hook_and_routing_twice_routes_once():
    first, second = Recorder(), Recorder()
    once = route_calls(plain_calls, first)
    twice = route_calls(once, second)
    x = fresh(3)
    torch.testing.assert_close(twice(x), plain_calls(x))
    assert first.names == [] and second.names == ["helper", "helper"]
    once(x)
    assert first.names == ["helper", "helper"]
    # the rewrite itself is made once per code object
    assert _rewrite(plain_calls.__code__) is _rewrite(plain_calls.__code__)


def test_only_user_code_counts_as_user_code():
    assert is_user_callable(helper)
    assert is_user_callable(Scaler(1.0).apply)
    assert is_user_callable(Block())
    assert is_user_callable(torch.nn.Sequential(Block()))  # may hold user modules
    assert not is_user_callable(torch.nn.Linear(2, 2))  # one torch op
    assert not is_user_callable(F.gelu)  # torch's own Python function
    assert not is_user_callable(torch.relu)
    assert not is_user_callable(print)
    assert not is_user_callable(textwrap.dedent)  # the standard library
    assert not is_user_callable(Scaler)  # classes run their __init__ as is
    assert not is_user_callable(route_calls)  # ember itself


def test_a_resume_function_that_cannot_be_captured_routes_its_calls():
    def breaks_then_refuses(x):
        y = x * 2
        print("first break")
        try:
            print("inside try: cannot resume")
            z = helper(y)
        except ValueError:
            z = y
        return z

    result = capture(breaks_then_refuses, fresh(3))
    (code,) = result.resume_codes
    resume = types.FunctionType(code, globals(), code.co_name)
    with pytest.raises(CaptureError, match="print"):
        capture(resume, fresh(3), fresh(3), None)  # locals, then the stack
    hook = Recorder()
    routed = route_calls(resume, hook)
    x, y = fresh(3), fresh(3)
    torch.testing.assert_close(routed(x, y, None), helper(y))
    assert hook.names == ["helper"]
    check_code(routed.__code__)


def make_scaler(k):
    return lambda t: helper(t, k)


def apply_twice(fn, x):
    return fn(fn(x))


def test_capture_reads_the_users_code_not_the_routed_copy():
    x = fresh(3)
    routed = route_calls(plain_calls, Recorder())
    result = capture(routed, x)
    assert result.break_reason is None
    run = result.build([g.gm for g in result.graphs])
    torch.testing.assert_close(run(x), plain_calls(x))
    # a lambda a routed frame made, passed on to code capture inlines
    scaler = route_calls(make_scaler, Recorder())(3.0)
    result = capture(apply_twice, scaler, x)
    assert result.break_reason is None and len(result.graphs) == 1
    run = result.build([g.gm for g in result.graphs])
    torch.testing.assert_close(run(scaler, x), apply_twice(scaler, x))


def halve_while_large(x):
    first = True
    while first or x.sum() > 1:  # data-dependent only in the bottom test
        first = False
        x = halve(x)
    return x


def halve(x):
    return x / 2


def test_a_while_loops_bottom_test_cannot_resume_and_the_frame_routes():
    line = halve_while_large.__code__.co_firstlineno + 2
    with pytest.raises(CaptureError, match="tensor's value") as info:
        capture(halve_while_large, fresh(4).abs() * 8)
    assert info.value.location == f"{__file__}:{line}"
    hook = Recorder()
    routed = route_calls(halve_while_large, hook)
    x = fresh(4).abs() * 8
    torch.testing.assert_close(routed(x), halve_while_large(x))
    assert hook.names and set(hook.names) == {"halve"}


def _function_of(instructions, stacksize):
    bc = Bytecode(instructions)
    bc.filename = __file__
    return types.FunctionType(
        bc.to_code(stacksize=stacksize, compute_exception_stack_depths=False),
        globals(),
    )


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="3.11 bytecode")
def test_a_call_slot_that_paths_disagree_on_is_left_alone():
    # Two paths reach one CALL 1: [NULL, helper, x] calls helper(x), and
    # [helper, x, 2.0] calls helper(x, 2.0) method-style. Neither is routed.
    method_style, join = Label(), Label()
    x = torch.ones(2)
    fn = _function_of(
        [
            Instr("RESUME", 0),
            Instr("LOAD_CONST", False),
            Instr("POP_JUMP_FORWARD_IF_FALSE", method_style),
            Instr("PUSH_NULL"),
            Instr("LOAD_CONST", helper),
            Instr("LOAD_CONST", x),
            Instr("JUMP_FORWARD", join),
            method_style,
            Instr("LOAD_CONST", helper),
            Instr("LOAD_CONST", x),
            Instr("LOAD_CONST", 2.0),
            join,
            Instr("PRECALL", 1),
            Instr("CALL", 1),
            Instr("RETURN_VALUE"),
        ],
        stacksize=3,
    )
    hook = Recorder()
    routed = route_calls(fn, hook)
    assert routed is not fn
    torch.testing.assert_close(routed(), helper(x, 2.0))
    assert hook.names == []


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="3.11 bytecode")
def test_code_it_cannot_follow_is_returned_unchanged():
    # Paths meet with different stack depths: not code CPython's compiler makes.
    join = Label()
    fn = _function_of(
        [
            Instr("RESUME", 0),
            Instr("LOAD_CONST", True),
            Instr("POP_JUMP_FORWARD_IF_TRUE", join),
            Instr("LOAD_CONST", 1),
            join,
            Instr("LOAD_CONST", 2),
            Instr("RETURN_VALUE"),
        ],
        stacksize=2,
    )
    assert route_calls(fn, Recorder()) is fn

"""Portable guards: a capture's check written so that another process rebuilds it,
with every object it compares with looked up by name there."""

import enum
import functools
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from ember_capture import CellView, capture
from ember_capture.portable import (
    NotPortable,
    PortableGuards,
    code_fingerprint,
    decode,
    encode,
)


class Mode(enum.Enum):
    FAST = 1
    EXACT = 2


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        3,
        "text",
        0.1,
        float("inf"),
        (1, (2.5, "a")),
        [1, 2],
        torch.float16,
        torch.device("cpu"),
        torch,
        torch.nn.functional,
        F.gelu,  # a builtin that names torch._C._nn
        torch.matmul,  # names a class it is not found in
        torch.Tensor.sum,  # a method descriptor: its class names it
        torch.nn.Linear,
        type(None),
        Mode.EXACT,
        len,
        torch.ops.aten,  # an operator namespace: not in sys.modules
        torch.ops.aten.add,  # an operator, which names a module it is not in
    ],
)
def test_named_objects_and_constants_come_back_as_themselves(value):
    back = decode(encode(value))
    assert back is value or (type(back) is type(value) and back == value)


@pytest.mark.parametrize(
    "value",
    [
        torch.nn.Linear(2, 2),  # an instance: only its identity says which
        torch.zeros(2),
        lambda x: x,  # made in a call: its name finds nothing
        object(),
    ],
)
def test_objects_without_a_name_are_not_portable(value):
    with pytest.raises(NotPortable):
        encode(value)


def test_a_name_missing_in_this_process_is_a_lookup_error():
    with pytest.raises(LookupError):
        decode(["global", "no_such_module_here", "f"])
    with pytest.raises(LookupError):
        decode(["global", "torch", "no_such_function"])
    with pytest.raises(LookupError):
        decode(["module", "no_such_module_here"])
    # an operator its library did not register in this process
    with pytest.raises(LookupError):
        decode(["op", "no_such_library_here", "f"])


def helper(x):
    return x * 2


def test_code_fingerprints_are_the_same_in_another_process():
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(__import__("pathlib").Path(__file__).parent)!r})
        from ember_capture.portable import code_fingerprint
        import test_portable
        print(code_fingerprint(test_portable.helper.__code__))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == code_fingerprint(helper.__code__)


def test_code_fingerprints_tell_edited_code_apart():
    def f(x):
        return x + 1

    def g(x):
        return x + 2

    assert code_fingerprint(f.__code__) != code_fingerprint(g.__code__)
    assert code_fingerprint(f.__code__) == code_fingerprint(f.__code__.replace())


class Scaled(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return helper(F.relu(self.fc(x))) * self.scale


def _portable(fn, *args):
    result = capture(fn, *args)
    cells = CellView(fn.__code__.co_freevars, fn.__closure__)
    checker = result.guards.compile(fn.__globals__, cells)
    return checker, PortableGuards.from_json(checker.portable().to_json())


def test_a_rebuilt_check_answers_as_the_original():
    model = Scaled(2.0)
    fn = Scaled.forward
    x = torch.randn(3, 4)
    checker, portable = _portable(fn, model, x)
    cells = CellView(fn.__code__.co_freevars, fn.__closure__)
    rebuilt = portable.compile(fn.__globals__, cells, {"self": model, "x": x})
    calls = [
        {"self": model, "x": x},
        {"self": model, "x": torch.randn(5, 4)},
        {"self": model, "x": x.double()},
        {"self": Scaled(3.0), "x": x},  # the constant it read changed
        {"self": torch.nn.Linear(4, 4), "x": x},
    ]
    for f_locals in calls:
        assert rebuilt.check(f_locals) == checker.check(f_locals)
    assert rebuilt.check(calls[0]) and not rebuilt.check(calls[3])
    assert "scale == 2.0" in rebuilt.failure(calls[3])
    assert rebuilt.failure(calls[0]) is None


def test_inlined_code_is_found_through_the_call_and_compared_by_fingerprint():
    model = Scaled(2.0)
    fn = Scaled.forward
    x = torch.randn(3, 4)
    _, portable = _portable(fn, model, x)
    codes = [value for _, value in portable.expected if value[0] == "code"]
    assert codes and all(c[1] == code_fingerprint(helper.__code__) for c in codes)
    cells = CellView(fn.__code__.co_freevars, fn.__closure__)
    original = helper.__code__
    try:  # the helper's code edited since the entry was saved
        helper.__code__ = (lambda x: x * 3).__code__
        with pytest.raises(LookupError):
            portable.compile(fn.__globals__, cells, {"self": model, "x": x})
    finally:
        helper.__code__ = original


def _decorate(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


@_decorate
def decorated(x):
    return x + 1


class WithClassmethod:
    @classmethod
    def make(cls):
        return cls()


def test_decorated_functions_and_classmethods_are_found_through_their_name():
    inner = decorated.__wrapped__
    assert encode(inner)[3] == ["__wrapped__"]
    assert decode(encode(inner)) is inner
    function = WithClassmethod.make.__func__
    assert encode(function)[3] == ["__func__"]
    assert decode(encode(function)) is function


def _made(scale):
    def times(x):
        return x * scale

    return times


@pytest.mark.parametrize(
    "make",
    [
        lambda k: functools.partial(F.gelu, approximate=k),
        lambda k: _made(k) if k == "tanh" else (lambda x: x),
        lambda k: int | None if k == "tanh" else int | str,
        lambda k: torch.inference_mode(k == "tanh"),
    ],
    ids=["partial", "function", "annotation", "grad mode"],
)
def test_objects_made_at_run_time_are_recognized_in_the_call(make):
    saved = encode(make("tanh"), read="L['obj']")
    again = make("tanh")  # another object, made the same way
    assert decode(saved, lambda expression: again) is again
    with pytest.raises(LookupError):
        decode(saved, lambda expression: make("none"))
    with pytest.raises(NotPortable):
        encode(make("tanh"))  # no read: nothing to recognize it by


class Twice(torch.nn.Module):
    def __init__(self, first, second):
        super().__init__()
        self.first, self.second = first, second

    def forward(self, x):
        return self.first(x) + self.second(x)


def test_one_object_read_twice_must_stay_one_object():
    act = functools.partial(F.gelu, approximate="tanh")
    fn = Twice.forward
    x = torch.randn(3)
    _, portable = _portable(fn, Twice(act, act), x)
    assert any(value[0] == "same" for _, value in portable.expected)
    cells = CellView(fn.__code__.co_freevars, fn.__closure__)
    other = functools.partial(F.gelu, approximate="tanh")
    for model, holds in ((Twice(other, other), True), (Twice(other, act), False)):
        f_locals = {"self": model, "x": x}
        check = portable.compile(fn.__globals__, cells, f_locals)
        assert check.check(f_locals) is holds


def test_class_fingerprints_follow_bases_and_protocol_methods_only(monkeypatch):
    from ember_capture import portable

    class Probe(torch.nn.Module):
        pass

    before = portable.class_fingerprint(Probe)
    # torch's compiler frontend, once used, wraps nn.Module.__init__: entries
    # saved by such a process must still serve one that never used it
    original = torch.nn.Module.__init__
    monkeypatch.setattr(
        torch.nn.Module, "__init__", lambda self, *a, **k: original(self)
    )
    portable._CLASS_BODIES.clear()
    assert portable.class_fingerprint(Probe) == before
    monkeypatch.setattr(Probe, "__bool__", lambda self: False, raising=False)
    portable._CLASS_BODIES.clear()
    assert portable.class_fingerprint(Probe) != before  # truth: capture decides it

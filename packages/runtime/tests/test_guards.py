"""Guard checks: the C++ and pure-Python paths agree with each other and with an
independent reading of the tensor metadata, on randomized guard sets and values."""

import random
import shutil

import pytest
import torch

from ember_runtime import GuardSpec, TensorCheck, compile_guards, native_available
from ember_runtime.guards import PURE_PYTHON_ENV

needs_native = pytest.mark.skipif(
    not native_available(), reason="the C++ guard extension is not built"
)


def test_extension_is_built_where_a_compiler_exists():
    if shutil.which("c++") is None and shutil.which("g++") is None:
        pytest.skip("no C++ compiler on this machine")
    assert native_available()


def random_tensor(rng: random.Random) -> torch.Tensor:
    dtype = rng.choice([torch.float32, torch.float64, torch.int64, torch.bool])
    ndim = rng.choice([0, 1, 2, 3])
    shape = [rng.choice([0, 1, 2, 3]) for _ in range(ndim)]
    t = torch.zeros(shape, dtype=dtype)
    layout = rng.choice(["plain", "transposed", "strided", "expanded"])
    if layout == "transposed" and ndim >= 2:
        t = torch.zeros(shape[::-1], dtype=dtype).transpose(0, -1)
    elif layout == "strided" and ndim >= 1:
        t = torch.zeros([s * 2 for s in shape], dtype=dtype)[(slice(None, None, 2),)]
        t = t[tuple(slice(0, s) for s in shape)]
    elif layout == "expanded" and ndim >= 1:
        t = torch.zeros([1, *shape[1:]], dtype=dtype).expand(shape)
    if dtype.is_floating_point and rng.random() < 0.5:
        t = torch.nn.Parameter(t.detach(), requires_grad=rng.random() < 0.7)
    elif dtype.is_floating_point and rng.random() < 0.3:
        t = t.detach().requires_grad_()
    return t


def variant(t: torch.Tensor, rng: random.Random) -> object:
    """Another value in the same place: often equivalent, often differing in one
    field, sometimes not a tensor at all."""
    kind = rng.choice(
        [
            "same",
            "fresh",
            "dtype",
            "size",
            "contiguous",
            "transpose",
            "requires_grad",
            "type",
            "device",
            "not_a_tensor",
        ]
    )
    match kind:
        case "same":
            return t
        case "fresh":  # a new tensor with identical metadata
            fresh = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
            if isinstance(t, torch.nn.Parameter):
                return torch.nn.Parameter(fresh, requires_grad=t.requires_grad)
            return fresh.requires_grad_(t.requires_grad)
        case "dtype":
            return t.detach().to(torch.float16)
        case "size":
            return torch.zeros([*t.shape, 1], dtype=t.dtype)
        case "contiguous":
            return t.detach().contiguous()
        case "transpose":
            return t.detach().transpose(0, -1) if t.dim() >= 2 else t.detach()
        case "requires_grad":
            if not t.dtype.is_floating_point:
                return t
            return t.detach().clone().requires_grad_(not t.requires_grad)
        case "type":
            if isinstance(t, torch.nn.Parameter):
                return t.detach()
            if t.dtype.is_floating_point:
                return torch.nn.Parameter(t.detach(), requires_grad=t.requires_grad)
            return t
        case "device":
            return torch.empty_strided(
                t.shape, t.stride(), dtype=t.dtype, device="meta"
            )
        case "not_a_tensor":
            return rng.choice([None, 3, 2.5, "x", [t], (t,), object(), torch.float32])
    raise AssertionError(kind)


def oracle(value: object, reference: torch.Tensor) -> bool:
    """The guard's meaning, written independently of ember_runtime."""
    return (
        isinstance(value, torch.Tensor)
        and type(value) is type(reference)
        and value.dtype == reference.dtype
        and value.device == reference.device
        and list(value.shape) == list(reference.shape)
        and list(value.stride()) == list(reference.stride())
        and value.requires_grad == reference.requires_grad
    )


def make_spec(references, other=None):
    names = [f"v{i}" for i in range(len(references))]
    checks = tuple(
        TensorCheck.of(f"L[{n!r}]", t) for n, t in zip(names, references, strict=True)
    )
    return GuardSpec(checks, lambda L: [L[n] for n in names], other)


def backends():
    return [False, True] if native_available() else [False]


@pytest.mark.parametrize("seed", range(12))
def test_randomized_guard_sets_agree(seed):
    rng = random.Random(seed)
    references = [random_tensor(rng) for _ in range(rng.randint(0, 5))]
    spec = make_spec(references)
    checks = [compile_guards(spec, native=n) for n in backends()]
    start = {f"v{i}": t for i, t in enumerate(references)}
    assert all(c.check(start) for c in checks)
    for _ in range(40):
        values = {
            k: (variant(v, rng) if rng.random() < 0.4 else v) for k, v in start.items()
        }
        expected = all(oracle(values[k], start[k]) for k in start)
        answers = [c.check(values) for c in checks]
        assert answers == [expected] * len(checks), values
        assert all((c.failure(values) is None) == expected for c in checks)


@pytest.mark.parametrize("native", backends())
def test_failure_names_the_guard_with_old_and_new_value(native):
    x = torch.randn(2, 3)
    check = compile_guards(make_spec([x, x]), native=native)
    assert check.failure({"v0": x, "v1": x.double()}) == (
        "L['v1']: dtype changed from torch.float32 to torch.float64"
    )
    assert check.failure({"v0": x.t(), "v1": x}) == (
        "L['v0']: size changed from [2, 3] to [3, 2] (size(0): 2 -> 3, size(1): 3 -> 2)"
    )
    assert check.failure({"v0": x, "v1": x.t().contiguous().t()}) == (
        "L['v1']: stride changed from [3, 1] to [1, 2]"
    )
    assert check.failure({"v0": torch.nn.Parameter(x), "v1": x}) == (
        "L['v0']: type changed from Tensor to Parameter"
    )
    assert (
        check.failure({"v0": 3, "v1": x}) == "L['v0']: type changed from Tensor to int"
    )
    assert "could not be read (KeyError" in check.failure({"v0": x})


@pytest.mark.parametrize("native", backends())
def test_other_guards_and_reader_errors(native):
    x = torch.randn(3)
    flag = {"ok": True}

    def other(L):
        if L.get("boom"):
            raise AttributeError("gone")
        return flag["ok"]

    def other_failure(L):
        return None if flag["ok"] else "G['flag']: value changed from True to False"

    spec = GuardSpec(
        (TensorCheck.of("L['x']", x),), lambda L: (L["x"],), other, other_failure
    )
    check = compile_guards(spec, native=native)
    assert check.check({"x": x})
    assert not check.check({"x": x, "boom": True})
    flag["ok"] = False
    assert not check.check({"x": x})
    assert check.failure({"x": x}) == "G['flag']: value changed from True to False"
    # a reader that returns the wrong number of values fails the guards
    short = GuardSpec(spec.tensors, lambda L: ())
    assert not compile_guards(short, native=native).check({"x": x})


@pytest.mark.parametrize("native", backends())
def test_with_first_the_tensors_are_checked_before_the_other_guards(native):
    """With ``first`` (what the reads depend on), an entry compiled for other
    sizes fails at its tensor check without running the (slow) other guards;
    without it, the other guards run before anything is read."""
    order = []
    x = torch.randn(3)

    def read(L):
        order.append("read")
        return (L["x"],)

    def step(name, answer=True):
        return lambda L: order.append(name) or answer

    check = compile_guards(
        GuardSpec(
            (TensorCheck.of("L['x']", x),), read, step("other"), None, step("first")
        ),
        native=native,
    )
    assert not check.check({"x": torch.randn(4)}) and order == ["first", "read"]
    order.clear()
    assert check.check({"x": x}) and order == ["first", "read", "other"]
    order.clear()
    failing_first = GuardSpec(
        (TensorCheck.of("L['x']", x),), read, step("other"), None, step("first", False)
    )
    assert not compile_guards(failing_first, native=native).check({"x": x})
    assert order == ["first"]
    order.clear()
    check = compile_guards(
        GuardSpec((TensorCheck.of("L['x']", x),), read, step("other")), native=native
    )
    assert check.check({"x": x}) and order == ["other", "read"]


@pytest.mark.parametrize("native", backends())
def test_base_exceptions_propagate(native):
    def read(L):
        raise KeyboardInterrupt

    spec = GuardSpec((TensorCheck.of("L['x']", torch.ones(1)),), read)
    with pytest.raises(KeyboardInterrupt):
        compile_guards(spec, native=native).check({})


def test_requires_grad_toggled_in_place_fails_the_guard():
    for native in backends():
        w = torch.randn(4)
        check = compile_guards(make_spec([w]), native=native)
        assert check.check({"v0": w})
        w.requires_grad_()
        assert not check.check({"v0": w})
        w.requires_grad_(False)
        w.resize_(2, 2)
        assert not check.check({"v0": w})


def test_environment_variable_forces_python(monkeypatch):
    spec = make_spec([torch.ones(2)])
    monkeypatch.setenv(PURE_PYTHON_ENV, "1")
    assert not compile_guards(spec).native
    monkeypatch.delenv(PURE_PYTHON_ENV)
    assert compile_guards(spec).native == native_available()


@needs_native
def test_checker_is_collected_when_it_closes_over_itself():
    import gc
    import weakref

    class Holder:
        pass

    holder = Holder()
    spec = GuardSpec((), lambda L, h=holder: ())  # the reader refers to holder
    holder.check = compile_guards(spec, native=True).check  # holder refers to it
    ref = weakref.ref(holder)
    del holder, spec
    gc.collect()
    assert ref() is None


def test_a_tensor_type_changed_after_compiling_is_read_afresh():
    class Tagged(torch.Tensor):
        pass

    x = torch.zeros(2).as_subclass(Tagged)
    checks = [compile_guards(make_spec([x]), native=n) for n in backends()]
    assert all(c.check({"v0": x}) for c in checks)
    Tagged.dtype = property(lambda self: torch.int8)  # shadows the C getter
    try:
        assert [c.check({"v0": x}) for c in checks] == [False] * len(checks)
    finally:
        del Tagged.dtype
    assert all(c.check({"v0": x}) for c in checks)

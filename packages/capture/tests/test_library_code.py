"""Constructs library code is written in: imports inside functions, and the
questions libraries ask to choose a compile-friendly path."""

import collections.abc
import contextvars
import dataclasses
import functools
import numbers
import sys
import types

import pytest
import torch
from conftest import CaptureCache

from ember_capture import capture


@pytest.fixture
def settings_module():
    """A module the function imports, whose attribute a test changes."""
    module = types.ModuleType("ember_test_settings")
    module.SCALE = 2.0
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def scaled(x):
    import ember_test_settings
    import torch.nn.functional
    from ember_test_settings import SCALE as scale
    from torch.nn import functional as F

    return F.relu(x) * ember_test_settings.SCALE + torch.nn.functional.gelu(x) * scale


def test_imports_of_imported_modules_are_captured_and_guarded(settings_module):
    cache = CaptureCache(scaled)
    for scale in (2.0, 2.0, 3.0):
        settings_module.SCALE = scale
        x = torch.randn(4, 5)
        torch.testing.assert_close(cache(x), scaled(x))
        assert not cache.breaks and not cache.refused
    assert cache.captures == 2  # the changed module attribute recompiled


def test_a_relative_import_resolves_against_the_package():
    namespace = {"__name__": "torch.nn.ember_test", "__package__": "torch.nn"}
    exec(
        "def act(x):\n"
        "    from . import functional as F\n"
        "    from .. import nn\n"
        "    return F.silu(x) + nn.functional.relu(x)\n",
        namespace,
    )
    act = namespace["act"]
    cache = CaptureCache(act)
    x = torch.randn(3, 4)
    torch.testing.assert_close(cache(x), act(x))
    assert cache.captures == 1 and not cache.breaks and not cache.refused


def late_import(x):
    y = x * 2
    import ember_test_late

    return y + ember_test_late.OFFSET


@pytest.fixture
def late_module(tmp_path, monkeypatch):
    """A module on the path that no one has imported; importing it counts."""
    (tmp_path / "ember_test_late.py").write_text(
        "import builtins\nbuiltins.ember_test_imports += 1\nOFFSET = 1.5\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("builtins.ember_test_imports", 0, raising=False)
    yield
    sys.modules.pop("ember_test_late", None)


def test_importing_a_module_not_yet_imported_breaks_and_resumes(late_module):
    import builtins

    result = capture(late_import, torch.randn(3))
    reason = result.break_reason
    assert "importing ember_test_late, which is not imported yet" in reason.reason
    assert reason.lineno == late_import.__code__.co_firstlineno + 2
    assert builtins.ember_test_imports == 0  # capture ran none of its code
    cache = CaptureCache(late_import)
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(cache(x), x * 2 + 1.5)
    assert builtins.ember_test_imports == 1  # imported for real, once
    assert cache.breaks and not cache.refused  # the graph before it, then resumed


def branches(x):
    if torch.compiler.is_compiling():
        x = x + 1
    if torch.compiler.is_exporting() or torch.jit.is_tracing():
        x = x * 100
    return x


def test_library_code_sees_a_compiler_at_work():
    cache = CaptureCache(branches)
    x = torch.randn(3)
    # Captured, the compile-friendly path; eager, the other, as torch.compile does.
    torch.testing.assert_close(cache(x), x + 1)
    torch.testing.assert_close(branches(x), x)
    assert cache.captures == 1 and not cache.breaks and not cache.refused


def moves(x, mask):
    # What library code writes to put a tensor where another one lives.
    mask = mask.to(device=x.device, dtype=torch.bool)
    y = x.to(x.device) + x.cpu() + x.to("cpu", torch.float64).float()
    return torch.where(mask, y + x.to(torch.float16).float(), 0.0)


def test_moving_a_tensor_to_its_device_is_captured():
    cache = CaptureCache(moves)
    for _ in range(2):
        x, mask = torch.randn(4, 5), torch.randint(0, 2, (4, 5))
        torch.testing.assert_close(cache(x, mask), moves(x, mask))
    assert cache.captures == 1 and not cache.breaks and not cache.refused


class Registry(collections.abc.MutableMapping):
    """A registry like transformers' attention interfaces: a class-wide mapping
    and a local one, read through the mapping protocol."""

    shared = {"double": lambda x: x * 2}

    def __init__(self):
        self.local = {}

    def __getitem__(self, key):
        if key in self.local:
            return self.local[key]
        return self.shared[key]

    def __setitem__(self, key, value):
        self.local[key] = value

    def __delitem__(self, key):
        del self.local[key]

    def __iter__(self):
        return iter({**self.shared, **self.local})

    def __len__(self):
        return len(self.shared.keys() | self.local.keys())


REGISTRY = Registry()


def look_up(x, name):
    if name not in REGISTRY or len(REGISTRY) < 1:
        return x
    fn = REGISTRY[name]
    return fn(x) + sum(1.0 for _ in REGISTRY) + callable(fn)


def test_user_mappings_are_read_through_their_own_methods():
    cache = CaptureCache(look_up)
    for name in ("double", "double", "missing"):
        x = torch.randn(3)
        torch.testing.assert_close(cache(x, name), look_up(x, name))
    assert not cache.breaks and not cache.refused
    REGISTRY["double"] = lambda x: x * 3  # a local override: a new entry
    x = torch.randn(3)
    torch.testing.assert_close(cache(x, "double"), look_up(x, "double"))
    del REGISTRY["double"]
    assert cache.captures == 3


def test_callable_answers_for_every_kind_of_value():
    def probe(x):
        def inner(y):
            return y

        return x + sum(
            float(callable(v))
            for v in (inner, x.add, print, torch.nn.Linear, len, 3, "s", (1,))
        )

    cache = CaptureCache(probe)
    x = torch.randn(2)
    torch.testing.assert_close(cache(x), probe(x))
    assert cache.captures == 1 and not cache.breaks and not cache.refused


class Recorded(dict):
    """A registry keyed by class name, like transformers' output recorders."""

    def get(self, obj):
        return super().get(type(obj).__name__) or {}


RECORDED = Recorded(Tensor={"scale": 2.0})


def recorded_scale(x):
    return x * RECORDED.get(x).get("scale", 1.0)


def test_super_reaches_dict_methods_of_a_dict_subclass():
    cache = CaptureCache(recorded_scale)
    x = torch.randn(3)
    torch.testing.assert_close(cache(x), x * 2.0)
    # A float entry is a graph input: a new value reuses the graph.
    RECORDED["Tensor"] = {"scale": 3.0}
    torch.testing.assert_close(cache(x), x * 3.0)
    assert cache.captures == 1
    RECORDED["Tensor"] = {"scale": 3}  # an int is a constant: a new capture
    torch.testing.assert_close(cache(x), x * 3)
    del RECORDED["Tensor"]  # a missing key recompiles
    torch.testing.assert_close(cache(x), x)
    RECORDED["Tensor"] = {"scale": 2.0}
    assert cache.captures == 3 and not cache.breaks and not cache.refused


class Stack(torch.nn.Module):
    def __init__(self, depth):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))
        self.depth = depth

    def forward(self, x):
        for layer in self.layers[: self.depth]:
            x = torch.relu(layer(x))
        return x + self.layers[-1:][0].bias


def test_a_slice_of_a_module_list_is_its_entries():
    model = Stack(2)
    cache = CaptureCache(model.forward)
    x = torch.randn(2, 4)
    torch.testing.assert_close(cache(x), model(x))
    model.layers.append(torch.nn.Linear(4, 4))  # another length recompiles
    torch.testing.assert_close(cache(x), model(x))
    assert cache.captures == 2 and not cache.breaks and not cache.refused


def env_scaled(x):
    import os

    if os.environ.get("EMBER_TEST_FLAG", "0") == "1":
        return x * 2
    return x + (os.environ.get("EMBER_TEST_UNSET") is None)


def test_environment_reads_are_guarded_by_their_variable(monkeypatch):
    monkeypatch.delenv("EMBER_TEST_FLAG", raising=False)
    monkeypatch.delenv("EMBER_TEST_UNSET", raising=False)
    cache = CaptureCache(env_scaled)
    x = torch.randn(3)
    torch.testing.assert_close(cache(x), x + 1)
    torch.testing.assert_close(cache(x), x + 1)
    monkeypatch.setenv("EMBER_TEST_FLAG", "1")  # the variable changed: recompiles
    torch.testing.assert_close(cache(x), x * 2)
    assert cache.captures == 2 and not cache.breaks and not cache.refused


class Chunked(torch.nn.Module):
    """transformers' apply_chunking_to_forward counts its function's arguments."""

    def chunk(self, x, y):
        return x * y

    def forward(self, x, y):
        import inspect

        n = len(inspect.signature(self.chunk).parameters)
        names = list(inspect.signature(Chunked.chunk).parameters)
        return self.chunk(x, y) + n + len(names)


def test_the_signature_of_a_known_function_folds():
    model = Chunked()
    cache = CaptureCache(model.forward)
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(cache(x, y), model(x, y))
    assert cache.captures == 1 and not cache.breaks and not cache.refused


GELU_TANH = functools.partial(torch.nn.functional.gelu, approximate="tanh")
SCALED = functools.partial(torch.mul, 2.0)


def activate(x):
    return GELU_TANH(x) + SCALED(x)


def test_a_partial_is_called_through_its_function():
    global GELU_TANH
    cache = CaptureCache(activate)
    x = torch.randn(4)
    torch.testing.assert_close(cache(x), activate(x))
    torch.testing.assert_close(cache(x), activate(x))
    GELU_TANH = functools.partial(torch.nn.functional.gelu, approximate="none")
    try:  # another partial, another keyword: a new entry, eager's answer
        torch.testing.assert_close(cache(x), activate(x))
    finally:
        GELU_TANH = functools.partial(torch.nn.functional.gelu, approximate="tanh")
    assert cache.captures == 2 and not cache.breaks and not cache.refused


def checkpointed_block(x, w):
    bias = torch.zeros(w.shape[1])
    bias.requires_grad = True  # T5's position bias under gradient checkpointing
    return torch.relu(x @ w + bias) * 2


def checkpointed(x, w):
    ckpt = functools.partial(torch.utils.checkpoint.checkpoint, use_reentrant=False)
    return ckpt(checkpointed_block, x, w).sum() + x.sum()


def test_checkpoint_regions_are_inlined_and_tagged_for_recompute():
    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 5)
    result = capture(checkpointed, x, w)
    assert result.break_reason is None
    (graph,) = result.graphs
    nodes = [n for n in graph.gm.graph.nodes if n.op.startswith("call_")]
    tagged = {n.name for n in nodes if n.meta.get("ember_recompute")}
    assert tagged == {"zeros", "matmul", "add", "relu", "mul"}
    assert {n.name for n in nodes} - tagged == {"sum_1", "sum_2", "add_1"}
    cache = CaptureCache(checkpointed)
    torch.testing.assert_close(cache(x, w), checkpointed(x, w))


@dataclasses.dataclass
class Point:
    x: float
    y: float


def matched(x, cfg):
    match cfg:
        case {"kind": "relu", "scale": s}:
            return x.relu() * s
        case [a, b, *others]:
            return x * a + b + len(others)
        case Point(px, y=py):
            return x + px * py
        case int(n) | float(n):
            return x * n
        case str() as name if name.startswith("t"):
            return torch.tanh(x)
        case _:
            return x


MATCH_CASES = [
    {"kind": "relu", "scale": 2.0},
    [1, 2, 3, 4],
    (5, 6),
    Point(1.0, 2.0),
    3,
    2.5,
    "tanh",
    "other",
    None,
]


def test_match_statements_are_captured_per_case():
    cache = CaptureCache(matched)
    for cfg in MATCH_CASES * 2:
        x = torch.randn(3)
        torch.testing.assert_close(cache(x, cfg), matched(x, cfg))
    assert not cache.breaks and not cache.refused
    assert cache.captures == len(MATCH_CASES)  # each case guarded, then reused


MODE = contextvars.ContextVar("ember_test_mode", default="train")


def by_mode(x):
    return x * 2 if MODE.get() == "train" else x - len(MODE.get("unused"))


def test_context_variables_are_read_and_guarded():
    cache = CaptureCache(by_mode)
    x = torch.randn(3)
    torch.testing.assert_close(cache(x), by_mode(x))
    token = MODE.set("eval")
    try:
        torch.testing.assert_close(cache(x), by_mode(x))  # another value: recompiled
    finally:
        MODE.reset(token)
    torch.testing.assert_close(cache(x), by_mode(x))
    assert cache.captures == 2 and not cache.breaks and not cache.refused


def iterates(x, d):
    total = x
    for i, k in enumerate(reversed(d)):
        total = total + i * d[k]
    for i, v in enumerate(t for t in (x, x * 2)):
        total = total + v * i
    return total, f"{len(d):02d}|{'a' * 2}|{3.5:.1f}"


def abstract_checks(x, n, items):
    number = isinstance(n, numbers.Number) and isinstance(n, int | float)
    sequence = isinstance(items, collections.abc.Sequence)
    iterable = issubclass(type(items), collections.abc.Iterable)
    return x * n if number and sequence and iterable else x


def test_builtins_over_any_iterable_and_abstract_classes():
    cache = CaptureCache(iterates)
    for d in ({"a": 1, "b": 2}, {"a": 1, "b": 2}, {"c": 3}):
        x = torch.randn(3)
        got, want = cache(x, d), iterates(x, d)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]
    assert cache.captures == 2  # the other keys recompiled
    checks = CaptureCache(abstract_checks)
    for n, items in ((2, [1]), (2.5, (1, 2)), ("no", [1])):
        x = torch.randn(3)
        torch.testing.assert_close(checks(x, n, items), abstract_checks(x, n, items))
    for cache_ in (cache, checks):
        assert not cache_.breaks and not cache_.refused


class WithParameterContainers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scales = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(3)) for _ in range(2)
        )
        self.shifts = torch.nn.ParameterDict({"a": torch.nn.Parameter(torch.randn(3))})
        self.lazy = torch.nn.LazyLinear(4)

    def forward(self, x):
        for p in self.scales:
            x = x * p
        return self.lazy(x + self.shifts["a"])


def test_parameter_containers_and_materialised_lazy_modules():
    model = WithParameterContainers()
    model(torch.randn(2, 3))  # materialises the lazy module
    cache = CaptureCache(model.forward)
    x = torch.randn(2, 3)
    with torch.no_grad():
        torch.testing.assert_close(cache(x), model(x))
    assert not cache.breaks and not cache.refused


def test_a_python_type_as_a_dtype_is_torchs_dtype():
    """``dtype=int`` (transformers' static sliding cache) and ``.to(float)``:
    the graph holds the dtype torch's argument parser reads, so it prints."""

    def fn(x):
        index = torch.tensor([-1], dtype=int, device=x.device)
        return x[:, index].to(float) + torch.ones(2, 1, dtype=bool)

    cache = CaptureCache(fn)
    x = torch.randn(2, 5)
    got, want = cache(x), fn(x)
    assert got.dtype is torch.float64
    torch.testing.assert_close(got, want)
    assert cache.captures == 1 and not cache.breaks and not cache.refused

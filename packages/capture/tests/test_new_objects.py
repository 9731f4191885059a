"""Objects made inside the function (a KV cache, a config copy, a loss module)
and the calls around them that library code makes: captured whole, compared with
eager on every call, rebuilt with their identity where they escape."""

import collections.abc
import copy
import logging
import typing

import torch
from conftest import CaptureCache

from ember_capture import capture
from ember_capture.kinds.autograd_functions import applier


class Layer:
    """A DynamicLayer-like cache entry: lazily initialised on first update."""

    kind = "full"

    def __init__(self):
        self.keys = None
        self.ready = False

    def update(self, k):
        if not self.ready:
            self.keys = k
            self.ready = True
        else:
            self.keys = torch.cat([self.keys, k], dim=-2)
        return self.keys


class Cache:
    """A DynamicCache-like container: layers appended as they are first used."""

    def __init__(self, layer_class=None):
        self.layers = []
        self.layer_class = layer_class or Layer

    def __len__(self):
        return len(self.layers)

    def update(self, k, index):
        while len(self.layers) <= index:
            self.layers.append(self.layer_class())
        return self.layers[index].update(k)

    @property
    def seq_length(self):
        return 0 if not self else self.layers[0].keys.shape[-2]


def attend(x, cache=None):
    if cache is None:
        cache = Cache()
    empty = bool(cache)
    a = cache.update(x * 2, 0)
    b = cache.update(x + 1, 1)
    a = cache.update(x - 1, 0)
    return a.sum(-1) + b.sum() + cache.seq_length + empty, cache, cache


def _captured_whole(cache: CaptureCache) -> bool:
    """What fullgraph=True asks: no graph break and nothing run eagerly."""
    return not cache.breaks and not cache.refused


def test_an_object_made_inside_is_captured_and_rebuilt_once():
    cache = CaptureCache(attend)
    for shape in [(2, 3, 4), (2, 3, 4), (1, 5, 4)]:
        x = torch.randn(shape)
        got, kv, same = cache(x)
        want, want_kv, _ = attend(x)
        torch.testing.assert_close(got, want)
        assert kv is same  # one object wherever the function held it
        assert type(kv) is Cache and kv.layer_class is Layer
        assert [type(layer) for layer in kv.layers] == [Layer, Layer]
        for layer, want_layer in zip(kv.layers, want_kv.layers):
            torch.testing.assert_close(layer.keys, want_layer.keys)
            assert layer.ready and "kind" not in vars(layer)
    assert _captured_whole(cache)
    assert cache.captures == 2  # the new shape only


def test_a_cache_passed_in_is_used_as_it_is():
    cache = CaptureCache(attend)
    given, expected = Cache(), Cache()
    x = torch.randn(2, 3, 4)
    got, kv, _ = cache(x, given)
    torch.testing.assert_close(got, attend(x, expected)[0])
    assert kv is given and len(given.layers) == 2
    torch.testing.assert_close(given.layers[0].keys, expected.layers[0].keys)


class Counter:
    def __init__(self):
        self.calls = 0

    def bump(self, x):
        self.calls += 1
        print("bumped")  # breaks the graph after changing the object
        return x + self.calls


def bump_twice(x):
    counter = Counter()
    y = counter.bump(x * 2)
    return y + counter.calls, counter


def test_a_break_after_a_call_changed_an_object_made_inside_does_not_redo_it():
    cache = CaptureCache(bump_twice)
    x = torch.randn(3)
    got, counter = cache(x)
    want, _ = bump_twice(x)
    torch.testing.assert_close(got, want)
    assert counter.calls == 1
    (refused,) = cache.refused  # the frame ran as Python: bump ran once
    assert "after the call had changed a list, dict or object" in refused.reason


def keep_across_break(x):
    counter = Counter()
    counter.calls = 5
    y = x * counter.calls
    print("break")
    counter.calls += 1
    return y + counter.calls, counter


def test_an_object_made_before_a_break_reaches_the_resume_function():
    cache = CaptureCache(keep_across_break)
    x = torch.randn(3)
    got, counter = cache(x)
    torch.testing.assert_close(got, keep_across_break(x)[0])
    assert type(counter) is Counter and counter.calls == 6
    assert cache.breaks


class Config:
    """A PretrainedConfig-like object: aliases mapped in its attribute hooks."""

    attribute_map = {"hidden": "hidden_size"}

    def __init__(self, hidden_size, scale):
        self.hidden = hidden_size
        self.scale = scale
        self.extra = {"mode": "sum"}

    def __setattr__(self, key, value):
        if key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        super().__setattr__(key, value)

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


def with_config(x, config):
    local = copy.deepcopy(config)
    local.hidden = local.hidden * 2
    local.extra["mode"] = "mean"
    delattr(local, "scale")
    assert not hasattr(local, "scale")
    local.offset = getattr(local, "missing", 1.5)
    made = Config(local.hidden_size, 3.0)
    object.__setattr__(made, "raw", 2.0)
    y = x * local.hidden + made.scale * made.raw + local.offset
    return y.mean() if local.extra["mode"] == "mean" else y.sum()


def test_attribute_hooks_and_deep_copies_of_frame_objects():
    cache = CaptureCache(with_config)
    config = Config(4, 0.5)
    for hidden in (4, 4, 6):
        config.hidden = hidden
        x = torch.randn(5)
        torch.testing.assert_close(cache(x, config), with_config(x, config))
        # the copy was changed, never the original
        assert config.hidden_size == hidden and config.scale == 0.5
        assert config.extra == {"mode": "sum"} and "offset" not in vars(config)
    assert _captured_whole(cache)
    assert cache.captures == 2  # hidden_size 6 recompiled; the copy read it


def shallow(x, config):
    local = copy.copy(config)
    local.extra["seen"] = True
    local.scale = 10.0
    return x * local.scale * config.scale


def test_a_shallow_copy_shares_its_parts_with_the_original():
    cache = CaptureCache(shallow)
    config, expected = Config(2, 0.5), Config(2, 0.5)
    x = torch.randn(3)
    torch.testing.assert_close(cache(x, config), shallow(x, expected))
    assert config.extra == expected.extra == {"mode": "sum", "seen": True}
    assert config.scale == 0.5
    assert _captured_whole(cache)


class PerLayer(collections.abc.Sequence):
    """A Sequence written with the mixins: __iter__ is the mixin's, which stops
    at IndexError."""

    def __init__(self, sizes):
        self.sizes = sizes

    def __len__(self):
        return len(self.sizes)

    def __getitem__(self, i):
        if i >= len(self.sizes):
            raise IndexError(i)
        return self.sizes[i]


class Scaler:
    def __init__(self, factor):
        self.factor = factor

    def __call__(self, x):
        return x * self.factor

    def __contains__(self, item):
        return item == self.factor


def protocols(x):
    total = x
    for size in PerLayer([1, 2, 3]):
        total = total + size
    scale = Scaler(2.0)
    if 2.0 in scale and 3.0 not in scale:
        total = scale(total)
    return total, list(reversed(PerLayer([4, 5])))


def test_sequence_mixins_calls_and_containment_inline():
    cache = CaptureCache(protocols)
    x = torch.randn(4)
    got, sizes = cache(x)
    want, want_sizes = protocols(x)
    torch.testing.assert_close(got, want)
    assert sizes == want_sizes == [5, 4]
    assert _captured_whole(cache)


log = logging.getLogger("ember_test_new_objects")


def logs(x):
    log.warning("scaling by %s", 2)
    y = x * 2
    log.info("done")
    return y


def test_logging_runs_after_the_graph_without_breaking_it(caplog):
    cache = CaptureCache(logs)
    with caplog.at_level(logging.INFO, logger=log.name):
        x = torch.randn(3)
        torch.testing.assert_close(cache(x), x * 2)
        torch.testing.assert_close(cache(x), x * 2)
    assert [r.getMessage() for r in caplog.records] == ["scaling by 2", "done"] * 2
    assert _captured_whole(cache) and cache.captures == 1


def loss(logits, labels):
    return torch.nn.CrossEntropyLoss(ignore_index=-1)(logits, labels)


def test_a_loss_module_made_inside_is_captured():
    cache = CaptureCache(loss)
    logits, labels = torch.randn(4, 5), torch.tensor([0, 3, -1, 2])
    torch.testing.assert_close(cache(logits, labels), loss(logits, labels))
    assert _captured_whole(cache)


def weighted(x):
    return torch.nn.CrossEntropyLoss(weight=torch.ones(3))(x, x.argmax(-1))


def test_a_module_made_inside_from_a_tensor_breaks_with_the_reason():
    result = capture(weighted, torch.randn(2, 3))
    reason = result.break_reason
    assert reason.lineno == weighted.__code__.co_firstlineno + 1
    assert "constructing a CrossEntropyLoss from a tensor" in reason.reason
    cache = CaptureCache(weighted)
    x = torch.randn(2, 3)
    torch.testing.assert_close(cache(x), weighted(x))


VALIDATORS = {typing.Union: 1, int: 2}  # ints: constants, guarded by value


def typed_scale(x):
    return x * VALIDATORS[typing.Union] + VALIDATORS[int]


def test_dicts_keyed_by_objects_no_literal_names_are_read_and_guarded():
    cache = CaptureCache(typed_scale)
    x = torch.randn(3)
    torch.testing.assert_close(cache(x), typed_scale(x))
    VALIDATORS[typing.Union] = 3
    try:
        torch.testing.assert_close(cache(x), typed_scale(x))
    finally:
        VALIDATORS[typing.Union] = 1
    assert _captured_whole(cache) and cache.captures == 2


class Frozen:
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def slotted(x, box):
    return x * box.value


def test_objects_with_slots_are_read_by_attribute():
    result = capture(slotted, torch.randn(2), Frozen(3.0))
    assert result.break_reason is None
    assert "value" in str(result.guards)


class Registry(collections.abc.MutableMapping):
    """transformers' GeneralInterface: a class-wide mapping behind the mixins."""

    _global = {"relu": torch.relu}

    def __init__(self):
        self._local = {}

    def __getitem__(self, key):
        if key in self._local:
            return self._local[key]
        return self._global[key]

    def __setitem__(self, key, value):
        self._local[key] = value

    def __delitem__(self, key):
        del self._local[key]

    def __iter__(self):
        return iter({**self._global, **self._local})

    def __len__(self):
        return len(self._global.keys() | self._local.keys())

    def pick(self, key, default):
        return super().get(key, default)


REGISTRY = Registry()


def dispatch(x):
    act = REGISTRY.pick("relu", torch.tanh)(x)
    fallback = REGISTRY.get("eager", torch.sigmoid)(x)
    return act + fallback + ("relu" in REGISTRY) + ("gelu" in REGISTRY)


def test_mapping_mixins_that_catch_key_errors_answer_by_their_contract():
    cache = CaptureCache(dispatch)
    x = torch.randn(5)
    torch.testing.assert_close(cache(x), dispatch(x))
    assert _captured_whole(cache)


class Gelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * (x + 0.044715 * x**3)))

    @staticmethod
    def backward(ctx, grad):
        return grad * 2.0  # not the derivative: a straight-through style rule


def custom(x, w):
    return Gelu.apply(x @ w).sum(-1)


def test_an_autograd_function_without_grad_is_its_forward_inlined():
    cache = CaptureCache(custom)
    x, w = torch.randn(3, 4), torch.randn(4, 4)
    with torch.no_grad():
        torch.testing.assert_close(cache(x, w), custom(x, w))
    assert _captured_whole(cache)


def test_an_autograd_function_with_grad_keeps_its_own_backward():
    x, w = torch.randn(3, 4), torch.randn(4, 4, requires_grad=True)
    result = capture(custom, x, w)
    assert result.break_reason is None
    (graph,) = result.graphs
    # one node, which aotgrad runs: autograd records Gelu's own backward
    assert [n for n in graph.gm.graph.nodes if n.target is applier(Gelu)]
    assert not [n for n in graph.gm.graph.nodes if n.target is torch.tanh]
    cache = CaptureCache(custom)
    cache(x, w).sum().backward()
    got, w.grad = w.grad, None
    custom(x, w).sum().backward()
    torch.testing.assert_close(got, w.grad)  # the user's rule, not autograd's


class Leaky(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        print("side effect")  # cannot be checked: the call breaks the graph
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad


def test_an_autograd_function_capture_cannot_check_breaks_the_graph():
    x = torch.randn(3, requires_grad=True)
    result = capture(lambda t: Leaky.apply(t * 2) + 1, x)
    assert "print()" in result.break_reason.reason


class Vec:
    """A value class with Python operators, made inside and passed in."""

    def __init__(self, data):
        self.data = data

    def __add__(self, other):
        if isinstance(other, Vec):
            return Vec(self.data + other.data)
        return NotImplemented

    def __radd__(self, other):
        return Vec(self.data + other)

    def __mul__(self, k):
        return Vec(self.data * k)

    def __eq__(self, other):
        return isinstance(other, Vec) and self.data.shape == other.data.shape


def arithmetic(x, given):
    v = Vec(x) + given
    v = 1.0 + v * 2
    v += Vec(x)
    same, differ = v == given, v != Vec(x[:1])
    return v.data, same, differ


def by_key(x, experts):
    ranked = sorted(experts, key=lambda e: e.data.shape[0], reverse=True)
    biggest = max(experts, key=lambda e: e.data.shape[0])
    return ranked[-1].data.sum() + biggest.data.sum() + x


def test_operators_of_user_classes_inline_their_dunders():
    cache = CaptureCache(arithmetic)
    x = torch.randn(3)
    got, want = cache(x, Vec(x * 3)), arithmetic(x, Vec(x * 3))
    torch.testing.assert_close(got[0], want[0])
    assert got[1:] == want[1:] == (True, True)
    assert _captured_whole(cache)


def test_sorted_min_and_max_take_a_key_function():
    cache = CaptureCache(by_key)
    experts = [Vec(torch.randn(n)) for n in (2, 4, 3)]
    x = torch.randn(())
    torch.testing.assert_close(cache(x, experts), by_key(x, experts))
    assert _captured_whole(cache)


def make_counter():
    calls = 0
    scale = 2.0

    def step(x):
        nonlocal calls, scale
        calls += 1
        scale = scale * 1.5
        return x * scale

    def helper_step(x):
        return step(x) + 1  # the write happens inside an inlined function

    return step, helper_step, lambda: (calls, scale)


def test_nonlocal_writes_are_replayed_into_the_enclosing_cells():
    step, helper_step, state = make_counter()
    want_step, want_helper, want_state = make_counter()
    cache, helper_cache = CaptureCache(step), CaptureCache(helper_step)
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(cache(x), want_step(x))
        torch.testing.assert_close(helper_cache(x), want_helper(x))
        assert state() == want_state()
    assert _captured_whole(cache) and _captured_whole(helper_cache)


def mapped(x, experts):
    scaled = list(map(lambda e, k: e.data * k, experts, range(1, 4)))
    big = filter(lambda e: e.data.shape[0] > 2, experts)
    return sum(t.sum() for t in scaled) + sum(e.data.sum() for e in big) + x


def test_map_and_filter_call_their_functions_on_each_item():
    cache = CaptureCache(mapped)
    experts = [Vec(torch.randn(n)) for n in (2, 4, 3)]
    x = torch.randn(())
    torch.testing.assert_close(cache(x, experts), mapped(x, experts))
    assert _captured_whole(cache)

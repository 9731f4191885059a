"""Changes that must invalidate a captured entry, counted like a dispatcher does:
each change captures exactly once more, results always equal eager, and going back
to an earlier input kind reuses its entry."""

import pytest
import torch
from conftest import CaptureCache, assert_tree_equal

FACTOR = 2.0


def check(cache, fn, calls):
    """Run ``calls`` (arg tuples, expected capture count after each) on ``cache``."""
    for args, captures in calls:
        assert_tree_equal(cache(*args), fn(*args))
        assert cache.captures == captures, (args, cache.captures)


def scaled(x, n, mode, flag):
    y = x * n if flag else x
    return y.sum() if mode == "sum" else y.mean()


def test_python_arguments_shape_dtype_and_requires_grad():
    cache = CaptureCache(scaled)
    x = torch.randn(3, 4)
    check(
        cache,
        scaled,
        [
            ((x, 2, "sum", True), 1),
            ((torch.randn(3, 4), 2, "sum", True), 1),  # fresh data: same entry
            ((x, 3, "sum", True), 2),  # int argument
            ((x, 3, "mean", True), 3),  # str argument
            ((x, 3, "mean", False), 4),  # bool argument
            ((torch.randn(5, 4), 2, "sum", True), 5),  # shape
            ((x.double(), 2, "sum", True), 6),  # dtype
            ((x.t().contiguous().t(), 2, "sum", True), 7),  # strides
            ((x, 2, "sum", True), 7),  # back to the first kind: reused
        ],
    )
    with torch.no_grad():
        check(cache, scaled, [((x, 2, "sum", True), 8)])  # grad mode
    xg = torch.randn(3, 4, requires_grad=True)
    out = cache(xg, 2, "sum", True)
    assert cache.captures == 9 and out.requires_grad


def uses_global(x):
    return x * FACTOR


def test_global_value_change():
    global FACTOR
    cache = CaptureCache(uses_global)
    x = torch.randn(3)
    check(cache, uses_global, [((x,), 1), ((x,), 1)])
    try:
        FACTOR = 5.0
        check(cache, uses_global, [((x,), 2)])
    finally:
        FACTOR = 2.0
    check(cache, uses_global, [((x,), 2)])


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.scale = 1.0
        self.drop = torch.nn.Dropout(0.0)

    def forward(self, x):
        y = self.fc(x) * self.scale
        if self.training:
            y = y + 1
        return self.drop(y)


def test_module_attribute_training_flag_and_replaced_submodule():
    block = Block()
    cache = CaptureCache(block.forward)
    x = torch.randn(2, 4)
    with torch.no_grad():
        check(cache, block, [((x,), 1), ((x,), 1)])
        block.scale = 3.0
        check(cache, block, [((x,), 2)])
        block.eval()
        check(cache, block, [((x,), 3)])
        block.fc = torch.nn.Linear(4, 4)  # same type: parameters are read per call
        check(cache, block, [((x,), 3)])
        block.fc = torch.nn.Sequential(torch.nn.Linear(4, 4))  # another type
        check(cache, block, [((x,), 4)])
        block.fc[0].weight.mul_(2.0)  # new values, same metadata: no recompile
        check(cache, block, [((x,), 4)])


def total(xs):
    out = 0
    for x in xs:
        out = out + x
    return out


def test_list_length_and_element_kinds():
    cache = CaptureCache(total)
    a, b, c = torch.randn(3), torch.randn(3), torch.randn(3)
    check(
        cache,
        total,
        [
            (([a, b],), 1),
            (([b, a],), 1),
            (([a, b, c],), 2),  # another length
            (([a, 2.0],), 3),  # an element of another kind
            (([a, b],), 3),
        ],
    )


def test_dict_keys():
    def f(d):
        return sum(v for v in d.values())

    cache = CaptureCache(f)
    a, b = torch.randn(2), torch.randn(2)
    check(cache, f, [(({"a": a, "b": b},), 1), (({"a": b, "b": a * 2},), 1)])
    check(cache, f, [(({"a": a, "c": b},), 2), (({"b": a, "a": b},), 3)])


def test_closure_cell_change():
    k = 2

    def f(x):
        return x * k

    cache = CaptureCache(f)
    x = torch.randn(3)
    check(cache, f, [((x,), 1)])
    k = 3
    check(cache, f, [((x,), 2)])


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(4, 4, bias=False)
        self.head = torch.nn.Linear(4, 4, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, x):
        return self.head(self.embed(x))


def test_tied_weights_are_one_input_and_untying_recompiles():
    model = Tied()
    cache = CaptureCache(model.forward)
    x = torch.randn(2, 4)
    with torch.no_grad():
        check(cache, model, [((x,), 1)])
        result = __import__("ember_capture").capture(model.forward, x)
        assert len(result.graphs[0].input_sources) == 2  # x and the one weight
        model.head.weight = torch.nn.Parameter(torch.randn(4, 4))
        check(cache, model, [((x,), 2)])


def test_aliased_arguments():
    def f(a, b):
        return a + b

    cache = CaptureCache(f)
    x, y = torch.randn(3), torch.randn(3)
    check(cache, f, [((x, x), 1), ((y, y), 1), ((x, y), 2), ((y, x), 2)])


SCALES = [2, 3]
ALIAS = SCALES
TABLE = {"a": 2}
TABLE_ALIAS = TABLE


def read_through_two_names(x):
    return x * SCALES[0] + x * ALIAS[1] + TABLE["a"] * TABLE_ALIAS["a"]


def test_one_container_under_two_names_recaptures_when_they_part():
    global ALIAS, TABLE_ALIAS
    cache = CaptureCache(read_through_two_names)
    x = torch.ones(3)
    check(cache, read_through_two_names, [((x,), 1)])
    try:
        ALIAS = [5, 7]  # the second name rebound: its items were never read
        check(cache, read_through_two_names, [((x,), 2)])
        TABLE_ALIAS = {"a": 10}
        check(cache, read_through_two_names, [((x,), 3)])
    finally:
        ALIAS, TABLE_ALIAS = SCALES, TABLE


def test_registering_a_parameter_recompiles_a_loop_over_parameters():
    m = torch.nn.Linear(2, 2)

    def f(x, module):
        total = x
        for p in module.parameters():
            total = total + p.sum()
        return total

    cache = CaptureCache(f)
    x = torch.randn(2)
    with torch.no_grad():
        check(cache, f, [((x, m), 1), ((x, m), 1)])
        m.register_parameter("extra", torch.nn.Parameter(torch.ones(3)))
        check(cache, f, [((x, m), 2)])


def test_module_dict_keys_are_guarded():
    d = torch.nn.ModuleDict({"a": torch.nn.Identity(), "b": torch.nn.Identity()})

    def f(x, modules):
        names = [k for k in modules]
        return x * len(names[0]) + (1 if "b" in modules else 0)

    cache = CaptureCache(f)
    x = torch.randn(2)
    check(cache, f, [((x, d), 1)])
    del d["b"]
    d["bb"] = torch.nn.Identity()
    check(cache, f, [((x, d), 2)])


class Options:
    pass


def test_missing_attribute_that_appears_recompiles():
    opts = Options()

    def f(x, o):
        return x * 2 if hasattr(o, "scale") else getattr(o, "shift", 1) + x

    cache = CaptureCache(f)
    x = torch.randn(2)
    check(cache, f, [((x, opts), 1), ((x, opts), 1)])
    opts.shift = 5
    check(cache, f, [((x, opts), 2)])
    opts.scale = 3
    check(cache, f, [((x, opts), 3)])


def test_string_method_on_an_argument_does_not_recompile():
    def f(x, mode):
        return x * 2 if mode.lower() == "double" else x

    cache = CaptureCache(f)
    x = torch.randn(2)
    check(cache, f, [((x, "Double"), 1), ((x, "Double"), 1), ((x, "half"), 2)])


def test_user_code_raising_raises_like_eager():
    def f(x, items):
        return x * items[3]

    cache = CaptureCache(f)
    with pytest.raises(IndexError):
        cache(torch.randn(2), [1, 2])


def scaled_by_float(x, scale):
    return torch.relu(x * scale) - scale


def test_float_arguments_are_graph_inputs_not_guarded_values():
    cache = CaptureCache(scaled_by_float)
    x = torch.randn(3, 4)
    calls = [((x, s), 1) for s in (0.5, 1.5, -2.25, 1e30)]
    calls += [((x, 3), 2)]  # an int is another type: captured again
    calls += [((x.long(), 0.5), 3), ((x.long(), 1.5), 4)]  # int tensor: by value
    check(cache, scaled_by_float, calls)


def test_guards_read_a_shared_part_once_and_still_see_it_change():
    """Guards on ``block.fc.weight``, ``block.fc.bias`` and the names of
    ``block.fc``'s parameters read ``block`` and ``block.fc`` once each per
    check; a new ``fc`` of other sizes, or a registered parameter, still fails
    it."""
    from ember_capture import CellView, capture

    block = torch.nn.Sequential()
    block.fc = torch.nn.Linear(2, 2)

    def f(x, block):
        for p in block.fc.parameters():
            x = x + p.sum()
        return x * block.fc.weight[0, 0] + block.fc.bias[0]

    result = capture(f, torch.randn(2), block)
    checker = result.guards.compile(f.__globals__, CellView((), None))
    assert checker.source.count("L['block']") == 1
    assert checker.source.count("_modules['fc']") == 1
    frame = {"x": torch.randn(2), "block": block}
    assert checker.check(frame)
    block.fc = torch.nn.Linear(2, 2)
    assert checker.check(frame)  # the same kinds of tensors: the entry holds
    block.fc = torch.nn.Linear(3, 2)
    assert not checker.check(frame)
    block.fc = torch.nn.Linear(2, 2)
    block.fc.register_parameter("extra", torch.nn.Parameter(torch.ones(1)))
    assert not checker.check(frame)
    assert "['weight', 'bias', 'extra']" in checker.failure(frame)

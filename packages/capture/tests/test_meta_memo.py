"""The memo of meta-kernel results: a replayed example output must carry exactly
the metadata (and aliasing) the meta kernel gives, and keys must tell apart every
input that can change it."""

import json
import operator
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from ember_capture import capture, meta_memo
from ember_capture.meta_memo import MISS, MetaMemo

OPS = [
    ("relu", "call_function", torch.relu, lambda a, b: (a,), {}),
    ("add alpha", "call_function", torch.add, lambda a, b: (a, b), {"alpha": 2}),
    ("gelu tanh", "call_function", F.gelu, lambda a, b: (a,), {"approximate": "tanh"}),
    ("layer_norm", "call_function", F.layer_norm, lambda a, b: (a, (6,)), {}),
    ("matmul", "call_function", operator.matmul, lambda a, b: (a, b.t()), {}),
    ("max dim", "call_function", torch.max, lambda a, b: (a, 1), {}),
    ("split", "call_function", torch.split, lambda a, b: (a, 2, 1), {}),
    ("view", "call_method", "view", lambda a, b: (a, 2, 2, 6), {}),
    ("transpose", "call_method", "transpose", lambda a, b: (a, 0, 1), {}),
    (
        "getitem",
        "call_function",
        operator.getitem,
        lambda a, b: (a, (slice(1, 3),)),
        {},
    ),
    ("add_", "call_method", "add_", lambda a, b: (a, b), {}),
    ("to dtype", "call_method", "to", lambda a, b: (a, torch.float64), {}),
    ("detach", "call_method", "detach", lambda a, b: (a,), {}),
]


def _describe(value):
    if isinstance(value, torch.Tensor):
        return (
            tuple(value.shape),
            value.stride(),
            value.storage_offset(),
            value.dtype,
            value.requires_grad,
            value.is_leaf,  # (an in-place op on a leaf that requires grad fails)
        )
    if isinstance(value, (tuple, list)):
        return type(value), [_describe(v) for v in value]
    return value


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("op", OPS, ids=[o[0] for o in OPS])
def test_replay_matches_the_meta_kernel(op, requires_grad):
    _, kind, target, make_args, kwargs = op
    a = torch.empty(4, 6, device="meta", requires_grad=requires_grad)
    b = torch.empty(4, 6, device="meta")
    if kind == "call_method" and target.endswith("_"):
        a = a.detach()  # in place on a leaf that requires grad is an error
    args = make_args(a, b)
    memo = MetaMemo()
    text, inputs, before = meta_memo.key(kind, target, args, kwargs)
    assert memo.replay(text, inputs) is MISS
    method = getattr(args[0], target) if kind == "call_method" else None
    expected = method(*args[1:], **kwargs) if method else target(*args, **kwargs)
    memo.record(text, inputs, before, expected)
    replayed = memo.replay(text, inputs)
    assert _describe(replayed) == _describe(expected)
    for got, want in zip(_flat(replayed), _flat(expected)):
        # a view of an input stays a view of that input
        assert _storages_shared(got, inputs) == _storages_shared(want, inputs)
    if kind == "call_method" and target == "add_":
        assert replayed is a


def _storages_shared(t, inputs):
    return [t.untyped_storage()._cdata == i.untyped_storage()._cdata for i in inputs]


def _flat(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _flat(v)]
    return []


def test_max_replays_as_its_return_type():
    a = torch.empty(3, 5, device="meta")
    memo = MetaMemo()
    text, inputs, before = meta_memo.key("call_function", torch.max, (a, 1), {})
    memo.record(text, inputs, before, torch.max(a, 1))
    replayed = memo.replay(text, inputs)
    assert type(replayed) is torch.return_types.max
    assert replayed.indices.dtype == torch.int64


def test_keys_tell_apart_what_changes_the_result():
    a = torch.empty(2, 3, device="meta")
    keys = {
        meta_memo.key("call_function", torch.add, (a, value), {})[0]
        for value in (1, 1.0, True, 2)
    }
    assert len(keys) == 4
    t = torch.empty(3, 2, device="meta").t()
    assert (
        meta_memo.key("call_function", torch.relu, (a,), {})[0]
        != meta_memo.key("call_function", torch.relu, (t,), {})[0]
    )
    as64 = torch.empty(2, 3, device="meta", dtype=torch.float64)
    assert (
        meta_memo.key("call_function", torch.relu, (a,), {})[0]
        != meta_memo.key("call_function", torch.relu, (as64,), {})[0]
    )
    with torch.no_grad():
        no_grad = meta_memo.key("call_function", torch.relu, (a,), {})[0]
    assert no_grad != meta_memo.key("call_function", torch.relu, (a,), {})[0]


def test_aliased_inputs_are_part_of_the_key():
    a = torch.empty(4, device="meta")
    b = torch.empty(4, device="meta")
    assert (
        meta_memo.key("call_function", torch.add, (a, a), {})[0]
        != meta_memo.key("call_function", torch.add, (a, b), {})[0]
    )


def test_functions_outside_torch_are_not_memoized():
    def user_op(x):
        return x + 1

    a = torch.empty(2, device="meta")
    assert meta_memo.key("call_function", user_op, (a,), {}) is None
    assert meta_memo.key("call_function", torch.relu, (a, object()), {}) is None


def test_in_place_metadata_change_is_not_memoized():
    a = torch.empty(2, 3, device="meta")
    memo = MetaMemo()
    text, inputs, before = meta_memo.key("call_method", "t_", (a,), {})
    result = a.t_()
    memo.record(text, inputs, before, result)
    assert memo.replay(text, inputs) is MISS


def test_an_in_place_op_on_a_replayed_result_captures():
    """The third layer's result is replayed (same metadata as the second's);
    like the layer's own result it is no leaf, so ``h += x`` (a residual, as
    torchvision's and transformers' ResNets write it) stays in the graph."""
    layers = [torch.nn.Linear(4, 4) for _ in range(3)]

    def f(x):
        h = layers[2](layers[1](layers[0](x)))
        h += x
        return h

    x = torch.randn(2, 4)
    result = capture(f, x)
    assert len(result.graphs) == 1 and result.break_reason is None
    torch.testing.assert_close(result.build([g.gm for g in result.graphs])(x), f(x))


def test_capture_records_and_reuses_what_it_ran():
    w = torch.randn(6, 6)

    def f(x):
        y = torch.addmm(torch.zeros(6), x, w)
        return F.gelu(y).softmax(-1).transpose(0, 1)[1:]

    x = torch.randn(4, 6)
    first = capture(f, x)
    assert first.meta_results
    second = capture(f, x)
    assert second.meta_results == first.meta_results
    out = second.build([g.gm for g in second.graphs])(x)
    torch.testing.assert_close(out, f(x))


# A new process told the entries runs no meta kernel, so it never imports
# torch._dynamo (torch's Python meta kernels import it on first use).
_WARM = textwrap.dedent(
    """
    import json, sys, torch
    import ember_capture
    ember_capture.remember_meta_results(json.loads(sys.stdin.read()))
    w, b = torch.randn(8, 8), torch.randn(8)
    def f(x):
        return torch.nn.functional.gelu(torch.addmm(b, x, w)).softmax(-1)
    result = ember_capture.capture(f, torch.randn(4, 8))
    print(len(result.graphs), "torch._dynamo" in sys.modules)
    """
)


def test_remembered_results_need_no_meta_kernel_in_a_new_process():
    w, b = torch.randn(8, 8), torch.randn(8)

    def f(x):
        return torch.nn.functional.gelu(torch.addmm(b, x, w)).softmax(-1)

    entries = capture(f, torch.randn(4, 8)).meta_results
    out = subprocess.run(
        [sys.executable, "-c", _WARM],
        input=json.dumps(entries),
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["1", "False"]


def test_entries_read_back_are_checked_before_they_are_replayed():
    def f(x):
        values, _ = x.transpose(0, 1)[1:].max(-1)
        return torch.split(values.view(2, 2) + 1, 1)

    entries = json.loads(json.dumps(capture(f, torch.randn(4, 5)).meta_results))
    assert entries and meta_memo.check_meta_results(entries) is None
    some_key = next(iter(entries))
    malformed = {
        "a list": [],
        "no key": {"x": ["none"]},
        "no tag": {some_key: []},
        "a shape of text": {some_key: ["new", "4", [1], 0, "torch.float32", False]},
        "an unknown dtype": {some_key: ["new", [4], [1], 0, "torch.float99", False]},
        "no such input": {some_key: ["input", 7]},
        "no such type": {some_key: ["seq", "os.system", []]},
    }
    for what, bad in malformed.items():
        assert meta_memo.check_meta_results(bad) is not None, what


class _CountingMode(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the aten ops run on meta tensors under it (as a faster provider
    of meta results would answer them)."""

    ops: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


def test_a_meta_mode_is_entered_around_each_meta_run():
    from ember_capture import capture_call

    _CountingMode.ops = []

    def f(x, w):
        return torch.relu(x @ w).sum(-1)

    x, w = torch.randn(3, 7), torch.randn(7, 11)  # sizes no other test uses:
    # the memo cannot answer
    result = capture_call(f, (x, w), {}, meta_mode=_CountingMode)
    assert {torch.ops.aten.mm.default, torch.ops.aten.relu.default} <= set(
        _CountingMode.ops
    )
    out = result.build([g.gm for g in result.graphs])(x, w)
    torch.testing.assert_close(out, f(x, w))

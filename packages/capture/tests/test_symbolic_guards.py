"""Guards of symbolic sizes as data (docs/dynamic.md): a tensor whose dims are
symbols matches any size >= 2 there with dense strides in the same order, and
relations between sizes check and print in the user's names. (The symbolic
capture itself needs a shape-rule provider: integration_tests/test_dynamic.py.)"""

import torch

from ember_capture import (
    CellView,
    Guard,
    GuardKind,
    GuardSet,
    LocalSource,
    SizeRelation,
    TensorSpec,
)


def _checker(guards):
    return GuardSet(guards).compile({}, CellView((), None))


def test_a_tensor_with_symbolic_dims_matches_other_sizes_only():
    spec = TensorSpec.of(torch.randn(2, 5, 4), dynamic=((1, "s0"),))
    assert str(spec) == (
        "Tensor(float32, cpu, size=[2, s0, 4], stride=dense, requires_grad=False)"
    )
    check = _checker([Guard(GuardKind.TENSOR_MATCH, LocalSource("x"), spec)])
    assert check.check({"x": torch.randn(2, 9, 4)})
    assert not check.check({"x": torch.randn(2, 1, 4)})  # 1 is never a symbol
    assert not check.check({"x": torch.randn(3, 9, 4)})  # dim 0 is fixed
    assert not check.check({"x": torch.randn(2, 4, 9).transpose(1, 2)})
    assert check.failure({"x": torch.randn(2, 1, 4)}) == (
        "L['x']: size(1) is 1 (sizes 0 and 1 are never symbolic)"
    )


def test_relations_between_sizes_check_and_print_with_the_users_names():
    x, n = LocalSource("x"), LocalSource("n")
    relations = (
        SizeRelation("(s0 > 16)", "s0 > 16", (("s0", x, 0),)),
        SizeRelation(
            "(s1 <= s0 // 2)", "s1 <= floor(s0/2)", (("s1", n, None), ("s0", x, 0))
        ),
    )
    guard = Guard(GuardKind.SIZES, None, relations)
    assert str(guard) == "(L['x'].size(0) > 16) and (L['n'] <= L['x'].size(0) // 2)"
    check = _checker([guard])
    assert check.check({"x": torch.ones(20), "n": 10})
    assert not check.check({"x": torch.ones(20), "n": 11})
    assert not check.check({"x": torch.ones(16), "n": 2})
    failure = check.failure({"x": torch.ones(16), "n": 2})
    assert failure.startswith("sizes: no longer (L['x'].size(0) > 16)")


def test_relations_from_two_stages_are_one_guard():
    x = LocalSource("x")
    a = SizeRelation("(s0 > 4)", "s0 > 4", (("s0", x, 0),))
    b = SizeRelation("(s0 < 9)", "s0 < 9", (("s0", x, 0),))
    guards = GuardSet([Guard(GuardKind.SIZES, None, (a,))])
    guards.add(Guard(GuardKind.SIZES, None, (a, b)))
    (merged,) = guards
    assert merged.expected == (a, b)

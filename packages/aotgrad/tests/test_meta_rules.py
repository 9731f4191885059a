"""ember's meta rules give what torch's meta kernels give (sizes, strides, dtype),
or decline; and a trace on meta tensors runs none of torch's Python meta kernels
for a plain program."""

import itertools
import subprocess
import sys
import warnings

import pytest
import torch

from ember_aotgrad.meta import NOT_COVERED, MetaRulesMode, meta_result, registry

aten = torch.ops.aten


def _meta(*shape, dtype=torch.float32):
    return torch.empty(shape, dtype=dtype, device="meta")


SHAPE_PAIRS = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((3, 1), (1, 4)),
    ((2, 1, 4), (3, 1)),
    ((), (3, 4)),
    ((3, 4), ()),
    ((0, 4), (4,)),
    ((1, 4), (3, 1)),
    ((2, 3, 1), (2, 3, 5)),
    ((5, 1, 1), (1,)),
]
DTYPES = [torch.float32, torch.int64, torch.bool, torch.bfloat16]


def _family_ops() -> list:
    ops = []
    for name in dir(aten):
        packet = getattr(aten, name)
        if isinstance(packet, torch._ops.OpOverloadPacket):
            for overload in packet.overloads():
                op = getattr(packet, overload)
                if registry.family_rule(op) is not None:
                    ops.append(op)
    return ops


_VALUES = {"Scalar": 2, "int": 1, "float": 0.5, "bool": False, "Scalar?": None}


def _arguments(op, tensors, numbers=False):
    """Arguments for ``op`` from its schema: the given tensors in order (the
    first again when it wants more; with ``numbers``, a Python number in place
    of every tensor but the first), a plain value for each other argument."""
    args, kwargs, given = [], {}, iter(tensors)
    first = True
    for arg in op._schema.arguments:
        kind = str(arg.type)
        if arg.has_default_value():
            continue
        if kind in ("Tensor", "Tensor?"):
            value = next(given, tensors[0]).clone()
            if numbers and not first:
                value = 2.0 if value.dtype.is_floating_point else 2
            first = False
        elif kind in _VALUES:
            value = _VALUES[kind]
        else:
            return None
        if arg.kwarg_only:
            kwargs[arg.name] = value
        else:
            args.append(value)
    return tuple(args), kwargs


def _layout(value):
    if isinstance(value, torch.Tensor):
        return tuple(value.shape), value.stride(), value.dtype
    if isinstance(value, (tuple, list)):
        return [_layout(v) for v in value]
    return value


def _strided(shape, strides, dtype=torch.float32, device="meta"):
    extent = 1 + sum((n - 1) * st for n, st in zip(shape, strides) if n > 0)
    storage = torch.ones(extent if 0 not in shape else 0, dtype=dtype, device=device)
    return storage.as_strided(shape, strides)


def _on_cpu(value):
    if isinstance(value, torch.Tensor):
        return _strided(value.shape, value.stride(), value.dtype, "cpu")
    return torch.device("cpu") if isinstance(value, torch.device) else value


def _check(op, args, kwargs) -> bool:
    """Compares the rule with eager (the CPU kernel on tensors of the same sizes
    and strides); returns whether the rule covered the call."""
    got = meta_result(op, args, kwargs)
    if got is NOT_COVERED:
        return False
    cpu_args = [_on_cpu(a) for a in args]
    cpu_kwargs = {k: _on_cpu(v) for k, v in kwargs.items()}
    try:
        want = op(*cpu_args, **cpu_kwargs)
    except RuntimeError:
        # a CPU kernel that rejects what the shapes allow (gelu_backward of a
        # broadcast gradient): the rule must agree with torch's meta kernel
        want = op(*args, **kwargs)
    assert _layout(got) == _layout(want), (op, args, kwargs)
    return True


@pytest.mark.parametrize("dtypes", list(itertools.product(DTYPES, repeat=2)), ids=str)
def test_pointwise_family_matches_torch(dtypes):
    covered = 0
    for op in _family_ops():
        for shapes in SHAPE_PAIRS:
            tensors = [_meta(*s, dtype=d) for s, d in zip(shapes, dtypes)]
            built = _arguments(op, tensors)
            if built is None:
                break
            covered += _check(op, *built)
    assert covered > 500  # the rule answers most of them, not only declines


def test_numbers_keep_their_kind_in_type_promotion():
    ints = _meta(3, dtype=torch.int64)
    doubles = torch.tensor(2.0, dtype=torch.float64)  # 0-dim CPU, not a number
    with MetaRulesMode():
        assert (ints * 0.5).dtype == torch.float32  # a wrapped Python number
        assert (ints * doubles).dtype == torch.float64
        assert (_meta(3) + doubles).dtype == torch.float32
        assert (doubles + doubles).device.type == "cpu"  # no meta tensor: not ours


def _layouts(shape):
    """Strides for ``shape``: row-major, reversed, the last two dims swapped,
    channels-last, a dim broadcast (stride 0), gaps between rows, and odd
    size-1 strides."""

    def dense(order):
        strides, step = [0] * len(shape), 1
        for d in order:
            strides[d] = step
            step *= max(shape[d], 1)
        return tuple(strides)

    rank = len(shape)
    row = dense(reversed(range(rank)))
    out = [row, dense(range(rank))]
    if rank >= 2:
        out.append(dense([rank - 2, rank - 1, *reversed(range(rank - 2))]))
    if rank == 4:
        out.append(dense([1, 3, 2, 0]))  # channels-last
    out += [
        tuple(
            0 if n > 1 and d == 0 else st for d, (n, st) in enumerate(zip(shape, row))
        )
    ]
    out += [tuple(2 * st for st in row)]
    out += [tuple(97 if n == 1 else st for n, st in zip(shape, row))]
    return list(dict.fromkeys(out))


LAYOUT_SHAPES = [
    ((3, 4), (3, 4)),
    ((2, 3, 4), (3, 4)),
    ((2, 1, 4), (3, 1)),
    ((4, 1, 3, 5), (4, 6, 3, 5)),
    ((2, 3, 4, 5), (2, 3, 4, 5)),
    ((1, 3, 4), (2, 1, 4)),
    ((2, 3, 4), ()),
]
LAYOUT_OPS = [
    aten.add.Tensor,
    aten.mul.Tensor,
    aten.where.self,
    aten.clone.default,
    aten.exp.default,
    aten.lt.Tensor,
    aten.addcmul.default,
    aten.maximum.default,
    aten.mul_.Tensor,
]


@pytest.mark.parametrize("op", LAYOUT_OPS, ids=str)
def test_pointwise_layouts_match_eager(op):
    covered = 0
    for shapes in LAYOUT_SHAPES:
        for first, second in itertools.product(*(_layouts(s) for s in shapes)):
            tensors = [_strided(shapes[0], first), _strided(shapes[1], second)]
            if op is aten.where.self:
                tensors[0] = tensors[0].to(torch.bool)
            built = _arguments(op, tensors)
            covered += _check(op, *built)
    assert covered > 20


# (shapes, dtypes, layout of each as an index into _layouts, numbers): the
# cases the review of the rules found wrong, and their neighbours
FAMILY_LAYOUT_CASES = [
    (((3, 1, 4), (3, 1, 4)), (torch.float32, torch.float32), (1, 2), False),
    (((3, 1, 4), (3, 1, 4)), (torch.int64, torch.float32), (3, 1), False),
    (((3, 4), (4,)), (torch.bool, torch.float32), (3, 1), False),
    (((3, 4), (3, 4)), (torch.bool, torch.float32), (3, 1), False),
    (((3, 4), (3, 4)), (torch.float32, torch.float32), (1, 0), False),
    (((3, 4), (3, 4)), (torch.float32, torch.float32), (0, 1), False),
    (((2, 3, 4), (3, 4)), (torch.float32, torch.float32), (2, 1), False),
    (((2, 3, 4), (3, 4)), (torch.int64, torch.int64), (4, 0), False),
    (((2, 3, 1, 1), (2, 3, 1, 1)), (torch.float32, torch.float32), (3, 3), True),
    (((2, 3, 4, 5), (2, 3, 4, 5)), (torch.float32, torch.float32), (3, 3), True),
    (((2, 3, 4, 5), (2, 3, 4, 5)), (torch.float32, torch.float32), (3, 0), False),
    (((0, 3), (1, 3)), (torch.float32, torch.float32), (1, 0), False),
    (((3, 1, 4), (3, 1, 4)), (torch.float32, torch.float32), (4, 4), True),
]


def test_every_pointwise_op_over_layouts_matches_eager():
    covered = 0
    for op in _family_ops():
        for shapes, dtypes, picks, numbers in FAMILY_LAYOUT_CASES:
            tensors = [
                _strided(shape, _layouts(shape)[min(k, len(_layouts(shape)) - 1)], d)
                for shape, d, k in zip(shapes, dtypes, picks)
            ]
            built = _arguments(op, tensors, numbers)
            if built is None:
                break
            covered += _check(op, *built)
    assert covered > 1000


def test_layouts_with_a_number_operand_match_eager():
    # a number operand turns TensorIterator's fast path off: the rule declines
    # where that would change the strides (size-1 dims of odd strides)
    for number in (torch.tensor(2.0), 2.0, 3):
        for shape in [(2, 1, 4), (2, 3, 4), (4, 1, 3, 5), (2, 3, 1, 1)]:
            for k, strides in enumerate(_layouts(shape)):
                covered = _check(
                    aten.mul.Tensor, (_strided(shape, strides), number), {}
                )
                assert covered or k > 0  # row-major is always covered


def test_the_probe_draws_no_warnings():
    # var of one element has no degrees of freedom; the real (8, 64) one has.
    # Through the mode, as capture runs it: torch turns a kernel's warning into
    # a Python one when the outermost call returns.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with MetaRulesMode():
            var = _meta(8, 64).var(1)
            std_mean = torch.std_mean(_meta(8, 64), 0)
    assert var.shape == (8,) and std_mean[0].shape == (64,)


def test_the_probe_runs_below_autocast():
    # the rule stands for the meta kernel, which autocast's casts come before
    a, b = _meta(3, 4), _meta(4, 5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        product = meta_result(aten.addmm.default, (_meta(5), a, b), {})
        assert product.dtype == torch.float32
        assert meta_result(aten.mul.Tensor, (a, a), {}).dtype == torch.float32


def test_what_the_review_found():
    meta = {"device": torch.device("meta")}
    ints = {**meta, "dtype": torch.int64}
    # float bounds in an integer arange: eager truncates them first
    assert meta_result(aten.arange.start_step, (0, 4.5, 1), ints) is NOT_COVERED
    # var_mean of complex numbers: a real variance, a complex mean
    z = _meta(2, 3, dtype=torch.complex64)
    assert _check(aten.var_mean.correction, (z, [1]), {"correction": 1})
    # an empty dim list reduces every dim for sum, none for any.dims
    assert meta_result(aten.any.dims, (_meta(2, 3), [], True), {}) is NOT_COVERED
    # a mask of another dtype, broadcast: eager copies it before laying out
    mask = _meta(1, 4, dtype=torch.bool).expand(3, 4)
    _check(aten.mul.Tensor, (mask, _meta(4, 3).t()), {})
    _check(
        aten.masked_fill.Scalar, (_meta(4, 3).t(), _meta(3, 4, dtype=torch.bool), 0), {}
    )
    # inputs of one dtype that the op computes in another (int / int): eager
    # copies them first, and an expanded input's copy is row-major
    spread = _strided((3, 4), (1, 0), torch.int64)
    _check(aten.div.Tensor, (spread, _strided((3, 4), (1, 3), torch.int64)), {})
    number = torch.empty((), device="meta")
    _check(aten.addcmul.default, (spread, spread.t().t(), number), {})
    condition = _strided((3, 4), (0, 1), torch.uint8)
    values = _strided((3, 4), (1, 3), torch.uint8)
    _check(aten.where.self, (condition, values, values), {})
    _check(aten.angle.default, (_meta(4, 3, dtype=torch.complex64).t(),), {})
    empty_index = [_meta(0, dtype=torch.int64)]
    _check(aten.index.Tensor, (_meta(5, 1, 3), empty_index), {})
    grad, out = _meta(3, 4), _meta(3, 4, dtype=torch.float64)
    backward = aten._softmax_backward_data.default
    assert meta_result(backward, (grad, out, 1, torch.float32), {}) is NOT_COVERED
    # two inputs that order the dims differently: add lists them as the schema
    # does (covered), threshold_backward does not (declines or matches)
    row, permuted = _meta(4, 6, 8), _meta(6, 4, 8).transpose(0, 1)
    assert _check(aten.add.Tensor, (row, permuted), {})
    assert _check(aten.mul.Tensor, (permuted, row), {})
    _check(aten.threshold_backward.default, (_meta(4, 3).t(), _meta(3, 4), 0), {})
    # an alias of the input is not a new tensor
    x = _meta(3, 4)
    assert meta_result(aten.positive.default, (x,), {}) is NOT_COVERED
    assert meta_result(aten.conj_physical.default, (x,), {}) is NOT_COVERED
    # out-of-range dims and sizes: eager raises, so torch's kernel must run
    index = _meta(3, dtype=torch.int64)
    for op, args in [
        (aten.index_select.default, (x, 2, index)),
        (aten.cat.default, ([x, x], 2)),
        (aten.gather.default, (x, 2, _meta(3, 4, dtype=torch.int64))),
        (aten.gather.default, (x, 1, _meta(6, 4, dtype=torch.int64))),
        (aten._softmax_backward_data.default, (x, x, 2, torch.float32)),
    ]:
        assert meta_result(op, args, {}) is NOT_COVERED, op


def test_memory_formats_other_than_row_major_decline():
    x = _meta(2, 3, 4, 5)
    clone = aten.clone.default
    assert _check(clone, (x,), {"memory_format": torch.contiguous_format})
    wide = {"memory_format": torch.channels_last}
    assert meta_result(clone, (x,), wide) is NOT_COVERED


def test_in_place_returns_its_target_and_declines_growth():
    x = torch.empty(3, 4, device="meta")
    assert meta_result(aten.add_.Tensor, (x, torch.empty(4, device="meta")), {}) is x
    small = torch.empty(4, device="meta")
    assert meta_result(aten.add_.Tensor, (small, x), {}) is NOT_COVERED
    ints = torch.empty(4, dtype=torch.int64, device="meta")
    assert meta_result(aten.add_.Tensor, (ints, small), {}) is NOT_COVERED
    spread = small.expand(3, 4)  # eager refuses to write a broadcast target
    assert meta_result(aten.add_.Tensor, (spread, x), {}) is NOT_COVERED


REDUCTIONS = [
    (aten.sum.dim_IntList, ([1], False)),
    (aten.sum.dim_IntList, ([0, -1], True)),
    (aten.sum.dim_IntList, ([],)),
    (aten.sum.dim_IntList, ([1], False), {"dtype": torch.float64}),
    (aten.mean.dim, ([-1], True)),
    (aten.amax.default, ([0],)),
    (aten.amin.default, ([1, 2], True)),
    (aten.sum.default, ()),
    (aten.mean.default, ()),
    (aten.var.correction, ([1],), {"correction": 1, "keepdim": True}),
    (aten.std.correction, (None,), {"correction": 0}),
    (aten.var_mean.correction, ([2],), {"correction": 1}),
    (aten.any.dim, (1, True)),
    (aten.all.dim, (0,)),
    (aten.prod.dim_int, (2, False)),
    (aten.logsumexp.default, ([1], True)),
    (aten.argmax.default, (1,)),
    (aten.argmin.default, (None, True)),
    (aten.max.dim, (1, True)),
    (aten.min.dim, (-1,)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.half])
@pytest.mark.parametrize("case", REDUCTIONS, ids=lambda c: str(c[0]))
def test_reductions_match_torch(case, dtype):
    op, args, kwargs = (*case, {})[:3]
    for x in (_meta(2, 3, 4, dtype=dtype), _meta(2, 1, 4, dtype=dtype)):
        _check(op, (x, *args), kwargs)
    assert meta_result(op, (_meta(0, 3, 4, dtype=dtype), *args), kwargs) is NOT_COVERED


@pytest.mark.parametrize(
    "op, shapes",
    [
        (aten.mm.default, [(3, 5), (5, 2)]),
        (aten.bmm.default, [(4, 3, 5), (4, 5, 2)]),
        (aten.addmm.default, [(2,), (3, 5), (5, 2)]),
        (aten.addmm.default, [(3, 1), (3, 5), (5, 2)]),
        (aten.baddbmm.default, [(4, 3, 2), (4, 3, 5), (4, 5, 2)]),
    ],
)
def test_matrix_products_match_torch(op, shapes):
    tensors = [_meta(*s) for s in shapes]
    assert _check(op, tuple(tensors), {})
    transposed = [
        t.transpose(-1, -2).contiguous().transpose(-1, -2) if t.dim() > 1 else t
        for t in tensors
    ]
    assert _check(op, tuple(transposed), {})
    mixed = [*tensors[:-1], tensors[-1].to(torch.float64)]
    assert meta_result(op, tuple(mixed), {}) is NOT_COVERED
    wrong = [*tensors[:-1], _meta(7, 2)]
    assert meta_result(op, tuple(wrong), {}) is NOT_COVERED


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_normalizations_match_torch(dtype):
    x = _meta(2, 3, 8, dtype=dtype)
    assert _check(aten._softmax.default, (x, -1, False), {})
    assert _check(aten._log_softmax.default, (x, 1, False), {})
    out = _meta(2, 3, 8, dtype=dtype)
    assert _check(aten._softmax_backward_data.default, (out, out, -1, dtype), {})
    w, b = _meta(8, dtype=dtype), _meta(8, dtype=dtype)
    assert _check(aten.native_layer_norm.default, (x, [8], w, b, 1e-5), {})
    assert _check(aten.native_layer_norm.default, (x, [3, 8], None, None, 1e-5), {})
    weight = _meta(10, 8, dtype=dtype)
    indices = _meta(2, 5, dtype=torch.int64)
    assert _check(aten.embedding.default, (weight, indices), {})


@pytest.mark.parametrize(
    "op, args, kwargs",
    [
        (aten._safe_softmax.default, (-1,), {}),
        (aten.triu.default, (1,), {}),
        (aten.tril.default, (), {}),
        (aten.cumsum.default, (1,), {}),
        (aten.cumsum.default, (0,), {"dtype": torch.float64}),
        (aten.cumprod.default, (-1,), {}),
    ],
    ids=str,
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_shape_keeping_ops_match_eager(op, args, kwargs, dtype):
    covered = _check(op, (_meta(3, 5, dtype=dtype), *args), kwargs)
    assert covered or dtype != torch.float32


def test_convolution_batch_norm_and_pooling_match_eager():
    x, w, b = _meta(2, 4, 9, 7), _meta(6, 2, 3, 2), _meta(6)
    conv = aten.convolution.default
    for stride, padding, dilation in [
        ([1, 1], [0, 0], [1, 1]),
        ([2, 1], [1, 2], [2, 1]),
    ]:
        args = (x, w, b, stride, padding, dilation, False, [0, 0], 2)
        assert _check(conv, args, {})
        assert _check(conv, (x, w, None, *args[3:]), {})
    lines = (_meta(2, 4, 9), _meta(6, 4, 3), None, [2], [1], [1], False, [0], 1)
    assert _check(conv, lines, {})
    wide = x.to(memory_format=torch.channels_last)
    assert meta_result(conv, (wide, w, b, *args[3:]), {}) is NOT_COVERED
    norm = aten.native_batch_norm.default
    stats = [_meta(4) for _ in range(4)]
    for training in (False, True):
        assert _check(norm, (x, *stats, training, 0.1, 1e-5), {})
    pool = aten.max_pool2d_with_indices.default
    for kernel, stride, padding, ceil in [
        ([2, 2], [], 0, False),
        ([3, 2], [2, 2], [1, 1], True),
    ]:
        assert _check(pool, (x, kernel, stride, padding, 1, ceil), {})


def test_cat_matches_eager():
    for shape, dim in [((2, 3, 4), 2), ((2, 3, 4, 5), 1), ((3, 4), 0)]:
        for layouts in itertools.product(_layouts(shape)[:3], repeat=2):
            parts = [_strided(shape, strides) for strides in layouts]
            _check(aten.cat.default, (parts, dim), {})
        assert _check(aten.cat.default, ([_meta(*shape)] * 3, -1), {})
    mixed = [_meta(2, 3), _meta(2, 5, dtype=torch.float64)]
    assert _check(aten.cat.default, (mixed, 1), {})
    past = _meta(0, dtype=torch.float64)  # a cache's empty past: skipped
    for layout in _layouts((2, 4, 8, 8)):
        step = _strided((2, 4, 8, 8), layout)
        assert _check(aten.cat.default, ([past, step], -2), {})
        assert _check(aten.cat.default, ([step, step.clone()], 1), {})
    assert (
        meta_result(aten.cat.default, ([_meta(2, 3), _meta(3, 3)], 1), {})
        is NOT_COVERED
    )


def test_indexing_matches_eager():
    x = _meta(5, 6, 7)
    rows, cols = _meta(3, dtype=torch.int64), _meta(2, 1, dtype=torch.int64)
    for indices in ([rows], [rows, rows], [cols, rows], [cols, rows, rows]):
        assert _check(aten.index.Tensor, (x, indices), {})
    assert meta_result(aten.index.Tensor, (x, [None, rows]), {}) is NOT_COVERED
    mask = _meta(5, dtype=torch.bool)
    assert meta_result(aten.index.Tensor, (x, [mask]), {}) is NOT_COVERED
    for dim in (0, 1, -1):
        for layout in _layouts((5, 6, 7))[:3]:
            assert _check(
                aten.index_select.default, (_strided(x.shape, layout), dim, rows), {}
            )


@pytest.mark.parametrize(
    "op, args",
    [
        (aten.empty_like.default, ()),
        (aten.zeros_like.default, ()),
        (aten.ones_like.default, ()),
        (aten.full_like.default, (7,)),
    ],
    ids=str,
)
def test_like_factories_match_eager(op, args):
    for layout in _layouts((2, 1, 3, 4)):
        x = _strided((2, 1, 3, 4), layout)
        for kwargs in (
            {},
            {"dtype": torch.int64},
            {"memory_format": torch.contiguous_format},
        ):
            covered = _check(op, (x, *args), kwargs)
            assert covered or layout[0] == 0  # an overlapping input declines


def test_gather_embedding_and_views_match_eager():
    x = _meta(4, 5)
    index = _meta(4, 3, dtype=torch.int64)
    assert _check(aten.gather.default, (x, 1, index), {})
    assert _check(aten.gather.default, (x.t(), 0, _meta(2, 4, dtype=torch.int64)), {})
    weight = _meta(10, 6)
    expanded = _meta(1, 8, dtype=torch.int64).expand(2, 8)
    assert _check(aten.embedding.default, (weight, expanded), {})
    assert _check(aten._unsafe_view.default, (_meta(2, 4, 6), [8, -1]), {})
    assert _check(aten._unsafe_view.default, (_meta(2, 4, 6), [2, 2, 2, 6]), {})
    assert (
        meta_result(aten._unsafe_view.default, (_meta(2, 4), [3, -1]), {})
        is NOT_COVERED
    )


def test_factories_match_torch():
    meta = {"device": torch.device("meta")}
    for fill in (1, 1.5, True):
        assert _check(aten.full.default, ([2, 3], fill), meta)
    assert _check(aten.full.default, ([2, 3], 1), {**meta, "dtype": torch.float16})
    for value in (3, 2.5, False):
        assert _check(aten.scalar_tensor.default, (value,), meta)
    for numbers in ((0, 10, 3), (0.5, 4, 1), (10, 0, -3), (0, 1, 0.1), (5, 5, 1)):
        assert _check(aten.arange.start_step, numbers, meta)
    for op in (aten.ones.default, aten.zeros.default):
        assert _check(op, ([2, 3],), meta)
        assert _check(op, ([2, 3],), {**meta, "dtype": torch.int32})
    assert _check(aten.arange.default, (7,), meta)
    assert _check(aten.arange.start, (2, 7.5), meta)
    x = _meta(2, 3, dtype=torch.bfloat16)
    for op in (aten.new_empty.default, aten.new_zeros.default, aten.new_ones.default):
        assert _check(op, (x, [4, 1]), {})
        assert _check(op, (x, [4]), {"dtype": torch.int64})
    grad = _meta(2, 5)
    assert _check(aten.select_backward.default, (grad, [2, 3, 5], 1, 0), {})
    assert _check(aten.slice_backward.default, (grad, [2, 9], 1, 0, 9, 2), {})
    cpu = {"device": torch.device("cpu")}
    assert meta_result(aten.full.default, ([2], 1.0), cpu) is NOT_COVERED


def test_mode_runs_torch_level_calls_through_the_rules():
    x, w, b = _meta(4, 8), _meta(16, 8), _meta(16)
    with MetaRulesMode():
        y = torch.nn.functional.linear(x, w, b).relu().sum(-1)
        z = torch.softmax(x * 2, -1)
    assert (y.shape, y.dtype) == ((4,), torch.float32)
    assert (z.shape, z.stride()) == ((4, 8), (8, 1))


_NO_FRONTEND = """
import sys, torch
import torch.nn.functional as F
from ember_aotgrad.meta import MetaRulesMode
x = torch.empty(8, 16, device="meta")
w = torch.empty(32, 16, device="meta")
with MetaRulesMode():
    h = F.linear(x, w, torch.empty(32, device="meta"))
    y = torch.softmax(F.gelu(h) * 0.5 + 1, -1).sum(-1).mean()
print(sorted(m for m in ("torch._dynamo", "sympy") if m in sys.modules))
"""


def test_common_ops_do_not_import_torchs_compiler_frontend():
    out = subprocess.run(
        [sys.executable, "-c", _NO_FRONTEND], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"

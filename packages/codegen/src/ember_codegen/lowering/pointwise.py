"""Lowering rules for elementwise aten ops: arithmetic, comparisons, math
functions, activations, casts and fills. Broadcasting is index math (size-1 and
missing dims read index 0); dtypes follow torch's promotion via the node's meta.
"""

from __future__ import annotations

import functools
import math

import torch

from ..ir.indexing import ZERO, Index
from ..ir.nodes import HALF_TYPES, Call, Const, Expr, IndexValue
from .core import TV, Lowerer, Unsupported, cast, constant, register

aten = torch.ops.aten


def broadcast_load(lo: Lowerer, tv: TV, out_index: tuple[Index, ...]) -> Expr:
    """``tv`` read at an output index, broadcasting its trailing-aligned dims."""
    offset = len(out_index) - len(tv.sizes)
    index = [ZERO if s == 1 else out_index[offset + d] for d, s in enumerate(tv.sizes)]
    return lo.load(tv, index)


def operand(lo: Lowerer, a: object, index: tuple[Index, ...], dtype) -> Expr:
    if isinstance(a, TV):
        return cast(broadcast_load(lo, a, index), dtype)
    if isinstance(a, (bool, int, float)):
        return constant(a, dtype)
    raise Unsupported


def _out(lo: Lowerer) -> torch.Tensor:
    meta = lo.out_meta
    if not isinstance(meta, torch.Tensor):
        raise Unsupported
    return meta


def elementwise(lo: Lowerer, fn, *args, compute: torch.dtype | None = None) -> TV:
    """The node's output computed as ``fn(*operands)``, operands in ``compute``
    (default: the output dtype), the result cast to the output dtype."""
    out = _out(lo)
    compute = compute or out.dtype

    def body(index):
        return fn(*(operand(lo, a, index, compute) for a in args))

    return lo.pointwise(out.shape, out.dtype, body, out.stride())


def call(op: str, *args: Expr, dtype=None) -> Call:
    return Call(op, args, dtype or args[0].dtype)


def _promoted(*args: object) -> torch.dtype:
    values = [a.meta if isinstance(a, TV) else a for a in args]
    if len(values) == 1:
        return values[0].dtype
    return torch.result_type(*values)


# --- arithmetic ------------------------------------------------------------------


def _binary(op: str):
    def rule(lo: Lowerer, a, b, alpha=1):
        if op in _ROUNDS_SCALARS:
            dtype = _out(lo).dtype
            a, b, alpha = (_rounded(v, dtype) for v in (a, b, alpha))
        if alpha != 1:
            return elementwise(lo, lambda x, y: _scaled(op, x, y, alpha), a, b)
        return elementwise(lo, lambda x, y: call(op, x, y), a, b)

    return rule


# The ops whose kernels take a Python number operand (and alpha) of a 16-bit
# float tensor rounded to its dtype, as torch's add and sub do (mul and div
# keep it a float: measured on bfloat16 and float16, torch 2.13).
_ROUNDS_SCALARS = ("add", "sub")


def _scaled(op: str, x, y, alpha):
    """``x + alpha * y`` (or ``-``): torch's vectorized kernel computes it as one
    fused multiply-add, rounded once, and so does this for float32 and float64."""
    if x.dtype in (torch.float32, torch.float64) and y.dtype == x.dtype:
        signed = alpha if op == "add" else -alpha
        return call("fma", y, constant(signed, y.dtype), x)
    return call(op, x, call("mul", y, constant(alpha, y.dtype)))


register(aten.add.Tensor, aten.add.Scalar)(_binary("add"))
register(aten.sub.Tensor, aten.sub.Scalar)(_binary("sub"))
register(aten.mul.Tensor, aten.mul.Scalar)(_binary("mul"))
register(aten.maximum.default)(_binary("maximum"))
register(aten.minimum.default)(_binary("minimum"))


@register(aten.div.Tensor, aten.div.Scalar)
def _div(lo: Lowerer, a, b):
    if not _out(lo).dtype.is_floating_point:
        raise Unsupported
    return elementwise(lo, lambda x, y: call("div", x, y), a, b)


@register(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(lo: Lowerer, a, b, alpha=1):
    dtype = _out(lo).dtype
    a, b, alpha = (_rounded(v, dtype) for v in (a, b, alpha))
    return elementwise(
        lo, lambda x, y: call("sub", y, call("mul", x, constant(alpha, x.dtype))), a, b
    )


@register(aten.pow.Tensor_Scalar)
def _pow(lo: Lowerer, a, exponent):
    if not _out(lo).dtype.is_floating_point or not isinstance(exponent, (int, float)):
        raise Unsupported
    # torch computes these exponents with multiplies and sqrt, so must we.
    special = {
        2: lambda x: call("mul", x, x),
        3: lambda x: call("mul", call("mul", x, x), x),
        0.5: lambda x: call("sqrt", x),
        -1: lambda x: call("reciprocal", x),
        1: lambda x: x,
    }
    if exponent in special:
        return elementwise(lo, special[exponent], a)
    exponent = _rounded(exponent, _out(lo).dtype)  # as torch's 16-bit pow takes it
    return elementwise(lo, lambda x: call("pow", x, constant(exponent, x.dtype)), a)


@register(aten.pow.Tensor_Tensor, aten.pow.Scalar)
def _pow_tensor(lo: Lowerer, base, exponent):
    # A tensor exponent (an optimizer's beta ** step): libm's pow per element, as
    # torch's kernel computes it outside its vectorized loop.
    if not _out(lo).dtype.is_floating_point:
        raise Unsupported
    return elementwise(lo, lambda x, y: call("pow", x, y), base, exponent)


# --- unary math ------------------------------------------------------------------

_FLOAT_UNARY = {
    aten.exp.default: "exp",
    aten.log.default: "log",
    aten.sqrt.default: "sqrt",
    aten.rsqrt.default: "rsqrt",
    aten.tanh.default: "tanh",
    aten.sin.default: "sin",
    aten.cos.default: "cos",
    aten.erf.default: "erf",
    aten.log1p.default: "log1p",
    aten.expm1.default: "expm1",
    aten.reciprocal.default: "reciprocal",
    aten.sigmoid.default: "sigmoid",
    aten.asin.default: "asin",
    aten.acos.default: "acos",
    aten.atan.default: "atan",
    aten.sinh.default: "sinh",
    aten.cosh.default: "cosh",
    aten.tan.default: "tan",
    aten.asinh.default: "asinh",
    aten.acosh.default: "acosh",
    aten.atanh.default: "atanh",
}
_ANY_UNARY = {
    aten.neg.default: "neg",
    aten.abs.default: "abs",
    aten.relu.default: "relu",
    aten.floor.default: "floor",
    aten.ceil.default: "ceil",
    aten.trunc.default: "trunc",
    aten.round.default: "round",
    # torch's sign of a real number; sgn is the same for real dtypes.
    aten.sign.default: "sign",
    aten.sgn.default: "sign",
}


# Rounding leaves integers as they are.
_ROUNDING = ("floor", "ceil", "trunc", "round")
# Eager's kernels of these reject bool, where their meta functions do not: the
# fallback node raises torch's error.
_NO_BOOL = (*_ROUNDING, "abs")


def _unary(op: str, float_only: bool):
    def rule(lo: Lowerer, a):
        if float_only and not _out(lo).dtype.is_floating_point:
            raise Unsupported
        if op in _NO_BOOL and a.dtype == torch.bool:
            raise Unsupported
        if op in _ROUNDING and not a.dtype.is_floating_point:
            return elementwise(lo, lambda x: x, a)
        return elementwise(lo, lambda x: call(op, x), a)

    return rule


for _op, _name in _FLOAT_UNARY.items():
    register(_op)(_unary(_name, float_only=True))
for _op, _name in _ANY_UNARY.items():
    register(_op)(_unary(_name, float_only=False))


def _float_only(lo: Lowerer) -> torch.dtype:
    dtype = _out(lo).dtype
    if not dtype.is_floating_point:
        raise Unsupported
    return dtype


@register(aten.round.decimals)
def _round_decimals(lo: Lowerer, a, *, decimals: int = 0):
    dtype = _float_only(lo)
    # Scaled by 10^|decimals| in the tensor's dtype, as torch does, so the same
    # products round: x * 100 then / 100, or x / 100 then * 100.
    scale = constant(10.0 ** abs(decimals), dtype)
    if decimals == 0:
        return elementwise(lo, lambda x: call("round", x), a)
    if decimals > 0:
        return elementwise(
            lo, lambda x: call("div", call("round", call("mul", x, scale)), scale), a
        )
    return elementwise(
        lo, lambda x: call("mul", call("round", call("div", x, scale)), scale), a
    )


@register(aten.atan2.default)
def _atan2(lo: Lowerer, a, b):
    _float_only(lo)
    return elementwise(lo, lambda x, y: call("atan2", x, y), a, b)


def _float_modulo(op: str):
    # Integer modulo by zero must raise, as in torch: integers are lowered only
    # for a divisor that is a nonzero Python number (i % 32), and -1, whose
    # C++ remainder overflows for the smallest integer, gives 0 directly.
    def rule(lo: Lowerer, a, b):
        dtype = _out(lo).dtype
        if dtype.is_floating_point:
            return elementwise(lo, lambda x, y: call(op, x, y), a, b)
        if dtype == torch.bool or isinstance(b, TV) or not isinstance(b, int) or not b:
            raise Unsupported
        if b == -1:
            return elementwise(lo, lambda x: constant(0, dtype), a)
        return elementwise(lo, lambda x, y: call(f"int_{op}", x, y), a, b)

    return rule


register(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)(
    _float_modulo("remainder")
)
register(aten.fmod.Tensor, aten.fmod.Scalar)(_float_modulo("fmod"))


# --- classification --------------------------------------------------------------


def _classify(test):
    """A rule giving ``test(x)`` of a floating input; never true of an integer."""

    def rule(lo: Lowerer, a):
        if not a.dtype.is_floating_point:
            out = _out(lo)
            return lo.pointwise(
                out.shape, out.dtype, lambda i: constant(False, out.dtype), out.stride()
            )
        return elementwise(lo, test, a, compute=a.dtype)

    return rule


def _equals(x: Expr, value: float) -> Expr:
    return call("eq", x, constant(value, x.dtype), dtype=torch.bool)


register(aten.isnan.default)(_classify(lambda x: call("ne", x, x, dtype=torch.bool)))
register(aten.isinf.default)(_classify(lambda x: _equals(call("abs", x), math.inf)))
register(aten.isposinf.default)(_classify(lambda x: _equals(x, math.inf)))
register(aten.isneginf.default)(_classify(lambda x: _equals(x, -math.inf)))


@register(aten.signbit.default)
def _signbit(lo: Lowerer, a):
    if a.dtype.is_floating_point:
        return elementwise(
            lo, lambda x: call("signbit", x, dtype=torch.bool), a, compute=a.dtype
        )
    zero = constant(0, a.dtype)
    return elementwise(
        lo, lambda x: call("lt", x, zero, dtype=torch.bool), a, compute=a.dtype
    )


@register(aten.gelu.default)
def _gelu(lo: Lowerer, a, approximate="none"):
    dtype = _float_only(lo)

    def c(v: float) -> Const:
        return constant(v, dtype)

    if approximate == "none":
        quirks = (
            _vectorized_gelu_quirks(a.dtype) if _vectorized_gelu(a) else (False, False)
        )
        nan_for_inf, overflows = quirks

        # Eager's vectorized kernels (taken for a contiguous input of two or
        # more elements) differ with the dtype and the CPU they were built for:
        # on some they return NaN for +inf, or overflow to inf near the top of
        # the range (x * (1 + erf) before the halving); bfloat16 does both on
        # an AVX-512 machine where float16 does neither. Where eager does, so
        # must we.
        def exact(x: Expr) -> Expr:
            if overflows:
                value = call("mul", call("mul", x, _one_plus_erf(x, c)), c(0.5))
            else:
                value = call("mul", call("mul", x, c(0.5)), _one_plus_erf(x, c))
            if not nan_for_inf:
                return value
            is_inf = call("eq", x, c(math.inf), dtype=torch.bool)
            return call("where", is_inf, c(math.nan), value, dtype=x.dtype)

        return elementwise(lo, exact, a)
    inner = math.sqrt(2 / math.pi)
    return elementwise(
        lo,
        lambda x: call(
            "mul",
            call("mul", c(0.5), x),
            call(
                "add",
                c(1.0),
                call(
                    "tanh",
                    call(
                        "mul",
                        c(inner),
                        call(
                            "add",
                            x,
                            call("mul", c(0.044715), call("mul", x, call("mul", x, x))),
                        ),
                    ),
                ),
            ),
        ),
        a,
    )


def _one_plus_erf(x: Expr, c) -> Expr:
    return call("add", c(1.0), call("erf", call("mul", x, c(math.sqrt(0.5)))))


@functools.cache
def _vectorized_gelu_quirks(dtype: torch.dtype) -> tuple[bool, bool]:
    """(NaN for +inf, overflow near the top) of eager's vectorized erf-gelu in
    ``dtype`` on this machine, read off the kernel itself once per process."""
    probe = torch.zeros(64, dtype=dtype)
    probe[0], probe[1] = math.inf, torch.finfo(dtype).max * 0.9
    out = torch.nn.functional.gelu(probe)
    return bool(out[0].isnan()), bool(out[1].isinf())


def _vectorized_gelu(a: object) -> bool:
    """Whether eager runs this gelu through its vectorized kernel."""
    return (
        isinstance(a, TV)
        and a.dtype.is_floating_point
        and a.meta.is_contiguous()
        and a.meta.numel() > 1
    )


@register(aten.silu.default)
def _silu(lo: Lowerer, a):
    _float_only(lo)
    return elementwise(lo, lambda x: call("mul", x, call("sigmoid", x)), a)


@register(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(lo: Lowerer, start, end, weight):
    # torch's vectorized kernel: from the nearer end, in one fused multiply-add.
    if _out(lo).dtype not in (torch.float32, torch.float64):
        raise Unsupported

    def body(s, e, w):
        near_start = call(
            "lt", call("abs", w), constant(0.5, w.dtype), dtype=torch.bool
        )
        minus_one = call("sub", w, constant(1, w.dtype))
        coeff = call("where", near_start, w, minus_one, dtype=w.dtype)
        base = call("where", near_start, s, e, dtype=s.dtype)
        return call("fma", coeff, call("sub", e, s), base)

    return elementwise(lo, body, start, end, weight)


@register(aten.addcmul.default)
def _addcmul(lo: Lowerer, a, t1, t2, value=1):
    # torch's vectorized kernel: self + value * t1 * t2, the add fused.
    def body(x, y, z):
        scaled = call("mul", constant(value, y.dtype), y)
        if x.dtype in (torch.float32, torch.float64):
            return call("fma", scaled, z, x)
        return call("add", x, call("mul", scaled, z))

    return elementwise(lo, body, a, t1, t2)


@register(aten.clamp.default)
def _clamp(lo: Lowerer, a, min=None, max=None):
    def body(x):
        if min is not None:
            x = call("clamp_min", x, constant(min, x.dtype))
        if max is not None:
            x = call("clamp_max", x, constant(max, x.dtype))
        return x

    return elementwise(lo, body, a)


@register(aten.clamp_min.default)
def _clamp_min(lo: Lowerer, a, min):
    return elementwise(lo, lambda x: call("clamp_min", x, constant(min, x.dtype)), a)


@register(aten.clamp_max.default)
def _clamp_max(lo: Lowerer, a, max):
    return elementwise(lo, lambda x: call("clamp_max", x, constant(max, x.dtype)), a)


# --- comparisons and logic -------------------------------------------------------

_COMPARE = {
    "eq": (aten.eq.Tensor, aten.eq.Scalar),
    "ne": (aten.ne.Tensor, aten.ne.Scalar),
    "lt": (aten.lt.Tensor, aten.lt.Scalar),
    "le": (aten.le.Tensor, aten.le.Scalar),
    "gt": (aten.gt.Tensor, aten.gt.Scalar),
    "ge": (aten.ge.Tensor, aten.ge.Scalar),
}


def _compare(op: str):
    def rule(lo: Lowerer, a, b):
        compute = _promoted(a, b)
        return elementwise(
            lo,
            lambda x, y: call(op, x, y, dtype=torch.bool),
            _rounded(a, compute),
            _rounded(b, compute),
            compute=compute,
        )

    return rule


def _rounded(value: object, dtype: torch.dtype) -> object:
    """A Python number as torch compares it with a 16-bit float tensor (or
    adds it, ``_ROUNDS_SCALARS``): rounded to that dtype (other arithmetic
    keeps it a float, see ``literal``)."""
    if dtype in HALF_TYPES and type(value) in (int, float):
        return torch.tensor(value, dtype=dtype).item()
    return value


for _name, _ops in _COMPARE.items():
    register(*_ops)(_compare(_name))


@register(aten.logical_not.default)
def _logical_not(lo: Lowerer, a):
    return elementwise(lo, lambda x: call("not", x), a, compute=torch.bool)


@register(aten.logical_xor.default)
def _logical_xor(lo: Lowerer, a, b):
    return elementwise(lo, lambda x, y: call("ne", x, y), a, b, compute=torch.bool)


def _integral(lo: Lowerer) -> torch.dtype:
    """The output dtype of a bitwise op; torch rejects floating operands."""
    dtype = _out(lo).dtype
    if dtype.is_floating_point:
        raise Unsupported  # torch raises its own error
    return dtype


@register(aten.bitwise_not.default)
def _bitwise_not(lo: Lowerer, a):
    if _integral(lo) == torch.bool:
        return _logical_not(lo, a)
    return elementwise(lo, lambda x: call("bitwise_not", x), a)


def _bitwise(op: str, logical: str):
    def rule(lo: Lowerer, a, b):
        # C++'s & | ^ on bools give ints; bools use the logical form instead.
        name = logical if _integral(lo) == torch.bool else op
        return elementwise(lo, lambda x, y: call(name, x, y), a, b)

    return rule


_BITWISE = {
    ("bitwise_and", "and"): aten.bitwise_and,
    ("bitwise_or", "or"): aten.bitwise_or,
    ("bitwise_xor", "ne"): aten.bitwise_xor,
}
for (_name, _logical), _packet in _BITWISE.items():
    register(_packet.Tensor, _packet.Scalar, _packet.Scalar_Tensor)(
        _bitwise(_name, _logical)
    )


@register(aten.logical_and.default)
def _logical_and(lo: Lowerer, a, b):
    return elementwise(lo, lambda x, y: call("and", x, y), a, b, compute=torch.bool)


@register(aten.logical_or.default)
def _logical_or(lo: Lowerer, a, b):
    return elementwise(lo, lambda x, y: call("or", x, y), a, b, compute=torch.bool)


@register(
    aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar
)
def _where(lo: Lowerer, cond, a, b):
    dtype = _out(lo).dtype

    def body(index):
        return call(
            "where",
            operand(lo, cond, index, torch.bool),
            operand(lo, a, index, dtype),
            operand(lo, b, index, dtype),
            dtype=dtype,
        )

    out = _out(lo)
    return lo.pointwise(out.shape, dtype, body, out.stride())


@register(aten.masked_fill.Scalar)
def _masked_fill(lo: Lowerer, a, mask, value):
    out = _out(lo)

    def body(index):
        return call(
            "where",
            operand(lo, mask, index, torch.bool),
            constant(value, out.dtype),
            operand(lo, a, index, out.dtype),
            dtype=out.dtype,
        )

    return lo.pointwise(out.shape, out.dtype, body, out.stride())


# --- copies, casts and fills -----------------------------------------------------


def _on_cpu(device) -> None:
    if device is not None and torch.device(device).type != "cpu":
        raise Unsupported


@register(aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default)
def _clone(lo: Lowerer, a, memory_format=None):
    return elementwise(lo, lambda x: x, a)


@register(aten._to_copy.default)
def _to_copy(lo: Lowerer, a, *, dtype=None, layout=None, device=None, **_):
    _on_cpu(device)
    if layout not in (None, torch.strided):
        raise Unsupported
    return elementwise(lo, lambda x: x, a, compute=a.dtype)


@register(aten.full.default, aten.scalar_tensor.default)
def _full(lo: Lowerer, size, fill_value=None, *, device=None, **_):
    _on_cpu(device)
    value = size if fill_value is None else fill_value  # scalar_tensor(value)
    out = _out(lo)
    return lo.pointwise(
        out.shape, out.dtype, lambda i: constant(value, out.dtype), out.stride()
    )


@register(aten.full_like.default)
def _full_like(lo: Lowerer, a, fill_value, *, device=None, **_):
    _on_cpu(device)
    out = _out(lo)
    return lo.pointwise(
        out.shape, out.dtype, lambda i: constant(fill_value, out.dtype), out.stride()
    )


@register(aten.zeros_like.default)
def _zeros_like(lo: Lowerer, a, *, device=None, **_):
    return _full_like(lo, a, 0, device=device)


@register(aten.ones_like.default)
def _ones_like(lo: Lowerer, a, *, device=None, **_):
    return _full_like(lo, a, 1, device=device)


@register(aten.arange.start_step, aten.arange.default, aten.arange.start)
def _arange(lo: Lowerer, *args, device=None, **_):
    _on_cpu(device)
    out = _out(lo)
    if out.dtype.is_floating_point or len(args) > 3:
        raise Unsupported  # float aranges round per element in torch's own way
    start, step = (
        (0, 1) if len(args) == 1 else (args[0], args[2] if len(args) > 2 else 1)
    )
    if not all(isinstance(v, int) for v in (start, step)):
        raise Unsupported
    return lo.pointwise(
        out.shape,
        out.dtype,
        lambda i: cast(IndexValue(i[0] * step + start), out.dtype),
    )

"""Shape rules of view ops: symbolic sizes and strides over the input's.

A view's strides are not dense in general, so each rule here says them; the
split of a view into chunks follows torch's own stride computation, with each
comparison of sizes decided (and guarded) by the ShapeEnv.
"""

from __future__ import annotations

import sympy
import torch

from .rules import Layout, NoShapeRule, Shape, _dim, _exprs, shape, shape_rule, strides
from .sym import ShapeEnv, expr_of

aten = torch.ops.aten
_ONE = sympy.Integer(1)
# torch's "to the end" for slice's end (INT64_MAX) and anything above a size
_BIG = 2**62


@shape_rule(aten.alias.default, aten.detach.default, aten.lift_fresh.default)
def _alias(env, x) -> Layout:
    return Layout(shape(x), strides(x))


@shape_rule(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _view(env, x, size) -> Layout:
    sizes = _infer_size(env, shape(x), _exprs(size))
    new_strides = view_strides(env, shape(x), strides(x), sizes)
    if new_strides is None:
        raise NoShapeRule("a view of a tensor whose strides cannot take that shape")
    return Layout(sizes, new_strides)


def _infer_size(env: ShapeEnv, old: Shape, new: Shape) -> Shape:
    numel = sympy.Mul(*old)
    if -1 not in new:
        if not env.decide(sympy.Eq(sympy.Mul(*new), numel)):
            raise NoShapeRule(f"shape {new} is invalid for {numel} elements")
        return new
    known = sympy.Mul(*(s for s in new if s != -1))
    missing = sympy.simplify(numel / known)
    if not missing.is_integer:
        rest = sympy.floor(numel / known)
        if not env.decide(sympy.Eq(rest * known, numel)):
            raise NoShapeRule(f"shape {new} is invalid for {numel} elements")
        missing = rest
    return tuple(missing if s == -1 else s for s in new)


def view_strides(env: ShapeEnv, old: Shape, old_strides: Shape, new: Shape):
    """The strides of ``new`` viewing a tensor of sizes ``old`` and strides
    ``old_strides`` without a copy, or None when no such strides exist
    (torch's computeStride, with each size comparison decided by ``env``)."""
    if not old:
        return tuple(_ONE for _ in new)
    out: list[sympy.Expr] = [sympy.Integer(0)] * len(new)
    view_d = len(new) - 1
    chunk_base = old_strides[-1]
    tensor_numel: sympy.Expr = _ONE
    view_numel: sympy.Expr = _ONE
    for tensor_d in range(len(old) - 1, -1, -1):
        tensor_numel = tensor_numel * old[tensor_d]
        if tensor_d == 0 or (
            not env.decide(sympy.Eq(old[tensor_d - 1], 1))
            and not env.decide(
                sympy.Eq(old_strides[tensor_d - 1], tensor_numel * chunk_base)
            )
        ):
            while view_d >= 0 and (
                env.decide(sympy.Lt(view_numel, tensor_numel))
                or env.decide(sympy.Eq(new[view_d], 1))
            ):
                out[view_d] = view_numel * chunk_base
                view_numel = view_numel * new[view_d]
                view_d -= 1
            if not env.decide(sympy.Eq(view_numel, tensor_numel)):
                return None
            if tensor_d > 0:
                chunk_base = old_strides[tensor_d - 1]
                tensor_numel = view_numel = _ONE
    if view_d != -1:
        return None
    return tuple(out)


@shape_rule(aten.expand.default)
def _expand(env, x, size, *, implicit=False) -> Layout:
    old, old_strides, new = shape(x), strides(x), _exprs(size)
    lead = len(new) - len(old)
    sizes, out = [], []
    for k, s in enumerate(new):
        if k < lead:
            sizes.append(s)
            out.append(sympy.Integer(0))
            continue
        src, src_stride = old[k - lead], old_strides[k - lead]
        if s == -1 or s == src:
            sizes.append(src)
            out.append(src_stride)
        elif src == 1:
            sizes.append(s)
            out.append(sympy.Integer(0))
        else:
            if not env.decide(sympy.Eq(s, src)):
                raise NoShapeRule(f"expand of size {src} to {s}")
            sizes.append(src)
            out.append(src_stride)
    return Layout(tuple(sizes), tuple(out))


@shape_rule(aten.permute.default)
def _permute(env, x, dims) -> Layout:
    dims = [_dim(d, x.dim()) for d in dims]
    sizes, st = shape(x), strides(x)
    return Layout(tuple(sizes[d] for d in dims), tuple(st[d] for d in dims))


@shape_rule(aten.transpose.int)
def _transpose(env, x, a, b) -> Layout:
    order = list(range(x.dim()))
    if order:
        a, b = _dim(a, x.dim()), _dim(b, x.dim())
        order[a], order[b] = order[b], order[a]
    return _permute(env, x, order)


@shape_rule(aten.t.default)
def _t(env, x) -> Layout:
    return _permute(env, x, list(range(x.dim()))[::-1])


@shape_rule(aten.unsqueeze.default)
def _unsqueeze(env, x, dim) -> Layout:
    sizes, st = list(shape(x)), list(strides(x))
    d = _dim(dim, len(sizes) + 1)
    stride = sizes[d] * st[d] if d < len(sizes) else _ONE
    sizes.insert(d, _ONE)
    st.insert(d, stride)
    return Layout(tuple(sizes), tuple(st))


@shape_rule(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def _squeeze(env, x, dims=None) -> Layout:
    sizes, st = shape(x), strides(x)
    if dims is None:
        dims = range(len(sizes))
    elif isinstance(dims, int):
        dims = [dims]
    drop = {_dim(d, len(sizes)) for d in dims} if sizes else set()
    keep = [
        k
        for k in range(len(sizes))
        if k not in drop or not env.decide(sympy.Eq(sizes[k], 1))
    ]
    return Layout(tuple(sizes[k] for k in keep), tuple(st[k] for k in keep))


def _clamp(env: ShapeEnv, value: sympy.Expr, size: sympy.Expr) -> sympy.Expr:
    """A slice bound as eager normalizes it: negative counts from the end, and
    the result lies in [0, size]."""
    if value.is_Integer and int(value) >= _BIG:
        return size
    if env.decide(sympy.Lt(value, 0)):
        value = value + size
        return sympy.Integer(0) if env.decide(sympy.Lt(value, 0)) else value
    return size if env.decide(sympy.Gt(value, size)) else value


@shape_rule(aten.slice.Tensor)
def _slice(env, x, dim=0, start=None, end=None, step=1) -> Layout:
    sizes, st = list(shape(x)), list(strides(x))
    d = _dim(dim, len(sizes))
    lo = _clamp(env, expr_of(0 if start is None else start), sizes[d])
    hi = _clamp(env, expr_of(_BIG if end is None else end), sizes[d])
    if env.decide(sympy.Lt(hi, lo)):
        hi = lo
    sizes[d] = sympy.ceiling((hi - lo) / step) if step != 1 else hi - lo
    st[d] = st[d] * step
    return Layout(tuple(sizes), tuple(st))


@shape_rule(aten.select.int)
def _select(env, x, dim, index) -> Layout:
    sizes, st = list(shape(x)), list(strides(x))
    d = _dim(dim, len(sizes))
    del sizes[d], st[d]
    return Layout(tuple(sizes), tuple(st))


@shape_rule(aten.split.Tensor, aten.unsafe_split.Tensor)
def _split(env, x, split_size, dim=0) -> list[Layout]:
    size = shape(x)[_dim(dim, x.dim())]
    chunk = expr_of(split_size)
    count = sympy.ceiling(size / chunk)
    hint = env.evaluate(count)
    if not env.decide(sympy.Eq(count, hint)):
        raise NoShapeRule("split into a number of chunks that changes")
    sizes = [chunk] * (hint - 1) + [size - chunk * (hint - 1)]
    return _split_with_sizes(env, x, sizes, dim)


@shape_rule(aten.split_with_sizes.default, aten.unsafe_split_with_sizes.default)
def _split_with_sizes(env, x, split_sizes, dim=0) -> list[Layout]:
    sizes, st = shape(x), strides(x)
    d = _dim(dim, len(sizes))
    out = []
    for s in split_sizes:
        part = list(sizes)
        part[d] = expr_of(s)
        out.append(Layout(tuple(part), st))
    return out


@shape_rule(aten.unbind.int)
def _unbind(env, x, dim=0) -> list[Layout]:
    d = _dim(dim, x.dim())
    count = shape(x)[d]
    hint = env.evaluate(count)
    env.decide(sympy.Eq(count, hint))  # as many outputs as the example had
    one = _select(env, x, d, 0)
    return [one] * hint


@shape_rule(aten.as_strided.default)
def _as_strided(env, x, size, stride, storage_offset=None) -> Layout:
    return Layout(_exprs(size), _exprs(stride))

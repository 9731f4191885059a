"""Shape rules: the symbolic sizes (and, for views, strides) of an aten op's outputs.

A rule gets the op's arguments as traced (tensors with symbolic sizes, SymInts)
and returns one ``Layout`` per output tensor, in sympy (an op that returns ints,
``aten.size``, gives their expressions). Rules are registered
per op overload, or per family (every pointwise op); an op with no rule makes
the trace specialize (docs/dynamic.md). A rule that must branch on sizes asks
``env.decide``, which records the relation it took as a guard.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sympy
import torch
from torch.utils import _pytree as pytree

from .sym import ShapeEnv, expr_of
from .values import NoShapeRule

aten = torch.ops.aten
Shape = tuple[sympy.Expr, ...]


@dataclass(frozen=True, slots=True)
class Layout:
    """One output's symbolic sizes; ``strides`` only for a view (others are
    dense in the order of the strides the op gave at the example sizes)."""

    sizes: Shape
    strides: Shape | None = None


Rule = Callable[..., "Layout | Sequence[Layout]"]
RULES: dict[torch._ops.OpOverload, Rule] = {}


def shape_rule(*ops: torch._ops.OpOverload) -> Callable[[Rule], Rule]:
    """Registers the decorated ``rule(env, *args, **kwargs)`` for ``ops``."""

    def register(rule: Rule) -> Rule:
        for op in ops:
            RULES[op] = rule
        return rule

    return register


def rule_for(func: torch._ops.OpOverload) -> Rule:
    rule = RULES.get(func)
    if rule is not None:
        return rule
    if torch.Tag.pointwise in func.tags:
        return _in_place if func._schema.is_mutable else _pointwise
    functional = _functional_rule(func)
    if functional is not None:
        return functional
    raise NoShapeRule(f"no symbolic shape rule for {func}")


def _functional_rule(func: torch._ops.OpOverload) -> Rule | None:
    """``x.scatter_(...)``: the rule of ``scatter`` (the checks it makes, if
    any), and the result is ``x`` itself; None when the op is not such a twin,
    or changes ``x``'s own sizes (``unsqueeze_``, ``t_``)."""
    name = func.overloadpacket.__name__
    if not (func._schema.is_mutable and name.endswith("_")):
        return None
    if torch.Tag.inplace_view in func.tags:
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    twin = getattr(packet, func._overloadname, None) if packet else None
    rule = RULES.get(twin)
    if rule is None:
        return None

    def in_place(env: ShapeEnv, x, *args, **kwargs) -> Layout:
        rule(env, x, *args, **kwargs)
        return _in_place(env, x)

    return in_place


# -- helpers -------------------------------------------------------------------------


def shape(t: torch.Tensor) -> Shape:
    return tuple(expr_of(s) for s in t.shape)


def strides(t: torch.Tensor) -> Shape:
    return tuple(expr_of(s) for s in t.stride())


def _dim(d: int, ndim: int) -> int:
    return d + ndim if d < 0 else d


def _exprs(values: Sequence) -> Shape:
    return tuple(expr_of(v) for v in values)


def broadcast(env: ShapeEnv, *shapes: Shape) -> Shape:
    """Broadcast of ``shapes`` (right-aligned); two different symbolic sizes
    that meet are taken equal (a guard), as eager would require."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(ndim):
        size: sympy.Expr = sympy.Integer(1)
        for s in shapes:
            j = len(s) - ndim + k
            if j < 0 or s[j] == 1:
                continue
            if size == 1:
                size = s[j]
            elif size != s[j] and not env.decide(sympy.Eq(size, s[j])):
                raise NoShapeRule(f"sizes {size} and {s[j]} do not broadcast")
        out.append(size)
    return tuple(out)


def require_equal(env: ShapeEnv, a: sympy.Expr, b: sympy.Expr, what: str) -> None:
    """Two sizes the op needs equal (eager checks them): equal for every size,
    or guarded equal (they are at the example sizes)."""
    if not env.decide(sympy.Eq(a, b)):
        raise NoShapeRule(f"{what}: sizes {a} and {b} differ")


def _tensors(args: object) -> list[torch.Tensor]:
    return [a for a in pytree.tree_leaves(args) if isinstance(a, torch.Tensor)]


def _pointwise(env: ShapeEnv, *args, **kwargs) -> Layout:
    return Layout(broadcast(env, *(shape(t) for t in _tensors((args, kwargs)))))


def _in_place(env: ShapeEnv, x, *args, **kwargs) -> Layout:
    """``x.sigmoid_()``: the result is ``x``, a view's strides included."""
    return Layout(shape(x), strides(x))


@shape_rule(
    aten.normal_.default,
    aten.uniform_.default,
    aten.exponential_.default,
    aten.bernoulli_.float,
)
def _drawn_in_place(env: ShapeEnv, x, *args, **kwargs) -> Layout:
    """Random values drawn into ``x``: its sizes whatever they are."""
    return _in_place(env, x)


@shape_rule(aten.copy.default)
def _copy(env: ShapeEnv, x, src, non_blocking=False) -> Layout:
    """``x`` with ``src``'s values: ``src`` broadcasts to ``x``'s sizes (a
    static cache's ``keys.copy_(new)``), as eager checks."""
    sizes = shape(x)
    if len(shape(src)) > len(sizes) or broadcast(env, sizes, shape(src)) != sizes:
        raise NoShapeRule("copy of a source that does not broadcast to the destination")
    return Layout(sizes)


@shape_rule(aten.masked_fill_.Scalar, aten.masked_fill_.Tensor)
def _masked_fill_(env: ShapeEnv, x, mask, value) -> Layout:
    """``x.masked_fill_(mask, v)`` (an attention mask built in place): the
    result is ``x``; the mask broadcasts to it (not tagged pointwise)."""
    broadcast(env, shape(x), shape(mask))
    return _in_place(env, x)


# -- same sizes as an argument --------------------------------------------------------


def _like_first(env: ShapeEnv, x, *args, **kwargs) -> Layout:
    return Layout(shape(x))


shape_rule(
    aten.clone.default,
    aten._to_copy.default,
    aten._softmax.default,
    aten._log_softmax.default,
    aten._safe_softmax.default,
    aten.empty_like.default,
    aten.zeros_like.default,
    aten.ones_like.default,
    aten.full_like.default,
    aten.rand_like.default,
    aten.randn_like.default,
    aten.bernoulli.default,
    aten.bernoulli.p,
    aten.cumsum.default,
    aten.tril.default,
    aten.triu.default,
    aten.zero.default,
    aten.flip.default,
    aten.fill.Scalar,
    aten.fill.Tensor,
    aten.scatter.src,
    aten.scatter.value,
    aten.scatter_add.default,
    aten.index_put.default,
    aten.index_fill.int_Scalar,
    aten.index_fill.int_Tensor,
    aten.lift_fresh_copy.default,
    aten.roll.default,
)(_like_first)


@shape_rule(aten.index_copy.default)
def _index_copy(env: ShapeEnv, x, dim, index, source) -> Layout:
    """``x.index_copy(dim, index, source)``: ``x``'s sizes; ``source`` has one
    slice per index (a 0-d or 1-d index) and ``x``'s other sizes, as eager
    checks."""
    sizes, written = shape(x), shape(source)
    if len(written) != len(sizes) or index.dim() > 1:
        raise NoShapeRule("index_copy with another rank or a multi-dim index")
    d = _dim(dim, len(sizes))
    count = shape(index)[0] if index.dim() else sympy.Integer(1)
    require_equal(env, written[d], count, "index_copy's source and index")
    for k, (a, b) in enumerate(zip(sizes, written)):
        if k != d:
            require_equal(env, a, b, "index_copy's source and destination")
    return Layout(sizes)


@shape_rule(aten.index_copy_.default)
def _index_copy_(env: ShapeEnv, x, dim, index, source) -> Layout:
    """In place (a static KV cache's write): the result is ``x``."""
    _index_copy(env, x, dim, index, source)
    return _in_place(env, x)


@shape_rule(aten.glu_backward.default, aten.adaptive_max_pool2d_backward.default)
def _input_gradient(env, grad, x, *args) -> Layout:
    """A backward whose gradient has its input's sizes."""
    return Layout(shape(x))


@shape_rule(aten.glu.default)
def _glu(env, x, dim=-1) -> Layout:
    """Half of ``dim``, which must be even (eager raises otherwise)."""
    sizes = list(shape(x))
    d = dim % len(sizes)
    if not env.decide(sympy.Eq(sympy.Mod(sizes[d], 2), 0)):
        raise NoShapeRule("glu of an odd size")
    sizes[d] = sizes[d] // 2
    return Layout(tuple(sizes))


@shape_rule(
    aten._softmax_backward_data.default, aten._log_softmax_backward_data.default
)
def _softmax_backward(env, grad, *args, **kwargs) -> Layout:
    return Layout(shape(grad))


@shape_rule(aten.native_dropout.default)
def _dropout(env, x, *args, **kwargs) -> list[Layout]:
    return [Layout(shape(x)), Layout(shape(x))]


@shape_rule(aten.sort.default, aten.sort.stable)
def _sort(env, x, *args, **kwargs) -> list[Layout]:
    return [Layout(shape(x)), Layout(shape(x))]


@shape_rule(aten.topk.default)
def _topk(env, x, k, dim=-1, *args, **kwargs) -> list[Layout]:
    sizes = list(shape(x))
    sizes[_dim(dim, len(sizes))] = expr_of(k)
    return [Layout(tuple(sizes)), Layout(tuple(sizes))]


# -- reductions ---------------------------------------------------------------------


def _reduced(x: torch.Tensor, dims, keepdim: bool) -> Shape:
    sizes = shape(x)
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        dims = range(len(sizes))
    elif isinstance(dims, int):
        dims = [dims]
    drop = {_dim(d, len(sizes)) for d in dims} if sizes else set()
    if keepdim:
        return tuple(sympy.Integer(1) if k in drop else s for k, s in enumerate(sizes))
    return tuple(s for k, s in enumerate(sizes) if k not in drop)


@shape_rule(
    aten.sum.dim_IntList,
    aten.mean.dim,
    aten.amax.default,
    aten.amin.default,
    aten.prod.dim_int,
    aten.any.dim,
    aten.any.dims,
    aten.all.dim,
    aten.argmax.default,
    aten.argmin.default,
    aten.logsumexp.default,
)
def _reduction(env, x, dims=None, keepdim=False, *args, **kwargs) -> Layout:
    if isinstance(dims, bool):  # prod.dim_int(x, dim, keepdim) has an int dim
        dims = None
    return Layout(_reduced(x, dims, kwargs.get("keepdim", keepdim)))


@shape_rule(aten.sum.default, aten.mean.default, aten.any.default)
def _full_reduction(env, x, *args, **kwargs) -> Layout:
    return Layout(())


@shape_rule(aten.var.correction, aten.std.correction)
def _var(env, x, dims=None, *args, correction=None, keepdim=False) -> Layout:
    return Layout(_reduced(x, dims, keepdim))


@shape_rule(aten.var_mean.correction)
def _var_mean(env, x, dims=None, *args, correction=None, keepdim=False):
    out = Layout(_reduced(x, dims, keepdim))
    return [out, out]


@shape_rule(aten.max.dim, aten.min.dim)
def _max_dim(env, x, dim, keepdim=False) -> list[Layout]:
    out = Layout(_reduced(x, [dim], keepdim))
    return [out, out]


# -- matmuls ------------------------------------------------------------------------


@shape_rule(aten.mm.default)
def _mm(env, a, b) -> Layout:
    require_equal(env, shape(a)[1], shape(b)[0], "mm")
    return Layout((shape(a)[0], shape(b)[1]))


@shape_rule(aten.addmm.default)
def _addmm(env, bias, a, b, **kwargs) -> Layout:
    out = _mm(env, a, b)
    broadcast(env, shape(bias), out.sizes)
    return out


@shape_rule(aten.bmm.default)
def _bmm(env, a, b) -> Layout:
    require_equal(env, shape(a)[0], shape(b)[0], "bmm")
    require_equal(env, shape(a)[2], shape(b)[1], "bmm")
    return Layout((shape(a)[0], shape(a)[1], shape(b)[2]))


@shape_rule(aten.baddbmm.default)
def _baddbmm(env, bias, a, b, **kwargs) -> Layout:
    out = _bmm(env, a, b)
    broadcast(env, shape(bias), out.sizes)
    return out


# -- normalization ------------------------------------------------------------------


@shape_rule(aten.native_layer_norm.default)
def _layer_norm(env, x, normalized_shape, w=None, b=None, *args) -> list[Layout]:
    sizes = shape(x)
    axis = len(sizes) - len(normalized_shape)
    for size, normalized in zip(sizes[axis:], _exprs(normalized_shape)):
        require_equal(env, size, normalized, "layer_norm")
    for param in (w, b):
        if param is not None:
            for size, normalized in zip(shape(param), _exprs(normalized_shape)):
                require_equal(env, size, normalized, "layer_norm")
    stats = sizes[:axis] + (sympy.Integer(1),) * len(normalized_shape)
    return [Layout(sizes), Layout(stats), Layout(stats)]


@shape_rule(aten.native_layer_norm_backward.default)
def _layer_norm_backward(env, grad, x, normalized_shape, mean, rstd, w, b, mask):
    out = [Layout(shape(x))]
    out.append(Layout(shape(w)) if w is not None else None)
    out.append(Layout(shape(b)) if b is not None else None)
    return out


# -- indexing -----------------------------------------------------------------------


@shape_rule(aten.embedding.default)
def _embedding(env, weight, indices, *args) -> Layout:
    return Layout(shape(indices) + shape(weight)[1:])


@shape_rule(aten.embedding_dense_backward.default)
def _embedding_backward(env, grad, indices, num_weights, *args) -> Layout:
    return Layout((expr_of(num_weights), shape(grad)[-1]))


@shape_rule(aten.gather.default)
def _gather(env, x, dim, index, **kwargs) -> Layout:
    return Layout(shape(index))


@shape_rule(aten.index_select.default)
def _index_select(env, x, dim, index) -> Layout:
    sizes = list(shape(x))
    sizes[_dim(dim, len(sizes))] = shape(index)[0] if shape(index) else sympy.Integer(1)
    return Layout(tuple(sizes))


@shape_rule(aten.index.Tensor)
def _index(env, x, indices) -> Layout:
    """Advanced indexing whose index tensors sit next to each other: their
    broadcast shape replaces the indexed dims in place (else it goes first)."""
    sizes = shape(x)
    at = [k for k, i in enumerate(indices) if i is not None]
    index_shape = broadcast(env, *(shape(indices[k]) for k in at))
    if at != list(range(at[0], at[-1] + 1)):
        rest = tuple(s for k, s in enumerate(sizes) if k not in at)
        return Layout(index_shape + rest)
    return Layout(sizes[: at[0]] + index_shape + sizes[at[-1] + 1 :])


# -- joining and padding ------------------------------------------------------------


@shape_rule(aten.cat.default)
def _cat(env, tensors, dim=0) -> Layout:
    parts = [shape(t) for t in tensors if not (t.dim() == 1 and shape(t)[0] == 0)]
    d = _dim(dim, len(parts[0]))
    for part in parts[1:]:
        for k, (a, b) in enumerate(zip(parts[0], part)):
            if k != d:
                require_equal(env, a, b, "cat")
    total = sympy.Add(*(p[d] for p in parts))
    return Layout((*parts[0][:d], total, *parts[0][d + 1 :]))


@shape_rule(aten.stack.default)
def _stack(env, tensors, dim=0) -> Layout:
    sizes = shape(tensors[0])
    for t in tensors[1:]:
        for a, b in zip(sizes, shape(t)):
            require_equal(env, a, b, "stack")
    d = _dim(dim, len(sizes) + 1)
    return Layout((*sizes[:d], sympy.Integer(len(tensors)), *sizes[d:]))


@shape_rule(aten.constant_pad_nd.default)
def _pad(env, x, pad, value=0) -> Layout:
    sizes = list(shape(x))
    for k in range(len(pad) // 2):
        d = len(sizes) - 1 - k
        sizes[d] = sizes[d] + expr_of(pad[2 * k]) + expr_of(pad[2 * k + 1])
    return Layout(tuple(sizes))


# -- sizes from arguments (factories, backward of views) ------------------------------


@shape_rule(
    aten.empty.memory_format,
    aten.zeros.default,
    aten.ones.default,
    aten.rand.default,
    aten.randn.default,
)
def _factory(env, size, *args, **kwargs) -> Layout:
    return Layout(_exprs(size))


@shape_rule(aten.full.default, aten.empty_strided.default)
def _full(env, size, *args, **kwargs) -> Layout:
    return Layout(_exprs(size))


@shape_rule(
    aten.new_empty.default,
    aten.new_zeros.default,
    aten.new_ones.default,
    aten.new_full.default,
    aten.new_empty_strided.default,
)
def _new(env, x, size, *args, **kwargs) -> Layout:
    return Layout(_exprs(size))


@shape_rule(aten.scalar_tensor.default)
def _scalar(env, *args, **kwargs) -> Layout:
    return Layout(())


@shape_rule(aten.arange.default, aten.arange.start, aten.arange.start_step)
def _arange(env, *args, **kwargs) -> Layout:
    numbers = [a for a in args if not isinstance(a, (torch.dtype, torch.device))]
    start, end, step = 0, numbers[0], 1
    if len(numbers) >= 2:
        start, end = numbers[0], numbers[1]
    if len(numbers) >= 3:
        step = numbers[2]
    span = expr_of(end) - expr_of(start)
    return Layout((sympy.ceiling(span / expr_of(step)),))


@shape_rule(aten.slice_backward.default, aten.select_backward.default)
def _view_backward(env, grad, input_sizes, *args) -> Layout:
    return Layout(_exprs(input_sizes))


# -- convolution and pooling ----------------------------------------------------------


def _window(size, kernel, stride, padding, dilation, ceil_mode=False) -> sympy.Expr:
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    if ceil_mode:
        raise NoShapeRule("ceil_mode pooling over a symbolic size")
    return sympy.floor(span / stride) + 1


@shape_rule(aten.convolution.default)
def _convolution(
    env, x, w, bias, stride, padding, dilation, transposed, output_padding, groups
) -> Layout:
    if transposed:
        raise NoShapeRule("transposed convolution over symbolic sizes")
    xs, ws = shape(x), shape(w)
    require_equal(env, xs[1], ws[1] * groups, "convolution")
    spatial = tuple(
        _window(xs[2 + k], ws[2 + k], stride[k], padding[k], dilation[k])
        for k in range(len(xs) - 2)
    )
    return Layout((xs[0], ws[0], *spatial))


@shape_rule(
    aten.native_batch_norm.default, aten._native_batch_norm_legit_no_training.default
)
def _batch_norm(env, x, *args) -> list[Layout]:
    channels = Layout((shape(x)[1],))
    for param in args[:4]:
        if isinstance(param, torch.Tensor):
            require_equal(env, shape(param)[0], shape(x)[1], "batch_norm")
    return [Layout(shape(x)), channels, channels]


@shape_rule(aten.native_batch_norm_backward.default)
def _batch_norm_backward(env, grad, x, w, *args) -> list[Layout]:
    channels = Layout((shape(x)[1],))
    return [Layout(shape(x)), channels, channels]


@shape_rule(aten.repeat.default)
def _repeat(env, x, repeats) -> Layout:
    sizes = (sympy.Integer(1),) * (len(repeats) - x.dim()) + shape(x)
    return Layout(tuple(s * expr_of(r) for s, r in zip(sizes, repeats)))


@shape_rule(aten.max_pool2d_with_indices.default)
def _max_pool2d(env, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    sizes = shape(x)
    kernel = _pair(kernel)
    stride = _pair(stride) if stride else kernel
    padding, dilation = _pair(padding), _pair(dilation)
    spatial = tuple(
        _window(sizes[-2 + k], kernel[k], stride[k], padding[k], dilation[k], ceil_mode)
        for k in range(2)
    )
    out = Layout((*sizes[:-2], *spatial))
    return [out, out]


@shape_rule(aten.max_pool2d_with_indices_backward.default)
def _max_pool2d_backward(env, grad, x, *args) -> Layout:
    return Layout(shape(x))


@shape_rule(aten.avg_pool2d.default)
def _avg_pool2d(env, x, kernel, stride=(), padding=0, ceil_mode=False, *args):
    return _max_pool2d(env, x, kernel, stride, padding, 1, ceil_mode)[0]


@shape_rule(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool2d(env, x, output_size) -> Layout:
    return Layout((*shape(x)[:-2], *_exprs(output_size)))


@shape_rule(aten.adaptive_max_pool2d.default)
def _adaptive_max_pool2d(env, x, output_size) -> list[Layout]:
    out = _adaptive_avg_pool2d(env, x, output_size)
    return [out, out]  # the values and their indices


def _pair(value) -> tuple:
    return (
        tuple(value) * (2 // len(value))
        if isinstance(value, (list, tuple))
        else (
            value,
            value,
        )
    )


# -- losses -------------------------------------------------------------------------


@shape_rule(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)
def _nll_loss(env, x, target, weight, reduction, ignore_index) -> list[Layout]:
    out = Layout(shape(target)) if reduction == 0 else Layout(())
    return [out, Layout(())]


@shape_rule(aten.nll_loss_backward.default, aten.nll_loss2d_backward.default)
def _nll_loss_backward(env, grad, x, *args) -> Layout:
    return Layout(shape(x))


@shape_rule(
    aten.mse_loss.default,
    aten.l1_loss.default,
    aten.smooth_l1_loss.default,
    aten.huber_loss.default,
    aten.binary_cross_entropy.default,
    aten.binary_cross_entropy_with_logits.default,
)
def _elementwise_loss(env, x, target, *args, **kwargs) -> Layout:
    reduction = kwargs.get("reduction", _reduction_arg(args))
    sizes = broadcast(env, shape(x), shape(target))
    return Layout(sizes if reduction == 0 else ())


def _reduction_arg(args) -> int:
    """The ``reduction`` enum among a loss's positional extras (default mean)."""
    ints = [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
    return ints[0] if ints else 1


@shape_rule(aten.mse_loss_backward.default, aten.binary_cross_entropy_backward.default)
def _loss_backward(env, grad, x, *args, **kwargs) -> Layout:
    return Layout(shape(x))


@shape_rule(aten.convolution_backward.default)
def _convolution_backward(env, grad, x, w, bias_sizes, *args) -> list[Layout | None]:
    outs = [Layout(shape(x)), Layout(shape(w)), Layout((shape(w)[0],))]
    return _wanted(outs, args[-1])


def _wanted(outs: list[Layout], mask: Sequence[bool]) -> list[Layout | None]:
    """A backward's gradients, None where its output mask asks for none."""
    return [out if wanted else None for out, wanted in zip(outs, mask)]


@shape_rule(aten.native_group_norm.default)
def _group_norm(env, x, w, b, n, c, hw, groups, eps) -> list[Layout]:
    stats = Layout((expr_of(n), expr_of(groups)))
    return [Layout(shape(x)), stats, stats]


@shape_rule(aten.native_group_norm_backward.default)
def _group_norm_backward(env, grad, x, mean, rstd, w, *args) -> list[Layout | None]:
    channels = Layout((shape(x)[1],))
    return _wanted([Layout(shape(x)), channels, channels], args[-1])


@shape_rule(
    aten._adaptive_avg_pool2d_backward.default, aten.avg_pool2d_backward.default
)
def _pool_backward(env, grad, x, *args) -> Layout:
    return Layout(shape(x))


@shape_rule(aten.size.default)
def _size(env, x) -> Shape:
    """``x.size()`` read as a list of ints (torch.lstm's, F.interpolate's):
    the symbolic sizes themselves."""
    return shape(x)


@shape_rule(aten.stride.default)
def _stride(env, x) -> Shape:
    return strides(x)

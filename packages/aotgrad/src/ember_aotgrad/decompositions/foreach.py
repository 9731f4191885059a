"""Foreach ops (``torch._foreach_add_(params, grads, alpha=-lr)``, what the
optimizers' foreach forms run) as one op per tensor, and ``addcdiv`` written
with core ops (``addcmul`` and ``lerp`` are core: their kernels end in a fused
multiply-add, which core ops would round twice).

A foreach op is its per-tensor op applied at each position of its lists; an
in-place one writes each result back with ``copy_``, which functionalization
turns into new values of the lists' tensors. The per-tensor formulas keep the
order of operations of torch's CPU kernels, so results round as eager's do.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .registry import register_decomposition

aten = torch.ops.aten

Tensor = torch.Tensor


def _binary(name: str, with_alpha: bool = False) -> Callable:
    """``name`` between a tensor and a tensor or a number (``add``, ``mul``...)."""
    packet = getattr(aten, name)

    def apply(a, b, alpha=1):
        extra = {"alpha": alpha} if with_alpha and alpha != 1 else {}
        if isinstance(b, Tensor):
            return packet.Tensor(a, b, **extra)
        return packet.Scalar(a, b, **extra)

    return apply


def _by_last(tensor_op, number_op) -> Callable:
    """The overload for the last operand: a tensor, or a number."""

    def apply(*args):
        return (tensor_op if isinstance(args[-1], Tensor) else number_op)(*args)

    return apply


def _pow(base, exponent):
    if not isinstance(base, Tensor):
        return aten.pow.Scalar(base, exponent)
    if isinstance(exponent, Tensor):
        return aten.pow.Tensor_Tensor(base, exponent)
    return aten.pow.Tensor_Scalar(base, exponent)


def _times(t: Tensor, value) -> Tensor:
    if isinstance(value, Tensor):
        return aten.mul.Tensor(value, t)
    return aten.mul.Scalar(t, value)


@register_decomposition(aten.addcdiv.default)
def addcdiv(self, tensor1, tensor2, value=1):
    # torch's kernel: self + value * tensor1 / tensor2, left to right.
    return aten.add.Tensor(self, aten.div.Tensor(_times(tensor1, value), tensor2))


def addcmul(self, tensor1, tensor2, value=1):
    """``addcmul`` (core: its kernel ends in a fused multiply-add) with a
    number or a 0-d tensor as ``value``."""
    if isinstance(value, Tensor):
        return aten.addcmul.default(self, _times(tensor1, value), tensor2)
    return aten.addcmul.default(self, tensor1, tensor2, value=value)


def _unary(name: str) -> Callable:
    op = getattr(aten, name).default
    return lambda a: op(a)


def _norm(a, ord=2, dtype=None):
    return aten.linalg_vector_norm.default(a, ord, None, False, dtype=dtype)


# Foreach name -> the op on one position's tensors and numbers.
PER_TENSOR: dict[str, Callable] = {
    "add": _binary("add", with_alpha=True),
    "sub": _binary("sub", with_alpha=True),
    "mul": _binary("mul"),
    "div": _binary("div"),
    "maximum": _by_last(aten.maximum.default, aten.clamp_min.default),
    "minimum": _by_last(aten.minimum.default, aten.clamp_max.default),
    "clamp_min": _by_last(aten.clamp_min.Tensor, aten.clamp_min.default),
    "clamp_max": _by_last(aten.clamp_max.Tensor, aten.clamp_max.default),
    "pow": _pow,
    "addcdiv": lambda a, t1, t2, value=1: addcdiv(a, t1, t2, value),
    "addcmul": lambda a, t1, t2, value=1: addcmul(a, t1, t2, value),
    "lerp": _by_last(aten.lerp.Tensor, aten.lerp.Scalar),
    "norm": _norm,
    "copy": lambda a, src, non_blocking=False: aten.copy.default(a, src),
    "zero": lambda a: aten.zeros_like.default(a),
    **{
        name: _unary(name)
        for name in (
            "abs", "neg", "sqrt", "rsqrt", "exp", "log", "reciprocal", "sign",
            "sigmoid", "tanh", "sin", "cos", "floor", "ceil", "round", "trunc",
        )
    },
}  # fmt: skip


def _at(value, position: int, per_position: bool):
    """One position's argument: the list's entry, the tensor of scalars' entry
    (``scalars`` of ``addcdiv_.Tensor``), or a value shared by all positions."""
    if isinstance(value, (list, tuple)):
        return value[position]
    if per_position and isinstance(value, Tensor):
        return aten.select.int(value, 0, position)
    return value


def _foreach_rule(op: torch._ops.OpOverload, per_tensor: Callable) -> Callable:
    schema = op._schema
    in_place = schema.name.endswith("_")
    names = [a.name for a in schema.arguments]
    # A Tensor argument named ``scalars`` holds one number per position.
    per_position = {a.name for a in schema.arguments if a.name == "scalars"}

    def rule(*args, **kwargs):
        bound = dict(zip(names, args))
        bound.update(kwargs)
        lists = [v for v in bound.values() if isinstance(v, (list, tuple))]
        outputs = []
        for i in range(len(lists[0])):
            values = [_at(bound[n], i, n in per_position) for n in names if n in bound]
            outputs.append(per_tensor(*values))
        if not in_place:
            return outputs
        for target, value in zip(bound["self"], outputs):
            aten.copy_.default(target, value)
        return None

    return rule


def _register_foreach() -> None:
    for name, per_tensor in PER_TENSOR.items():
        for suffix in ("", "_"):
            packet = getattr(aten, f"_foreach_{name}{suffix}", None)
            if packet is None:
                continue
            for overload in packet.overloads():
                op = getattr(packet, overload)
                if any(a.name == "out" for a in op._schema.arguments):
                    continue
                register_decomposition(op)(_foreach_rule(op, per_tensor))


_register_foreach()

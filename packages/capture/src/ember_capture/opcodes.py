"""One handler per CPython opcode, registered with the Python versions it serves.

All version-specific bytecode knowledge lives here: a handler names its opcodes and
the (major, minor) range it applies to, so 3.12 and 3.13 are additions to this table.
A handler takes the interpreter and the ``dis.Instruction`` and works on its stack.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import calls
from .variables import (
    NULL,
    ConstValue,
    ListValue,
    NullValue,
    TensorValue,
    TupleValue,
    Value,
)

if TYPE_CHECKING:
    import dis

    from .bytecode_interp import Interpreter

Handler = Callable[["Interpreter", "dis.Instruction"], None]
HANDLERS: dict[str, Handler] = {}

_PY = sys.version_info[:2]
# Python versions whose bytecode the table below covers completely.
SUPPORTED_VERSIONS = ((3, 11),)


def opcode(*names: str, min_ver=(3, 11), max_ver=(3, 11)):
    """Register a handler for ``names`` on Python versions in [min_ver, max_ver]."""

    def register(handler: Handler) -> Handler:
        if min_ver <= _PY <= max_ver:
            for name in names:
                HANDLERS[name] = handler
        return handler

    return register


# -- no-ops and stack shuffles ----------------------------------------------------


@opcode("NOP", "RESUME", "PRECALL", "MAKE_CELL", "COPY_FREE_VARS", "EXTENDED_ARG")
def _nop(tx, inst):
    pass


@opcode("POP_TOP")
def _pop_top(tx, inst):
    tx.pop()


@opcode("PUSH_NULL")
def _push_null(tx, inst):
    tx.push(NULL)


@opcode("COPY")
def _copy(tx, inst):
    tx.push(tx.stack[-inst.arg])


@opcode("SWAP")
def _swap(tx, inst):
    tx.stack[-1], tx.stack[-inst.arg] = tx.stack[-inst.arg], tx.stack[-1]


# -- loads and stores -------------------------------------------------------------


@opcode("LOAD_CONST")
def _load_const(tx, inst):
    tx.push(calls.constant_value(inst.argval))


@opcode("LOAD_FAST")
def _load_fast(tx, inst):
    tx.push(tx.load_local(inst.argval))


@opcode("STORE_FAST")
def _store_fast(tx, inst):
    tx.locals[inst.argval] = tx.pop()


@opcode("DELETE_FAST")
def _delete_fast(tx, inst):
    tx.locals.pop(inst.argval, None)


@opcode("LOAD_DEREF")
def _load_deref(tx, inst):
    tx.push(tx.load_deref(inst.argval))


@opcode("LOAD_GLOBAL")
def _load_global(tx, inst):
    if inst.arg & 1:  # 3.11: the low bit asks for a NULL below the global
        tx.push(NULL)
    tx.push(tx.load_global(inst.argval))


@opcode("LOAD_ATTR")
def _load_attr(tx, inst):
    tx.push(calls.get_attr(tx, tx.pop(), inst.argval))


@opcode("LOAD_METHOD")
def _load_method(tx, inst):
    obj = tx.pop()
    tx.push(NULL)
    tx.push(calls.get_attr(tx, obj, inst.argval))


# -- operators --------------------------------------------------------------------

_BINARY_OPS = {
    "+": operator.add, "&": operator.and_, "//": operator.floordiv,
    "<<": operator.lshift, "@": operator.matmul, "*": operator.mul,
    "%": operator.mod, "|": operator.or_, "**": operator.pow,
    ">>": operator.rshift, "-": operator.sub, "/": operator.truediv,
    "^": operator.xor, "+=": operator.iadd, "&=": operator.iand,
    "//=": operator.ifloordiv, "<<=": operator.ilshift, "@=": operator.imatmul,
    "*=": operator.imul, "%=": operator.imod, "|=": operator.ior,
    "**=": operator.ipow, ">>=": operator.irshift, "-=": operator.isub,
    "/=": operator.itruediv, "^=": operator.ixor,
}  # fmt: skip

_COMPARE_OPS = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq,
    "!=": operator.ne, ">": operator.gt, ">=": operator.ge,
}  # fmt: skip


def _apply(tx: Interpreter, op: Callable, *args: Value) -> None:
    tx.push(calls.call(tx, ConstValue(op), list(args), {}))


@opcode("BINARY_OP")
def _binary_op(tx, inst):
    rhs, lhs = tx.pop(), tx.pop()
    _apply(tx, _BINARY_OPS[inst.argrepr], lhs, rhs)


@opcode("COMPARE_OP")
def _compare_op(tx, inst):
    rhs, lhs = tx.pop(), tx.pop()
    _apply(tx, _COMPARE_OPS[inst.argval], lhs, rhs)


@opcode("IS_OP")
def _is_op(tx, inst):
    rhs, lhs = tx.pop(), tx.pop()
    _apply(tx, operator.is_not if inst.arg else operator.is_, lhs, rhs)


@opcode("CONTAINS_OP")
def _contains_op(tx, inst):
    container, item = tx.pop(), tx.pop()
    result = calls.call(tx, ConstValue(operator.contains), [container, item], {})
    if inst.arg:
        result = calls.call(tx, ConstValue(operator.not_), [result], {})
    tx.push(result)


@opcode("UNARY_NEGATIVE")
def _unary_negative(tx, inst):
    _apply(tx, operator.neg, tx.pop())


@opcode("UNARY_POSITIVE")
def _unary_positive(tx, inst):
    _apply(tx, operator.pos, tx.pop())


@opcode("UNARY_INVERT")
def _unary_invert(tx, inst):
    _apply(tx, operator.invert, tx.pop())


@opcode("UNARY_NOT")
def _unary_not(tx, inst):
    value = tx.pop()
    if isinstance(value, TensorValue):
        raise tx.unsupported(
            "`not` on a tensor (it depends on the tensor's data)",
            "compare explicitly, e.g. torch.logical_not(x)",
        )
    _apply(tx, operator.not_, value)


@opcode("BINARY_SUBSCR")
def _binary_subscr(tx, inst):
    index, obj = tx.pop(), tx.pop()
    tx.push(calls.get_item(tx, obj, index))


# -- containers -------------------------------------------------------------------


@opcode("BUILD_TUPLE")
def _build_tuple(tx, inst):
    tx.push(TupleValue(tuple(tx.popn(inst.arg))))


@opcode("BUILD_LIST")
def _build_list(tx, inst):
    tx.push(ListValue(tx.popn(inst.arg)))


@opcode("LIST_EXTEND")
def _list_extend(tx, inst):
    items = tx.pop()
    target = tx.stack[-inst.arg]
    if not isinstance(target, ListValue) or target.source is not None:
        raise tx.unsupported("extending a list read from outside the function")
    target.items.extend(_sequence_items(tx, items))


@opcode("LIST_TO_TUPLE")
def _list_to_tuple(tx, inst):
    tx.push(TupleValue(tuple(tx.pop().items)))


@opcode("BUILD_SLICE")
def _build_slice(tx, inst):
    parts = tx.popn(inst.arg)
    tx.push(calls.call(tx, ConstValue(slice), parts, {}))


@opcode("UNPACK_SEQUENCE")
def _unpack_sequence(tx, inst):
    items = _sequence_items(tx, tx.pop())
    if len(items) != inst.arg:
        raise tx.unsupported(f"unpacking {len(items)} values into {inst.arg} names")
    tx.stack.extend(reversed(items))


def _sequence_items(tx: Interpreter, seq: Value) -> list[Value]:
    if isinstance(seq, (TupleValue, ListValue)):
        return list(seq.items)
    if isinstance(seq, ConstValue) and isinstance(seq.value, (tuple, list)):
        return [calls.constant_value(v) for v in seq.value]
    if isinstance(seq, TensorValue):
        n = seq.meta.shape[0] if seq.meta.dim() else 0
        return [calls.get_item(tx, seq, ConstValue(i)) for i in range(n)]
    raise tx.unsupported(f"unpacking a {type(seq).__name__}")


# -- calls and return ----------------------------------------------------------------


@opcode("KW_NAMES")
def _kw_names(tx, inst):
    tx.kw_names = tx.code.co_consts[inst.arg]  # dis leaves argval unresolved


@opcode("CALL")
def _call(tx, inst):
    args = tx.popn(inst.arg)
    kw_names, tx.kw_names = tx.kw_names, ()
    fn = tx.pop()
    below = tx.pop()
    if not isinstance(below, NullValue):  # [callable, self, args...] form
        fn, args = below, [fn, *args]
    split = len(args) - len(kw_names)
    kwargs = dict(zip(kw_names, args[split:]))
    tx.push(calls.call(tx, fn, args[:split], kwargs))


@opcode("CALL_FUNCTION_EX")
def _call_function_ex(tx, inst):
    if inst.arg & 1:
        raise tx.unsupported("calling with **kwargs unpacking")
    args = _sequence_items(tx, tx.pop())
    fn = tx.pop()
    if isinstance(tx.stack[-1], NullValue):
        tx.pop()
    tx.push(calls.call(tx, fn, args, {}))


@opcode("RETURN_VALUE")
def _return_value(tx, inst):
    tx.return_value = tx.pop()

"""One handler per CPython opcode, registered with the Python versions it serves.

All version-specific bytecode knowledge lives here: a handler names its opcodes and
the (major, minor) range it applies to, so 3.12 and 3.13 are additions to this table.
A handler takes the interpreter and the ``dis.Instruction`` and works on its stack.
"""

from __future__ import annotations

import collections.abc
import operator
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import behaviour, builtin_calls, imports
from .variables import (
    NULL,
    Cell,
    ConstValue,
    DictValue,
    FunctionValue,
    GeneratorValue,
    IteratorValue,
    ListValue,
    NullValue,
    ObjectValue,
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


def opcode(*names: str, min_ver=(3, 11), max_ver=(3, 11)):
    """Register a handler for ``names`` on Python versions in [min_ver, max_ver]."""

    def register(handler: Handler) -> Handler:
        if min_ver <= _PY <= max_ver:
            for name in names:
                HANDLERS[name] = handler
        return handler

    return register


# -- no-ops and stack shuffles ----------------------------------------------------


@opcode("NOP", "RESUME", "PRECALL", "COPY_FREE_VARS", "EXTENDED_ARG")
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
    tx.push(behaviour.constant_value(inst.argval))


@opcode("LOAD_FAST")
def _load_fast(tx, inst):
    tx.push(tx.load_local(inst.argval))


@opcode("STORE_FAST")
def _store_fast(tx, inst):
    tx.locals[inst.argval] = tx.pop()


@opcode("DELETE_FAST")
def _delete_fast(tx, inst):
    tx.locals.pop(inst.argval, None)
    tx.frame_values.pop(inst.argval, None)


@opcode("MAKE_CELL")
def _make_cell(tx, inst):
    tx.cell(inst.argval)


@opcode("LOAD_DEREF", "LOAD_CLASSDEREF")
def _load_deref(tx, inst):
    cell = tx.cell(inst.argval)
    if cell.value is None:
        raise tx.unsupported(f"reading {inst.argval!r} before it is assigned")
    tx.push(cell.value)


@opcode("STORE_DEREF")
def _store_deref(tx, inst):
    cell = tx.cell(inst.argval)
    if not cell.writable:
        if cell.owner is None:
            raise tx.unsupported(
                f"assigning to {inst.argval!r}, a variable of an enclosing "
                "function reached in a way ember cannot write back",
                "return the value instead of assigning it with nonlocal",
            )
        value = tx.pop()
        tx.output.write_cell(*cell.owner, value)
        cell.value = value
        return
    cell.value = tx.pop()


@opcode("LOAD_CLOSURE")
def _load_closure(tx, inst):
    tx.push(tx.cell(inst.argval))


@opcode("LOAD_GLOBAL")
def _load_global(tx, inst):
    if inst.arg & 1:  # 3.11: the low bit asks for a NULL below the global
        tx.push(NULL)
    tx.push(tx.load_global(inst.argval))


@opcode("IMPORT_NAME")
def _import_name(tx, inst):
    level, fromlist = (behaviour.constant(tx, v) for v in tx.popn(2))
    tx.push(imports.import_name(tx, inst.argval, fromlist, level))


@opcode("IMPORT_FROM")
def _import_from(tx, inst):
    tx.push(imports.import_from(tx, tx.stack[-1], inst.argval))


@opcode("LOAD_ATTR")
def _load_attr(tx, inst):
    tx.push(behaviour.get_attr(tx, tx.pop(), inst.argval))


@opcode("LOAD_METHOD")
def _load_method(tx, inst):
    obj = tx.pop()
    tx.push(NULL)
    tx.push(behaviour.get_attr(tx, obj, inst.argval))


@opcode("LOAD_ASSERTION_ERROR")
def _load_assertion_error(tx, inst):
    tx.push(ObjectValue(AssertionError))


@opcode("STORE_ATTR")
def _store_attr(tx, inst):
    obj, value = tx.pop(), tx.pop()
    behaviour.set_attr(tx, obj, inst.argval, value)


@opcode("DELETE_ATTR")
def _delete_attr(tx, inst):
    behaviour.del_attr(tx, tx.pop(), inst.argval)


@opcode("STORE_GLOBAL")
def _store_global(tx, inst):
    value = tx.pop()
    if tx.globals_source is None:
        raise tx.unsupported(f"torch's own code assigning global {inst.argval!r}")
    tx.output.write_global(tx.f_globals, tx.globals_source, inst.argval, value)


@opcode("STORE_SUBSCR")
def _store_subscr(tx, inst):
    index, container, value = tx.pop(), tx.pop(), tx.pop()
    behaviour.set_item(tx, container, index, value)


@opcode("DELETE_SUBSCR")
def _delete_subscr(tx, inst):
    index, container = tx.pop(), tx.pop()
    behaviour.del_item(tx, container, index)


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

_INPLACE_DUNDERS = {
    symbol: f"__i{op.__name__.removeprefix('i').strip('_')}__"
    for symbol, op in _BINARY_OPS.items()
    if symbol.endswith("=")
}

_COMPARE_OPS = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq,
    "!=": operator.ne, ">": operator.gt, ">=": operator.ge,
}  # fmt: skip


def _apply(tx: Interpreter, op: Callable, *args: Value) -> None:
    tx.push(behaviour.call(tx, ConstValue(op), list(args), {}))


@opcode("BINARY_OP")
def _binary_op(tx, inst):
    rhs, lhs = tx.pop(), tx.pop()
    symbol = inst.argrepr
    if (
        symbol.endswith("=")
        and isinstance(lhs, ConstValue)
        and not hasattr(type(lhs.value), _INPLACE_DUNDERS[symbol])
    ):
        # ``n += t`` on an int or a tuple is ``n = n + t``, as Python does it
        # (the graph must not hold an in-place op on a literal).
        symbol = symbol[:-1]
    _apply(tx, _BINARY_OPS[symbol], lhs, rhs)


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
    op = builtin_calls.not_contains if inst.arg else operator.contains
    _apply(tx, op, container, item)


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
    tx.push(ConstValue(not behaviour.truth(tx, tx.pop())))


@opcode("BINARY_SUBSCR")
def _binary_subscr(tx, inst):
    index, obj = tx.pop(), tx.pop()
    tx.push(behaviour.get_item(tx, obj, index))


# -- jumps: conditions must be decided by constants -------------------------------


@opcode("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT")
def _jump(tx, inst):
    tx.jump(inst)


@opcode("POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE")
def _pop_jump_if_true(tx, inst):
    if behaviour.truth(tx, tx.pop()):
        tx.jump(inst)


@opcode("POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE")
def _pop_jump_if_false(tx, inst):
    if not behaviour.truth(tx, tx.pop()):
        tx.jump(inst)


@opcode("POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NONE")
def _pop_jump_if_none(tx, inst):
    if behaviour.is_none(tx.pop()):
        tx.jump(inst)


@opcode("POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE")
def _pop_jump_if_not_none(tx, inst):
    if not behaviour.is_none(tx.pop()):
        tx.jump(inst)


@opcode("JUMP_IF_TRUE_OR_POP")
def _jump_if_true_or_pop(tx, inst):
    if behaviour.truth(tx, tx.stack[-1]):
        tx.jump(inst)
    else:
        tx.pop()


@opcode("JUMP_IF_FALSE_OR_POP")
def _jump_if_false_or_pop(tx, inst):
    if not behaviour.truth(tx, tx.stack[-1]):
        tx.jump(inst)
    else:
        tx.pop()


# -- iteration --------------------------------------------------------------------


@opcode("GET_ITER")
def _get_iter(tx, inst):
    value = tx.pop()
    if not isinstance(value, (IteratorValue, GeneratorValue)):
        value = IteratorValue(behaviour.iterate(tx, value))
    tx.push(value)


@opcode("FOR_ITER")
def _for_iter(tx, inst):
    item = tx.stack[-1].next()
    if item is None:
        tx.pop()
        tx.jump(inst)
    else:
        tx.push(item)


@opcode("RETURN_GENERATOR")
def _return_generator(tx, inst):
    tx.push(ConstValue(None))  # the value the first resume sends; popped next


@opcode("YIELD_VALUE")
def _yield_value(tx, inst):
    if not tx.is_generator:
        raise tx.unsupported("yield outside a generator")
    tx.yielded = tx.pop()
    tx.push(ConstValue(None))  # what the consumer sends back: next() sends None


# -- containers -------------------------------------------------------------------


@opcode("BUILD_TUPLE")
def _build_tuple(tx, inst):
    tx.push(TupleValue(tuple(tx.popn(inst.arg))))


@opcode("BUILD_LIST")
def _build_list(tx, inst):
    tx.push(ListValue(tx.popn(inst.arg)))


@opcode("BUILD_SET")
def _build_set(tx, inst):
    items = tx.popn(inst.arg)
    tx.push(behaviour.call(tx, ConstValue(set), [TupleValue(tuple(items))], {}))


@opcode("BUILD_MAP")
def _build_map(tx, inst):
    flat = tx.popn(2 * inst.arg)
    tx.push(DictValue({behaviour.key(tx, k): v for k, v in zip(flat[::2], flat[1::2])}))


@opcode("BUILD_CONST_KEY_MAP")
def _build_const_key_map(tx, inst):
    keys = behaviour.constant(tx, tx.pop())
    tx.push(DictValue(dict(zip(keys, tx.popn(inst.arg)))))


@opcode("BUILD_STRING")
def _build_string(tx, inst):
    parts = [behaviour.constant(tx, p) for p in tx.popn(inst.arg)]
    tx.push(ConstValue("".join(parts)))


@opcode("FORMAT_VALUE")
def _format_value(tx, inst):
    spec = behaviour.constant(tx, tx.pop()) if inst.arg & 0x04 else ""
    value = tx.pop()
    if isinstance(value, TensorValue):
        raise tx.unsupported(
            "formatting a tensor into a string (it reads the tensor's data)"
        )
    converted = {0: None, 1: str, 2: repr, 3: ascii}[inst.arg & 0x03]
    text = behaviour.constant(tx, value)
    tx.push(ConstValue(format(converted(text) if converted else text, spec)))


@opcode("LIST_APPEND")
def _list_append(tx, inst):
    item = tx.pop()
    tx.stack[-inst.arg].items.append(item)


@opcode("SET_ADD")
def _set_add(tx, inst):
    item = behaviour.constant(tx, tx.pop())
    tx.stack[-inst.arg].value.add(item)


@opcode("MAP_ADD")
def _map_add(tx, inst):
    value, key = tx.pop(), tx.pop()
    tx.stack[-inst.arg].items[behaviour.key(tx, key)] = value


@opcode("LIST_EXTEND")
def _list_extend(tx, inst):
    items = tx.pop()
    target = tx.stack[-inst.arg]
    target.items.extend(behaviour.iterate(tx, items))


@opcode("SET_UPDATE")
def _set_update(tx, inst):
    items = tx.pop()
    tx.stack[-inst.arg].value.update(
        behaviour.constant(tx, i) for i in behaviour.iterate(tx, items)
    )


@opcode("DICT_UPDATE", "DICT_MERGE")
def _dict_update(tx, inst):
    other = tx.pop()
    target = tx.stack[-inst.arg]
    if not isinstance(other, DictValue):
        raise tx.unsupported(f"merging a {type(other).__name__} into a dict")
    if inst.opname == "DICT_MERGE" and set(target.items) & set(other.items):
        raise tx.unsupported("a keyword argument given twice")
    target.items.update(other.items)


@opcode("LIST_TO_TUPLE")
def _list_to_tuple(tx, inst):
    tx.push(TupleValue(tuple(tx.pop().items)))


@opcode("BUILD_SLICE")
def _build_slice(tx, inst):
    parts = tx.popn(inst.arg)
    tx.push(behaviour.call(tx, ConstValue(slice), parts, {}))


@opcode("UNPACK_SEQUENCE")
def _unpack_sequence(tx, inst):
    items = behaviour.iterate(tx, tx.pop())
    if len(items) != inst.arg:
        raise tx.unsupported(f"unpacking {len(items)} values into {inst.arg} names")
    tx.stack.extend(reversed(items))


@opcode("UNPACK_EX")
def _unpack_ex(tx, inst):
    before, after = inst.arg & 0xFF, inst.arg >> 8
    items = behaviour.iterate(tx, tx.pop())
    if len(items) < before + after:
        raise tx.unsupported(f"unpacking {len(items)} values into {before + after}+")
    middle = ListValue(items[before : len(items) - after])
    tx.stack.extend(reversed([*items[:before], middle, *items[len(items) - after :]]))


# -- functions, calls and return -----------------------------------------------------


@opcode("MAKE_FUNCTION")
def _make_function(tx, inst):
    code = behaviour.constant(tx, tx.pop())
    closure = tuple(tx.pop().items) if inst.arg & 0x08 else ()
    if inst.arg & 0x04:
        tx.pop()  # annotations do not change what the function computes
    kwdefaults = tx.pop().items if inst.arg & 0x02 else {}
    defaults = tuple(tx.pop().items) if inst.arg & 0x01 else ()
    if not all(isinstance(c, Cell) for c in closure):
        raise tx.unsupported("a closure over something that is not a variable")
    tx.push(
        FunctionValue(
            code, defaults, kwdefaults, closure, tx.f_globals, tx.globals_source
        )
    )


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
    tx.push(behaviour.call(tx, fn, args[:split], kwargs))


@opcode("CALL_FUNCTION_EX")
def _call_function_ex(tx, inst):
    kwargs = tx.pop() if inst.arg & 1 else DictValue({})
    args = behaviour.iterate(tx, tx.pop())
    fn = tx.pop()
    if tx.stack and isinstance(tx.stack[-1], NullValue):
        tx.pop()
    if not isinstance(kwargs, DictValue):
        raise tx.unsupported(f"calling with **{type(kwargs).__name__}")
    tx.push(
        behaviour.call(
            tx, fn, args, {behaviour.keyword(tx, k): v for k, v in kwargs.items.items()}
        )
    )


@opcode("BEFORE_WITH")
def _before_with(tx, inst):
    exit_value, entered = behaviour.enter(tx, tx.pop(), inst.offset)
    tx.push(exit_value)
    tx.push(entered)


@opcode("RETURN_VALUE")
def _return_value(tx, inst):
    tx.return_value = tx.pop()


# -- match statements ----------------------------------------------------------------
# Each pattern test asks the subject's kind (python_type, length, contains,
# get_item, get_attr), as the interpreter would, so the test folds to a constant.

# Classes whose one positional sub-pattern matches the subject itself
# (``case int(n)``), as CPython's MATCH_CLASS does.
_MATCH_SELF = (
    bool, bytearray, bytes, dict, float, frozenset, int, list, set, str, tuple
)  # fmt: skip


@opcode("GET_LEN")
def _get_len(tx, inst):
    tx.push(ConstValue(behaviour.length(tx, tx.stack[-1])))


@opcode("MATCH_MAPPING")
def _match_mapping(tx, inst):
    cls = behaviour.python_type(tx.stack[-1])
    tx.push(ConstValue(issubclass(cls, collections.abc.Mapping)))


@opcode("MATCH_SEQUENCE")
def _match_sequence(tx, inst):
    cls = behaviour.python_type(tx.stack[-1])
    is_sequence = issubclass(cls, collections.abc.Sequence) and not issubclass(
        cls, (str, bytes, bytearray)
    )
    tx.push(ConstValue(is_sequence))


@opcode("MATCH_KEYS")
def _match_keys(tx, inst):
    keys, subject = tx.stack[-1], tx.stack[-2]
    found = []
    for key in behaviour.iterate(tx, keys):
        if not behaviour.contains(tx, subject, key):
            tx.push(ConstValue(None))
            return
        found.append(behaviour.get_item(tx, subject, key))
    tx.push(TupleValue(tuple(found)))


@opcode("MATCH_CLASS")
def _match_class(tx, inst):
    names, cls_value, subject = tx.pop(), tx.pop(), tx.pop()
    cls = behaviour.constant(tx, cls_value)
    if not issubclass(behaviour.python_type(subject), cls):
        tx.push(ConstValue(None))
        return
    count = inst.arg
    if count == 1 and cls in _MATCH_SELF:
        positional = [subject]
    else:
        match_args = getattr(cls, "__match_args__", ())
        if count > len(match_args):
            raise tx.unsupported(
                f"{cls.__qualname__}() accepts {len(match_args)} positional "
                f"sub-patterns ({count} given)"
            )
        positional = [behaviour.get_attr(tx, subject, a) for a in match_args[:count]]
    attrs = list(positional)
    for name in behaviour.constant(tx, names):
        try:
            attrs.append(behaviour.get_attr(tx, subject, name))
        except AttributeError:
            tx.push(ConstValue(None))
            return
    tx.push(TupleValue(tuple(attrs)))

"""A module call with forward pre-hooks and hooks, run as ``nn.Module.__call__``
runs them: each pre-hook (may replace the arguments), forward, each hook (may
replace the result), all inlined. The hook tables are read through the module,
so their keys (in order) and each hook are guarded: a hook added or removed
later recompiles."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..behaviour import call, is_none, iterate
from ..guards import Guard, GuardKind
from ..source import AttrSource
from ..variables import DictValue, ModuleValue, TupleValue, Value

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter


def _table(tx: Interpreter, m: ModuleValue, name: str) -> DictValue:
    return tx.output.wrap(getattr(m.value, name), AttrSource(m.source, name))


def call_with_hooks(
    tx: Interpreter, m: ModuleValue, forward: Value, args: list, kwargs: dict
) -> Value:
    """``m(*args, **kwargs)`` for a module whose only hooks are its forward
    hooks and pre-hooks (the caller checked)."""
    tx.output.guards.add(Guard(GuardKind.ONLY_FORWARD_HOOKS, m.source, None))
    pre_with_kwargs = _table(tx, m, "_forward_pre_hooks_with_kwargs").items
    args_value = TupleValue(tuple(args))
    for hook_id, hook in _table(tx, m, "_forward_pre_hooks").items.items():
        if hook_id in pre_with_kwargs:
            result = call(tx, hook, [m, args_value, DictValue(dict(kwargs))], {})
            if not is_none(result):
                new_args, new_kwargs = iterate(tx, result)
                args_value, kwargs = new_args, dict(new_kwargs.items)
        else:
            result = call(tx, hook, [m, args_value], {})
            if not is_none(result):
                if not isinstance(result, TupleValue):
                    result = TupleValue((result,))
                args_value = result
    output = call(tx, forward, list(iterate(tx, args_value)), kwargs)
    with_kwargs = _table(tx, m, "_forward_hooks_with_kwargs").items
    for hook_id, hook in _table(tx, m, "_forward_hooks").items.items():
        if hook_id in with_kwargs:
            hooked = [m, args_value, DictValue(dict(kwargs)), output]
        else:
            hooked = [m, args_value, output]
        result = call(tx, hook, hooked, {})
        if not is_none(result):
            output = result
    return output

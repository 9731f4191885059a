"""The public entry: capture one call of a function into graphs, guards and code.

``capture(fn, *args, **kwargs)`` interprets ``fn`` symbolically on the given inputs
and returns a ``CaptureResult``: the fx graphs with their example inputs, the guards
under which they may be reused, and the transformed function that runs them.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import types
from collections.abc import Callable

import torch

from . import autocast, graph_break
from .bytecode import supported
from .bytecode_interp import Interpreter
from .call_routing import unrouted
from .emit import Emitter
from .errors import CaptureError
from .marks import never_captured
from .output_graph import OutputGraph
from .result import CaptureResult
from .shapes import DynamicDims, MetaMode, SpecializeShapes, SymbolicShapes
from .side_effects import written_values
from .source import ClosureSource, GlobalsSource
from .variables import ObjectValue

_NOT_A_PLAIN_CALL = (
    inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
)


def capture(fn: Callable, *args: object, **kwargs: object) -> CaptureResult:
    """Capture ``fn(*args, **kwargs)``; raises CaptureError on unsupported code.

    ``fn`` is a Python function or a bound method (its ``self`` becomes the first
    local). Nothing in ``fn`` runs for real: tensor ops run on meta tensors.
    """
    return capture_call(fn, args, kwargs)


def capture_call(
    fn: Callable,
    args: tuple,
    kwargs: dict,
    *,
    shapes: SymbolicShapes | None = None,
    dynamic_dims: DynamicDims | None = None,
    meta_mode: MetaMode | None = None,
) -> CaptureResult:
    """``capture(fn, *args, **kwargs)``, with symbolic sizes where
    ``dynamic_dims(source, tensor)`` lists dims and ``shapes`` provides the
    shape rules (docs/dynamic.md). When an op meets a symbolic size it has no
    rule for, capture starts over with every size fixed and says why in
    ``CaptureResult.specialized``. ``meta_mode()``, when given, is entered
    around each op's run on meta tensors (the umbrella passes ember_aotgrad's
    meta rules, which are faster than torch's meta kernels)."""
    if isinstance(fn, types.MethodType):
        fn, args = fn.__func__, (fn.__self__, *args)
    if not isinstance(fn, types.FunctionType):
        raise TypeError(
            f"capture() takes a Python function or method, not {type(fn).__name__}"
        )
    # The function's own parameters, not those of a function it wraps.
    bound = inspect.signature(fn, follow_wrapped=False).bind(*args, **kwargs)
    bound.apply_defaults()
    return capture_frame(
        fn,
        dict(bound.arguments),
        shapes=shapes,
        dynamic_dims=dynamic_dims,
        meta_mode=meta_mode,
    )


def capture_frame(
    fn: types.FunctionType,
    f_locals: dict[str, object],
    *,
    shapes: SymbolicShapes | None = None,
    dynamic_dims: DynamicDims | None = None,
    meta_mode: MetaMode | None = None,
) -> CaptureResult:
    """Capture ``fn`` given its bound arguments by name (its initial locals);
    ``shapes``, ``dynamic_dims`` and ``meta_mode`` as in ``capture_call``."""
    fn = unrouted(fn)  # capture reads the user's code, not a routed copy's
    if not supported():
        raise CaptureError(
            f"Python {sys.version_info.major}.{sys.version_info.minor} bytecode",
            fn.__code__.co_filename,
            fn.__code__.co_firstlineno,
            "ember captures Python 3.11 bytecode; run on 3.11",
        )
    if never_captured(fn):
        raise CaptureError(
            f"{fn.__qualname__} is marked never to be captured",
            fn.__code__.co_filename,
            fn.__code__.co_firstlineno,
            "it runs as Python",
        )
    if fn.__code__.co_flags & _NOT_A_PLAIN_CALL:
        raise CaptureError(
            f"compiling generator or coroutine function {fn.__qualname__}",
            fn.__code__.co_filename,
            fn.__code__.co_firstlineno,
            "compile the function that consumes it",
        )
    to_python: frozenset[int] = frozenset()
    specialized = None
    while True:
        try:
            output = OutputGraph(shapes, dynamic_dims, meta_mode)
            output.autocast_to_python = to_python
            result = _capture_frame(fn, f_locals, output)
        except _LeaveBlocksToPython as restart:
            to_python |= restart.offsets
            continue
        except SpecializeShapes as reason:
            specialized, shapes, dynamic_dims = str(reason), None, None
            continue
        if specialized is not None:
            result = dataclasses.replace(result, specialized=specialized)
        return result


class _LeaveBlocksToPython(Exception):
    """A graph break inside autocast blocks: capture again with their
    with-statements left to Python (the blocks then resume on their own)."""

    def __init__(self, offsets: frozenset[int]) -> None:
        self.offsets = offsets


def _capture_frame(
    fn: types.FunctionType, f_locals: dict[str, object], output: OutputGraph
) -> CaptureResult:
    tx = Interpreter(
        fn.__code__,
        output,
        f_globals=fn.__globals__,
        globals_source=GlobalsSource(),
        cells=dict(zip(fn.__code__.co_freevars, fn.__closure__ or ())),
        closure_source=ClosureSource,
        closure_owner=ObjectValue(fn),
        frame_values=f_locals,
    )
    # Capture follows the function's own grad-mode and autocast changes; it
    # restores them after.
    try:
        with torch.set_grad_enabled(torch.is_grad_enabled()), autocast.restored():
            returned = tx.run()
            grad_at_return = torch.is_grad_enabled()
    except CaptureError as error:
        if error.break_point is not None:
            blocks = autocast.open_blocks(error.break_point.stack)
            if blocks:
                raise _LeaveBlocksToPython(blocks) from error
        result = graph_break.finish_at_break(fn, output, f_locals, error)
        if result is None:
            raise
        return result
    emitter = Emitter(fn, output)
    emitter.call_graph([returned, *written_values(output.side_effects)])
    try:
        emitter.replay(output.side_effects)
        emitter.set_grad_mode(grad_at_return)
        emitter.body.append(f"return {emitter.expr(returned)}")
    except TypeError as e:
        raise CaptureError(str(e), *tx.location()) from e
    return emitter.result()

"""The public entry: capture one call of a function into graphs, guards and code.

``capture(fn, *args, **kwargs)`` interprets ``fn`` symbolically on the given inputs
and returns a ``CaptureResult``: the fx graphs with their example inputs, the guards
under which they may be reused, and the transformed function that runs them.
"""

from __future__ import annotations

import inspect
import logging
import re
import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.fx

from . import transform
from .bytecode_interp import Interpreter
from .errors import CaptureError
from .guards import CellView, GuardChecker, GuardSet
from .opcodes import SUPPORTED_VERSIONS
from .output_graph import OutputGraph, tensor_leaves
from .source import GLOBALS_CELL, ClosureSource, GlobalsSource, Source
from .variables import (
    ConstValue,
    DataclassValue,
    DictValue,
    ListValue,
    ModuleValue,
    NamedTupleValue,
    ObjectValue,
    TensorValue,
    TupleValue,
    UserObjectValue,
    Value,
)

log = logging.getLogger("ember.capture")


@dataclass(frozen=True)
class CapturedGraph:
    """One fx graph and how to feed it: inputs are read from ``input_sources``."""

    name: str
    gm: torch.fx.GraphModule
    example_inputs: list
    input_sources: tuple[Source, ...]
    location: str  # the user's file:line where the graph starts


@dataclass(frozen=True)
class CaptureResult:
    """Everything capture learned from one call.

    ``transformed_source`` is the readable Python of the transformed function; its
    ``code`` has the original signature and reads each compiled graph (and any
    non-literal constant) from a closure cell named in ``cell_values`` or
    ``graphs``. ``build(compiled)`` binds it to the callables a backend returned.
    """

    fn: types.FunctionType
    graphs: tuple[CapturedGraph, ...]
    guards: GuardSet
    code: types.CodeType
    transformed_source: str
    cell_values: dict[str, object]

    def build(self, compiled: Sequence[Callable]) -> types.FunctionType:
        """The transformed function, running ``compiled[i]`` in place of graph i."""
        if len(compiled) != len(self.graphs):
            raise ValueError(f"expected {len(self.graphs)} compiled graphs")
        cells = dict(self.cell_values)
        cells.update((g.name, c) for g, c in zip(self.graphs, compiled))
        return transform.bind(self.fn, self.code, cells)

    def guard_checker(self) -> GuardChecker:
        """The compiled check of the guards for this function object."""
        cells = CellView(self.fn.__code__.co_freevars, self.fn.__closure__)
        return self.guards.compile(self.fn.__globals__, cells)


def capture(fn: Callable, *args: object, **kwargs: object) -> CaptureResult:
    """Capture ``fn(*args, **kwargs)``; raises CaptureError on unsupported code.

    ``fn`` is a Python function or a bound method (its ``self`` becomes the first
    local). Nothing in ``fn`` runs for real: tensor ops run on meta tensors.
    """
    if isinstance(fn, types.MethodType):
        fn, args = fn.__func__, (fn.__self__, *args)
    if not isinstance(fn, types.FunctionType):
        raise TypeError(
            f"capture() takes a Python function or method, not {type(fn).__name__}"
        )
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    return capture_frame(fn, dict(bound.arguments))


def capture_frame(fn: types.FunctionType, f_locals: dict[str, object]) -> CaptureResult:
    """Capture ``fn`` given its bound arguments by name (its initial locals)."""
    if sys.version_info[:2] not in SUPPORTED_VERSIONS:
        raise CaptureError(
            f"Python {sys.version_info.major}.{sys.version_info.minor} bytecode",
            fn.__code__.co_filename,
            fn.__code__.co_firstlineno,
            "ember captures Python 3.11 bytecode; run on 3.11",
        )
    output = OutputGraph()
    tx = Interpreter(
        fn.__code__,
        output,
        f_globals=fn.__globals__,
        globals_source=GlobalsSource(),
        cells=dict(zip(fn.__code__.co_freevars, fn.__closure__ or ())),
        closure_source=ClosureSource,
        frame_values=f_locals,
    )
    # Capture follows the function's own grad-mode changes; restore them after.
    with torch.set_grad_enabled(torch.is_grad_enabled()):
        returned = tx.run()
    return _finish(fn, output, returned, tx.location())


def _finish(
    fn, output: OutputGraph, returned: Value, location: tuple[str, int]
) -> CaptureResult:
    cells: dict[str, object] = {}
    graphs: list[CapturedGraph] = []
    body: list[str] = []
    outputs: dict[torch.fx.Node, int] = {}
    if output.has_ops():
        name = "__ember_graph0"
        for leaf in tensor_leaves(returned):
            if leaf.node.op != "placeholder" and leaf.node not in outputs:
                outputs[leaf.node] = len(outputs)
        output.graph.output(tuple(outputs))
        gm = torch.fx.GraphModule(
            torch.nn.Module(), output.graph, class_name=_class_name(fn)
        )
        graphs.append(
            CapturedGraph(
                name,
                gm,
                output.example_inputs,
                tuple(output.input_sources),
                f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}",
            )
        )
        inputs = ", ".join(s.code() for s in output.input_sources)
        body.append(f"__ember_out0 = {name}({inputs})")
        log.debug("captured %s:\n%s", fn.__qualname__, gm.code)
    try:
        body.append(f"return {_rebuild(returned, outputs, cells)}")
    except TypeError as e:
        raise CaptureError(str(e), *location) from e
    cells[GLOBALS_CELL] = fn.__globals__
    cell_names = [g.name for g in graphs] + list(cells) + list(fn.__code__.co_freevars)
    source, code = transform.build_code(fn, body, cell_names)
    return CaptureResult(fn, tuple(graphs), output.guards, code, source, cells)


def _class_name(fn: types.FunctionType) -> str:
    return re.sub(r"\W", "_", f"{fn.__name__}_graph")


def _rebuild(v: Value, outputs: dict, cells: dict[str, object]) -> str:
    """The expression that rebuilds the returned value from the graph outputs."""
    if isinstance(v, TensorValue):
        if v.node in outputs:
            return f"__ember_out0[{outputs[v.node]}]"
        return v.source.code()
    if isinstance(v, TupleValue):
        items = [_rebuild(i, outputs, cells) for i in v.items]
        return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
    if isinstance(v, ListValue):
        return f"[{', '.join(_rebuild(i, outputs, cells) for i in v.items)}]"
    if isinstance(v, DictValue):
        entries = [
            f"{_constant(k, cells)}: {_rebuild(i, outputs, cells)}"
            for k, i in v.items.items()
        ]
        return "{" + ", ".join(entries) + "}"
    if isinstance(v, NamedTupleValue):
        items = ", ".join(_rebuild(i, outputs, cells) for i in v.items)
        return f"{_constant(v.cls, cells)}({items})"
    if isinstance(v, DataclassValue):
        fields = ", ".join(
            f"{name}={_rebuild(i, outputs, cells)}" for name, i in v.fields.items()
        )
        return f"{_constant(v.cls, cells)}({fields})"
    if isinstance(v, (ModuleValue, UserObjectValue)) and v.source is not None:
        return v.source.code()
    if isinstance(v, (ConstValue, ObjectValue, ModuleValue)):
        return _constant(v.value, cells)
    raise TypeError(f"returning a {type(v).__name__}")


def _constant(value: object, cells: dict[str, object]) -> str:
    """A literal for ``value``, or the name of a closure cell holding it."""
    text = transform.literal(value)
    if text is not None:
        return text
    name = f"__ember_const{sum(n.startswith('__ember_const') for n in cells)}"
    cells[name] = value
    return name

"""Writing the transformed function: the graph call, then Python that rebuilds
values (returned ones, or a graph break's live stack and locals) from graph outputs,
frame sources and constants held in closure cells."""

from __future__ import annotations

import collections
import logging
import re
import sys
import types

import torch
import torch.fx

from . import autocast, meta_memo, transform
from .behaviour import rebuild
from .float_inputs import float_tensor
from .output_graph import OutputGraph, tensor_leaves
from .result import HOOK_CELL, RESUME_CELL, CapturedGraph, CaptureResult
from .side_effects import (
    AttrWrite,
    CellWrite,
    DeferredCall,
    GlobalWrite,
    SideEffect,
)
from .source import (
    FLOAT_TENSOR_CELL,
    GLOBALS_CELL,
    MODULES_CELL,
    FloatTensorSource,
    LocalSource,
    Source,
)
from .variables import DictValue, ListValue, ObjectKey, Value

log = logging.getLogger("ember.capture")

GRAPH_NAME = "__ember_graph0"
GRAPH_OUT = "__ember_out0"


class Emitter:
    """Accumulates the body of one transformed function and its closure cells."""

    def __init__(self, fn: types.FunctionType, output: OutputGraph) -> None:
        self.fn = fn
        self.output = output
        self.body: list[str] = []
        self.cells: dict[str, object] = {GLOBALS_CELL: fn.__globals__}
        self.graphs: list[CapturedGraph] = []
        self._outputs: dict[torch.fx.Node, int] = {}
        # Once the replay starts, frame sources are read from snapshots taken
        # before its first write: the function may have popped a key or rebound
        # an attribute that a rebuilt value was first read from.
        self._snapshot_at: int | None = None
        self._snapshots: dict[str, str] = {}
        self._made: dict[int, str] = {}  # id of a list, dict or object -> its name

    def call_graph(self, live: list[Value]) -> None:
        """Finish the graph, returning every tensor in ``live``, and call it."""
        if not self.output.has_ops():
            return
        for leaf in tensor_leaves(live):
            if leaf.node.op != "placeholder" and leaf.node not in self._outputs:
                self._outputs[leaf.node] = len(self._outputs)
        graph = self.output.graph
        autocast.enclose(
            graph, self.output.initial_autocast, torch.is_autocast_cache_enabled()
        )
        graph.output(tuple(self._returned(graph)))
        name = re.sub(r"\W", "_", f"{self.fn.__name__}_graph")
        gm = torch.fx.GraphModule(torch.nn.Module(), graph, class_name=name)
        dynamic_dims = _dynamic_dims(graph)
        if dynamic_dims:  # for backends (the capture contract's gm)
            gm.meta[DYNAMIC_DIMS] = dynamic_dims
        code = self.fn.__code__
        self.graphs.append(
            CapturedGraph(
                GRAPH_NAME,
                gm,
                self.output.example_inputs,
                tuple(self.output.input_sources),
                f"{code.co_filename}:{code.co_firstlineno}",
                dynamic_dims,
            )
        )
        if any(isinstance(s, FloatTensorSource) for s in self.output.input_sources):
            self.cells[FLOAT_TENSOR_CELL] = float_tensor
        inputs = ", ".join(self.read(s) for s in self.output.input_sources)
        self.body.append(f"{GRAPH_OUT} = {GRAPH_NAME}({inputs})")
        log.info("captured %s:\n%s", self.fn.__qualname__, gm.code)

    def _returned(self, graph: torch.fx.Graph) -> list[torch.fx.Node]:
        """The output nodes; after a backward in the graph, those that require
        grad detached: their autograd history is spent, as eager's is after
        ``loss.backward()`` (eager would refuse a second backward through it)."""
        if not self.output.ran_backward:
            return list(self._outputs)
        returned = []
        for node in self._outputs:
            example = node.meta.get("example_value")
            if isinstance(example, torch.Tensor) and example.requires_grad:
                node = graph.call_method("detach", (node,))
                node.meta["example_value"] = example.detach()
            returned.append(node)
        return returned

    def set_grad_mode(self, enabled: bool) -> None:
        """Leave grad mode as the function does here: a graph run by aotgrad's
        compiled code does not switch it itself."""
        if enabled != self.output.initial_grad_enabled:
            switch = self.constant(torch._C._set_grad_enabled)
            self.body.append(f"{switch}({enabled})")

    def replay(self, effects: list[SideEffect]) -> None:
        """Statements that redo capture's recorded writes, in order. Every value
        rebuilt from here on is read as the function first saw it."""
        if effects:
            self.freeze_reads()
        for effect in effects:
            if isinstance(effect, AttrWrite):
                target = self.expr(effect.target)
                value = self.expr(effect.value)
                self.body.append(f"setattr({target}, {effect.name!r}, {value})")
            elif isinstance(effect, CellWrite):
                cell = f"{self.expr(effect.function)}.__closure__[{effect.index}]"
                self.body.append(f"{cell}.cell_contents = {self.expr(effect.value)}")
            elif isinstance(effect, DeferredCall):
                args = [self.expr(a) for a in effect.args]
                args += [f"{k}={self.expr(v)}" for k, v in effect.kwargs.items()]
                self.body.append(f"{self.expr(effect.fn)}({', '.join(args)})")
            elif isinstance(effect, GlobalWrite):
                # (the dict as found before the writes: read through an import,
                # the code needs the modules cell)
                target = self.read(effect.globals_source)
                value = self.expr(effect.value)
                self.body.append(f"{target}[{effect.name!r}] = {value}")
            elif isinstance(effect.container, ListValue):
                target = self.read(effect.container.source)
                self.body.append(f"{target}[:] = {self._contents(effect.container)}")
            else:
                target = self.read(effect.container.source)
                self.body.append(f"{target}.clear()")
                self.body.append(f"{target}.update({self._contents(effect.container)})")

    def expr(self, v: Value) -> str:
        """Python that evaluates to the real object ``v`` stands for (each kind
        answers ``behaviour.rebuild``).

        Raises TypeError for values that have no real counterpart (iterators,
        functions built during capture, context managers).
        """
        return rebuild(self, v)

    def graph_output(self, node: torch.fx.Node) -> str | None:
        """Python that reads ``node``'s value from the graph's outputs, or None
        when the graph does not return it."""
        index = self._outputs.get(node)
        return None if index is None else f"{GRAPH_OUT}[{index}]"

    def built(self, container: ListValue | DictValue) -> str:
        """The one list or dict made for ``container``: every place that holds it
        (a local, the stack, another container) must hold the same object, so
        that a later in-place change reaches all of them."""
        name = self._made.get(id(container))
        if name is None:
            contents = self._contents(container)
            name = self._made[id(container)] = f"__ember_made{len(self._made)}"
            self.body.append(f"{name} = {contents}")
        return name

    def new_object(self, cls: type, obj: Value, attrs: dict[str, Value]) -> str:
        """The one object made for ``obj``, an instance of ``cls`` made in the
        function: allocated first (so attributes may hold it), then given
        ``attrs`` the way its ``__init__`` gave them, without running it again."""
        name = self._made.get(id(obj))
        if name is None:
            name = self._made[id(obj)] = f"__ember_made{len(self._made)}"
            allocate = self.constant(object.__new__)
            self.body.append(f"{name} = {allocate}({self.constant(cls)})")
            assign = self.constant(object.__setattr__)
            for attr, value in attrs.items():
                self.body.append(f"{assign}({name}, {attr!r}, {self.expr(value)})")
        return name

    def freeze_reads(self) -> None:
        """Every frame source read from here on is read as it is now, before
        what the body does next (a replay's writes, the call a graph broke
        at: it may change an attribute the resume function is passed)."""
        if self._snapshot_at is None:
            self._snapshot_at = len(self.body)

    def read(self, source: Source) -> str:
        """Python that reads ``source`` as it was before the replay's writes
        (or the break's call, after ``freeze_reads``)."""
        code = source.code()
        if MODULES_CELL in code:
            self.cells[MODULES_CELL] = sys.modules
        if self._snapshot_at is None or type(source) is LocalSource:
            return code  # (nothing the body runs rebinds the frame's locals)
        if code not in self._snapshots:
            name = f"__ember_pre{len(self._snapshots)}"
            self.body.insert(self._snapshot_at, f"{name} = {code}")
            self._snapshot_at += 1
            self._snapshots[code] = name
        return self._snapshots[code]

    def _contents(self, container: ListValue | DictValue) -> str:
        """A new list or dict literal holding ``container``'s items."""
        if isinstance(container, ListValue):
            return f"[{', '.join(self.expr(i) for i in container.items)}]"
        entries = [
            f"{self._key(k)}: {self.expr(i)}" for k, i in container.items.items()
        ]
        literal = "{" + ", ".join(entries) + "}"
        factory = container.default_factory
        if factory is None:
            return literal
        made = self.constant(collections.defaultdict)
        return f"{made}({self.expr(factory)}, {literal})"

    def _key(self, k: object) -> str:
        """A dict key: a literal, or the object an ``ObjectKey`` stands for."""
        if not isinstance(k, ObjectKey):
            return self.constant(k)
        return self.expr(k.value) if k.value is not None else self.read(k.source)

    def constant(self, value: object) -> str:
        """A literal for ``value``, or the name of a closure cell holding it."""
        text = transform.literal(value)
        if text is not None:
            return text
        for name, held in self.cells.items():
            if held is value and name.startswith("__ember_const"):
                return name
        name = f"__ember_const{sum(n.startswith('__ember_const') for n in self.cells)}"
        self.cells[name] = value
        return name

    def result(
        self,
        resume_codes: tuple[types.CodeType, ...] = (),
        break_reason: Exception | None = None,
    ) -> CaptureResult:
        names = [g.name for g in self.graphs] + list(self.cells)
        if resume_codes:
            names += [HOOK_CELL] + [
                f"{RESUME_CELL}{i}" for i in range(len(resume_codes))
            ]
        names += list(self.fn.__code__.co_freevars)
        source, code = transform.build_code(self.fn, self.body, names)
        for guard in self.output.size_guards():  # all relations are known now
            self.output.guards.add(guard)
        return CaptureResult(
            self.fn,
            tuple(self.graphs),
            self.output.guards,
            code,
            source,
            self.cells,
            resume_codes,
            break_reason,
            meta_memo.MEMO.export(self.output.meta_keys),
        )


# The graph meta entry mapping an input's index to its dims whose size is a
# symbol (docs/dynamic.md).
DYNAMIC_DIMS = "dynamic_dims"


def _dynamic_dims(graph: torch.fx.Graph) -> dict[int, tuple[int, ...]]:
    """For each graph input with symbolic sizes, its index and those dims (an
    integer input that is a symbol: ``()``)."""
    dims = {}
    for i, node in enumerate(graph.find_nodes(op="placeholder")):
        meta = node.meta.get("example_value")
        if isinstance(meta, torch.SymInt):
            dims[i] = ()
        elif isinstance(meta, torch.Tensor):
            symbolic = tuple(
                d for d, s in enumerate(meta.shape) if isinstance(s, torch.SymInt)
            )
            if symbolic:
                dims[i] = symbolic
    return dims

"""The graph being built: placeholders for frame values, tensor op nodes, guards.

``OutputGraph.wrap`` turns a real value read from the frame into an interpreter
value and records the guard that value's use depends on; ``call_tensor_op`` adds a
node and computes its example output on meta tensors.
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import contextvars
import dataclasses
import functools
import operator
import os
import re
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from . import autocast, meta_memo
from .behaviour import reachable
from .checks import GlobalState, TensorSpec
from .errors import CaptureError
from .grad_mode import GradModeExit
from .guards import (
    Guard,
    GuardKind,
    GuardSet,
    SizeRelation,
)
from .kinds.model_output import is_model_output
from .scalar_operands import rewrite_number_operands
from .shapes import DynamicDims, MetaMode, SpecializeShapes, SymbolicShapes
from .side_effects import (
    AttrWrite,
    CellWrite,
    ContentsWrite,
    DeferredCall,
    GlobalWrite,
    SideEffect,
)
from .source import (
    MODULES_NAME,
    AttrSource,
    EntrySource,
    FloatTensorSource,
    ImportSource,
    ItemSource,
    KeyedSource,
    KeySource,
    KeysSource,
    LenSource,
    LocalSource,
    Source,
    index_text,
)
from .torch_ops import READS_VALUES
from .variables import (
    BoundFunctionValue,
    ConstValue,
    ContextExitValue,
    DictValue,
    FloatExprValue,
    FloatInputValue,
    ListValue,
    ModelOutputValue,
    ModuleValue,
    NamedTupleValue,
    ObjectKey,
    ObjectValue,
    SliceValue,
    SymIntValue,
    TensorValue,
    TupleValue,
    UserObjectValue,
    Value,
)

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep

# Where a float is read as an input (guarded by type until its value is used):
# arguments, and entries of dicts and lists (an optimizer's ``group["lr"]``,
# which a scheduler changes every step). An object's float attribute is
# configuration, guarded by value.
_UNSPECIALIZED_FLOAT_SOURCES = (LocalSource, ItemSource, EntrySource)


def _argument_source(source: Source) -> bool:
    """Whether ``source`` reads an argument of the frame: a local, or an item
    or entry of one. An int read from a module's attribute (its
    ``normalized_shape``) is configuration, so it stays a constant; one read
    from a plain object's is offered only when the reader says so."""
    while type(source) in (ItemSource, EntrySource):
        source = source.base
    return type(source) is LocalSource


# Python values that are captured as constants and guarded by type and value.
CONSTANT_TYPES = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
    torch.Size,
    types.EllipsisType,
)

# Objects guarded by identity: calling or reading them is interpreted, not traced.
IDENTITY_TYPES = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.ModuleType,
    type,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.CodeType,  # immutable: library code reads co_varnames to bind arguments
    types.UnionType,  # type annotations (``int | None``) that validators read
    types.GenericAlias,
    torch._ops.OpOverloadPacket,
    torch._ops.OpOverload,
)


class OutputGraph:
    """Accumulates one fx graph, its inputs and its guards during capture."""

    def __init__(
        self,
        shapes: SymbolicShapes | None = None,
        dynamic_dims: DynamicDims | None = None,
        meta_mode: MetaMode | None = None,
    ) -> None:
        self.graph = torch.fx.Graph()
        self.meta_mode = meta_mode or contextlib.nullcontext
        # Symbolic sizes (docs/dynamic.md): the provider, its ShapeEnv, and for
        # each symbol's name the input and dim whose size it is.
        self.shapes = shapes if dynamic_dims is not None else None
        self.dynamic_dims = dynamic_dims
        self.env = None  # made with the first symbol
        # (dim None: an integer argument that is a symbol itself)
        self.size_sources: dict[str, tuple[Source, int | None]] = {}
        state = GlobalState.current()
        self.guards = GuardSet([Guard(GuardKind.GLOBAL_STATE, None, state)])
        self.initial_grad_enabled = state.grad_enabled
        self.initial_autocast = state.autocast
        # With-statements (BEFORE_WITH offsets) whose autocast block runs as Python.
        self.autocast_to_python: frozenset[int] = frozenset()
        self.input_sources: list[Source] = []
        self.example_inputs: list[Any] = []
        # one graph input per source: a tensor, or an int made a symbol
        self._inputs_by_source: dict[Source, TensorValue | SymIntValue] = {}
        self._inputs_by_id: dict[int, TensorValue] = {}  # inputs stay alive: ids hold
        self._real_inputs: dict[torch.fx.Node, torch.Tensor] = {}
        self._placeholder_names: set[str] = set()
        self._float_tensors: dict[tuple[int, torch.dtype], tuple[Value, Value]] = {}
        self.side_effects: list[SideEffect] = []
        # Writes seen so far, read back by later reads in the same capture.
        self.attr_writes: dict[tuple[int, str], Value] = {}  # (id(object), name)
        self.global_writes: dict[tuple[int, str], Value] = {}  # (id(globals), name)
        self._containers: dict[int, tuple[object, Value]] = {}  # one value per list
        self.frames: list = []  # the interpreters now running, innermost last
        self.steps = 0  # bytecode instructions interpreted, over all frames
        # > 0 inside torch.utils.checkpoint regions: their nodes are tagged
        # ``ember_recompute`` (the backward recomputes them instead of saving them).
        self.checkpoint_depth = 0
        self.meta_keys: set[str] = set()  # meta_memo entries this capture used
        # A backward ran in the graph (kinds/backward.py): the autograd history
        # of what it returns is spent, as eager's is after backward.
        self.ran_backward = False

    # -- values from the frame -------------------------------------------------

    def wrap(
        self, value: object, source: Source, *, object_attr: bool = False
    ) -> Value:
        """An interpreter value for ``value`` read from ``source``, with its guard.

        ``object_attr``: ``value`` is an attribute of a plain object (not an
        nn.Module), such as a KV cache's token count, so an int there may become
        a symbol as an argument's can (the DynamicDims callback decides).
        """
        if isinstance(value, torch.Tensor):
            return self._tensor_input(value, source)
        if (
            type(value) is int
            and (object_attr or _argument_source(source))
            and self.shapes is not None
            and self.dynamic_dims(source, value)  # (it sees 0 and 1 go by too)
            and value > 1
        ):
            return self._int_input(value, source)
        if type(value) is float and type(source) in _UNSPECIALIZED_FLOAT_SOURCES:
            self.guards.add(Guard(GuardKind.TYPE_MATCH, source, float))
            return FloatInputValue(
                value, source, functools.partial(self._guard_value, source, value)
            )
        if isinstance(value, CONSTANT_TYPES):
            self._guard_value(source, value)
            return ConstValue(value, source)
        if isinstance(value, torch.nn.Module):
            self.guards.add(Guard(GuardKind.TYPE_MATCH, source, type(value)))
            return ModuleValue(value, source)
        if id(value) in self._containers:  # a list or dict seen (and maybe changed)
            known = self._containers[id(value)][1]
            if source is not None and known.source not in (None, source):
                # one object under a second name: what the first name holds
                # stands for both only while they stay one object
                self.guards.add(Guard(GuardKind.SAME_OBJECT, source, known.source))
            return known
        if type(value) in (tuple, list) or _is_namedtuple(value):
            self.guards.add(Guard(GuardKind.TYPE_MATCH, source, type(value)))
            self.guards.add(
                Guard(GuardKind.EQUALS_MATCH, LenSource(source), (int, len(value)))
            )
            items = [self.wrap(v, ItemSource(source, i)) for i, v in enumerate(value)]
            if type(value) is list:
                wrapped = ListValue(items, source)
                self._containers[id(value)] = (value, wrapped)
                return wrapped
            if type(value) is tuple:
                return TupleValue(tuple(items), source)
            return NamedTupleValue(type(value), tuple(items), source)
        if is_model_output(type(value)):
            # transformers' output passed in (an encoder's, to the decoder):
            # its fields, each read and guarded; the object itself when it
            # escapes. Capture never writes to it (that breaks instead).
            self.guards.add(Guard(GuardKind.TYPE_MATCH, source, type(value)))
            fields = {
                f.name: self.wrap(getattr(value, f.name), AttrSource(source, f.name))
                for f in dataclasses.fields(value)
            }
            return ModelOutputValue(type(value), fields, source)
        if type(value) is dict and "__builtins__" in value:
            # A namespace (a module's __dict__, vars(module)): capture tracks
            # its writes by name, as globals, not as a dict's items.
            raise self.error(
                f"reading {source.user_name()}, a module's globals, as a dict",
                "read the names themselves (module.name), or keep this outside "
                "the compiled function",
            )
        if type(value) in (dict, collections.OrderedDict, collections.defaultdict):
            real_keys = keys = list(value)
            self.guards.add(Guard(GuardKind.TYPE_MATCH, source, type(value)))
            if any(isinstance(k, torch.Tensor) for k in keys):
                # Tensors compare by value: keys are guarded, and found, by identity.
                self.guards.add(
                    Guard(GuardKind.KEYS_ARE, KeysSource(source), tuple(keys))
                )
                keys = [
                    ObjectKey(k, source=KeySource(source, i))
                    if isinstance(k, torch.Tensor)
                    else k
                    for i, k in enumerate(keys)
                ]
            else:
                self.guards.add(
                    Guard(GuardKind.EQUALS_MATCH, KeysSource(source), (list, keys))
                )
            items = {
                k: self.wrap(value[real], self._entry_source(source, i, real))
                for i, (k, real) in enumerate(zip(keys, real_keys))
            }
            factory = None
            if isinstance(value, collections.defaultdict):
                factory_source = AttrSource(source, "default_factory")
                factory = self.wrap(value.default_factory, factory_source)
            wrapped = DictValue(items, source, factory)
            self._containers[id(value)] = (value, wrapped)
            return wrapped
        if isinstance(value, torch.amp.autocast):  # a @torch.autocast decorator's
            self.guards.add(Guard(GuardKind.ID_MATCH, source, value))
            return autocast.value_of(value, source)
        if isinstance(value, GradModeExit):  # a resume function inside a with-block
            self.guards.add(Guard(GuardKind.TYPE_MATCH, source, GradModeExit))
            restore = AttrSource(source, "restore")
            self.guards.add(
                Guard(GuardKind.EQUALS_MATCH, restore, (bool, value.restore))
            )
            return ContextExitValue(value.restore, source)
        if isinstance(value, types.MethodType) and isinstance(
            value.__func__, types.FunctionType
        ):
            receiver = self.wrap(value.__self__, AttrSource(source, "__self__"))
            func_source = AttrSource(source, "__func__")
            self.guards.add(Guard(GuardKind.ID_MATCH, func_source, value.__func__))
            return BoundFunctionValue(value.__func__, receiver, func_source)
        if isinstance(value, IDENTITY_TYPES) or callable(value):
            self.guards.add(Guard(GuardKind.ID_MATCH, source, value))
            return ObjectValue(value, source)
        if (
            hasattr(value, "__dict__")
            or hasattr(type(value), "__slots__")
            or isinstance(value, contextvars.ContextVar)
        ):
            self.guards.add(Guard(GuardKind.TYPE_MATCH, source, type(value)))
            return UserObjectValue(value, source)
        raise self.error(
            f"reading {source.user_name()} of type {type(value).__qualname__}",
            "pass tensors or Python constants, or keep this object outside the "
            "compiled function",
        )

    def _entry_source(self, source: Source, position: int, key: object) -> Source:
        """Where a dict's entry is read: by its key; a tensor key by the graph
        input it already is (one lookup), else by position (the keys are
        guarded in order either way)."""
        known = (
            self._inputs_by_id.get(id(key)) if isinstance(key, torch.Tensor) else None
        )
        if known is not None:
            return KeyedSource(source, known.source)
        return _entry_source(source, position, key)

    def _guard_value(self, source: Source, value: object) -> None:
        self.guards.add(Guard(GuardKind.EQUALS_MATCH, source, (type(value), value)))

    def wrap_builtin(self, name: str, globals_source: Source | None) -> Value:
        value = getattr(builtins, name)
        if globals_source is not None:
            # no module global shadows it, and nobody patched the builtin
            self.guards.add(Guard(GuardKind.KEY_NOT_IN, globals_source, name))
            patched = AttrSource(ImportSource("builtins"), name)
            self.guards.add(Guard(GuardKind.ID_MATCH, patched, value))
        return ObjectValue(value)

    def wrap_trusted(self, value: object) -> Value:
        """A value from torch's own code, which ember assumes is not patched."""
        if isinstance(value, CONSTANT_TYPES):
            return ConstValue(value)
        if isinstance(value, IDENTITY_TYPES) or callable(value):
            return ObjectValue(value)
        raise self.error(f"reading a {type(value).__qualname__} from torch's code")

    def _tensor_input(self, value: torch.Tensor, source: Source) -> TensorValue:
        if source in self._inputs_by_source:
            return self._inputs_by_source[source]
        first = self._inputs_by_id.get(id(value))
        if first is not None:  # one tensor under two names: one graph input
            self.guards.add(Guard(GuardKind.SAME_OBJECT, source, first.source))
            self._inputs_by_source[source] = first
            return first
        if value.layout is not torch.strided or type(value) not in (
            torch.Tensor,
            torch.nn.Parameter,
        ):
            raise self.error(
                f"tensor input {source.user_name()} of kind {type(value).__name__} "
                f"with layout {value.layout}",
                "pass dense torch.Tensor inputs",
            )
        node = self._placeholder(source)
        meta, dynamic = self._symbolic_meta(value, source)
        spec = TensorSpec.of(value, dynamic)
        self.guards.add(Guard(GuardKind.TENSOR_MATCH, source, spec))
        node.meta["example_value"] = meta
        node.meta["source"] = source.name()
        self.input_sources.append(source)
        self.example_inputs.append(value)
        wrapped = TensorValue(node, meta, value.device, source, type(value))
        self._inputs_by_source[source] = wrapped
        self._inputs_by_id[id(value)] = wrapped
        self._real_inputs[node] = value
        return wrapped

    def _symbolic_meta(
        self, value: torch.Tensor, source: Source
    ) -> tuple[torch.Tensor, tuple[tuple[int, str], ...]]:
        """The input's meta tensor, with a symbol as the size of each dim the
        policy makes dynamic (sizes 0 and 1 stay fixed); and (dim, symbol name)
        of each."""
        meta = _to_meta(value)
        if self.shapes is None:
            return meta, ()
        dims = sorted(d for d in self.dynamic_dims(source, value) if value.shape[d] > 1)
        if not dims:
            return meta, ()
        names = {d: f"s{len(self.size_sources) + k}" for k, d in enumerate(dims)}
        if self.env is None:
            self.env = self.shapes.ShapeEnv()
        try:
            symbolic = self.shapes.symbolic_tensor(self.env, meta, names)
        except self.shapes.NoShapeRule:
            return meta, ()  # not dense: its strides, and so its sizes, stay fixed
        for d, name in names.items():
            self.size_sources[name] = (source, d)
        return symbolic, tuple(names.items())

    def _int_input(self, value: int, source: Source) -> SymIntValue:
        """An integer argument whose value is a symbol: a graph input, one per
        source (a read of an attribute after capture saw it written gets the
        written value, from ``attr_writes``, and never reaches here)."""
        if source in self._inputs_by_source:
            return self._inputs_by_source[source]
        if self.env is None:
            self.env = self.shapes.ShapeEnv()
        name = f"s{len(self.size_sources)}"
        size = self.env.sym_int(self.env.symbol(name, value))
        self.size_sources[name] = (source, None)
        self.guards.add(Guard(GuardKind.TYPE_MATCH, source, int))
        node = self._placeholder(source)
        node.meta["example_value"] = size
        node.meta["source"] = source.name()
        self.input_sources.append(source)
        self.example_inputs.append(value)
        self._inputs_by_source[source] = SymIntValue(node, size, source)
        return self._inputs_by_source[source]

    def size_guards(self) -> list[Guard]:
        """The relations between sizes that capture assumed, as guards; an
        integer symbol must also stay above 1 (a tensor's symbolic sizes are
        checked so by their TensorSpec)."""
        if self.env is None:
            return []
        relations = [
            SizeRelation(f"({name} >= 2)", f"{name} >= 2", ((name, source, None),))
            for name, (source, dim) in self.size_sources.items()
            if dim is None
        ]
        relations += [
            SizeRelation(self.shapes.to_python(r), str(r), self._reads(r))
            for r in self.env.guards
        ]
        return [Guard(GuardKind.SIZES, None, tuple(relations))] if relations else []

    def _reads(self, relation: object) -> tuple[tuple[str, Source, int | None], ...]:
        names = sorted(s.name for s in relation.free_symbols)
        return tuple((n, *self.size_sources[n]) for n in names)

    def _placeholder(self, source: Source) -> torch.fx.Node:
        """A graph input named after ``source`` (numbered when two sources
        read alike: entries of a dict keyed by tensors of one size)."""
        base = name = _placeholder_name(source)
        count = 1
        while name in self._placeholder_names:
            name = f"{base}_{count}"
            count += 1
        self._placeholder_names.add(name)
        return self.graph.placeholder(name)

    def input_value(self, node: torch.fx.Node) -> TensorValue:
        """The value of graph input ``node``."""
        return self._inputs_by_id[id(self._real_inputs[node])]

    def real_tensor(self, t: TensorValue) -> torch.Tensor | None:
        """The caller's tensor behind graph input ``t`` (None for a tensor the
        graph computes)."""
        return self._real_inputs.get(t.node)

    def float_tensor(
        self, value: FloatInputValue, dtype: torch.dtype = torch.float64
    ) -> TensorValue:
        """``value`` as a 0-d tensor of ``dtype`` in the graph: a float input is
        a graph input (a 0-d float64 tensor, once per input), arithmetic on
        them the same arithmetic on those tensors, then cast to ``dtype`` (the
        dtype eager converts the number to, so it computes and promotes alike).
        Each value is taken in once per dtype."""
        made = self._float_tensors.get((id(value), dtype))
        if made is not None:
            return made[1]
        if isinstance(value, FloatExprValue):
            operands = [
                self.float_tensor(o) if isinstance(o, FloatInputValue) else o
                for o in value.operands
            ]
            as_tensor = self.call_tensor_op(
                "call_function", value.op, tuple(operands), {}
            )
        else:
            as_tensor = self._float_input(value)
        if dtype != torch.float64:
            as_tensor = self.call_tensor_op(
                "call_method", "to", (as_tensor, ConstValue(dtype)), {}
            )
        # The value is kept with its tensor: its id stays its own.
        self._float_tensors[(id(value), dtype)] = (value, as_tensor)
        return as_tensor

    def _float_input(self, value: FloatInputValue) -> TensorValue:
        """The graph input that carries a float argument, once per argument."""
        source = FloatTensorSource(value.source)
        if source in self._inputs_by_source:
            return self._inputs_by_source[source]
        example = torch.tensor(value.peek(), dtype=torch.float64)
        node = self._placeholder(value.source)
        meta = _to_meta(example)
        node.meta["example_value"] = meta
        node.meta["source"] = source.name()
        self.input_sources.append(source)
        self.example_inputs.append(example)
        wrapped = TensorValue(node, meta, example.device, source)
        self._inputs_by_source[source] = wrapped
        return wrapped

    # -- side effects -------------------------------------------------------------

    def write_attr(
        self, target: Value, name: str, value: Value, owner: object = None
    ) -> None:
        """``target.name = value``; ``owner`` is the real object written (by
        default ``target.value``), which later reads look the write up by."""
        owner = target.value if owner is None else owner
        self.attr_writes[(id(owner), name)] = value
        if isinstance(owner, types.ModuleType):
            # the module's own functions read the name as a global
            self.global_writes[(id(vars(owner)), name)] = value
        self.side_effects.append(AttrWrite(target, name, value))

    def write_global(
        self, f_globals: dict, globals_source: Source, name: str, value: Value
    ) -> None:
        self.global_writes[(id(f_globals), name)] = value
        self.side_effects.append(GlobalWrite(globals_source, name, value))

    def drop_nodes_after(self, count: int) -> None:
        """Remove the nodes added after the first ``count`` (graph inputs stay,
        unused)."""
        for node in reversed(list(self.graph.nodes)[count:]):
            if node.op != "placeholder" and not node.users:
                self.graph.erase_node(node)

    def write_cell(self, function: Value, index: int, value: Value) -> None:
        """``function.__closure__[index]`` (a real cell) now holds ``value``."""
        self.side_effects.append(CellWrite(function, index, value))

    def defer_call(self, fn: Value, args: tuple, kwargs: dict) -> None:
        """Make the call ``fn(*args, **kwargs)`` after the graph (logging)."""
        self.side_effects.append(DeferredCall(fn, tuple(args), dict(kwargs)))

    def write_contents(self, container: ListValue | DictValue) -> None:
        """``container`` (read from a source) was changed in place."""
        if not any(
            isinstance(e, ContentsWrite) and e.container is container
            for e in self.side_effects
        ):
            self.side_effects.append(ContentsWrite(container))

    # -- tensor operations -------------------------------------------------------

    def call_tensor_op(
        self, kind: str, target: Any, args: tuple, kwargs: dict
    ) -> Value:
        """Add ``call_function``/``call_method`` node; return its value tree.

        The example output is computed by running the same op on the meta tensors of
        the inputs, so sizes, strides and dtypes follow torch's own rules.
        """
        if autocast.casts_inside(target):
            raise self.error(
                f"{_op_name(kind, target)} under autocast",
                "its kernel's own matmuls are autocast in eager, which capture "
                "cannot see; it runs eagerly",
            )
        if kind == "call_method" and target in READS_VALUES:
            raise self.error(
                f"Tensor.{target}() reads the tensor's values into Python",
                "the values are not known while capturing: the graph ends here",
            )
        rewritten = rewrite_number_operands(self, kind, target, args, kwargs)
        if rewritten is not None:
            return rewritten
        float_dtype = _float_operand_dtype(kind, target, args)
        if float_dtype is not None:
            args = tuple(
                self.float_tensor(a, float_dtype)
                if isinstance(a, FloatInputValue)
                else a
                for a in args
            )
        try:
            node_args, node_kwargs = _plain((args, kwargs), _node_of)
            meta_args, meta_kwargs = _plain((args, kwargs), _meta_of)
        except TypeError as e:
            raise self.error(f"{_op_name(kind, target)}: {e}") from e
        devices = {id(t.meta): t.device for t in tensor_leaves((args, kwargs))}
        try:
            result = self._run_on_meta(kind, target, meta_args, meta_kwargs, devices)
        except SpecializeShapes:
            raise
        except Exception as e:
            raise self.error(
                f"{_op_name(kind, target)} on these inputs ({type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''})",
                "this op needs real data or is not supported on meta tensors",
            ) from e
        device = _result_device(args, kwargs, kind, target)
        if kind == "call_method":
            node = self.graph.call_method(target, node_args, node_kwargs)
        else:
            node = self.graph.call_function(target, node_args, node_kwargs)
        filename, lineno = self.location()
        node.meta["user_loc"] = f"{filename}:{lineno}"
        if self.checkpoint_depth:
            node.meta["ember_recompute"] = True
        return self._unpack_result(node, result, device, kind, target)

    def call_with_example(
        self, target: Any, args: tuple, kwargs: dict, example: object
    ) -> Value:
        """A ``call_function`` node whose example output the caller computed:
        for a call no meta kernel runs (``torch.autograd.grad``)."""
        node_args, node_kwargs = _plain((args, kwargs), _node_of)
        node = self.graph.call_function(target, node_args, node_kwargs)
        filename, lineno = self.location()
        node.meta["user_loc"] = f"{filename}:{lineno}"
        device = _result_device(args, kwargs, "call_function", target)
        return self._unpack_result(node, example, device, "call_function", target)

    def _run_on_meta(self, kind, target, meta_args, meta_kwargs, devices) -> object:
        """The op's example output: replayed from the memo when it has an entry
        for these inputs' metadata, else computed by the meta kernel and memoized.
        Under autocast the dtypes are those eager's autocast gives (``devices``:
        each input meta tensor's real device, by id)."""
        # Autocast casts by the inputs' real device type: a fact of the result.
        types = sorted({d.type for d in devices.values()}) if autocast.on() else ()
        symbolic = self.env is not None and self.shapes.has_symbols(
            (meta_args, meta_kwargs)
        )
        memo_key = None
        if not symbolic:
            memo_key = meta_memo.key(kind, target, meta_args, meta_kwargs, tuple(types))
        if memo_key is not None:
            text, inputs, before = memo_key
            self.meta_keys.add(text)
            result = meta_memo.MEMO.replay(text, inputs)
            if result is not meta_memo.MISS:
                return result
        if kind == "call_method" and target in _DEVICE_MOVES:
            # Moved to another device, a meta tensor stays meta (copying its
            # data out fails); the result's real device is _result_device's.
            meta_args, meta_kwargs = _on_meta(target, meta_args, meta_kwargs)

            def run(receiver, *rest, **kw):
                return receiver.to(*rest, **kw)
        elif kind == "call_method":

            def run(receiver, *rest, **kw):
                return getattr(receiver, target)(*rest, **kw)
        else:
            run = target
        if _is_foreach(target):
            meta_args = _scalars_on_cpu(meta_args)
        if symbolic:
            return self._run_symbolic(run, meta_args, meta_kwargs, devices, target)
        with self.meta_mode():
            result = autocast.call(run, meta_args, meta_kwargs, devices)
        if memo_key is not None:
            meta_memo.MEMO.record(text, inputs, before, result)
        return result

    def _run_symbolic(self, run, meta_args, meta_kwargs, devices, target) -> object:
        try:
            with self.shapes.SymbolicMode(self.env):
                return autocast.call(run, meta_args, meta_kwargs, devices)
        except self.shapes.NoShapeRule as e:
            filename, lineno = self.location()
            raise SpecializeShapes(
                f"{_op_name('call_function', target)} at {filename}:{lineno}: {e}"
            ) from e

    def call_size_op(self, target: Callable, args: Sequence[Value]) -> Value:
        """Python arithmetic or a comparison on sizes, one of them symbolic:
        a graph node, and the symbolic result (a constant when it has none)."""
        values = [_plain(a, _meta_of) for a in args]
        result = target(*values)
        if not isinstance(result, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return ConstValue(result)
        node_args = tuple(_plain(a, _node_of) for a in args)
        node = self.graph.call_function(target, node_args)
        return SymIntValue(node, result)

    def size_value(self, t: TensorValue, dim: int) -> Value:
        """``t.size(dim)``: a constant, or a symbolic size read in the graph."""
        size = t.meta.shape[dim]
        if not isinstance(size, torch.SymInt):
            return ConstValue(size)
        return SymIntValue(self.graph.call_method("size", (t.node, dim)), size)

    def _unpack_result(self, node, result, device, kind, target) -> Value:
        if result is None:  # an in-place op such as setitem
            return ConstValue(None)
        if isinstance(result, torch.Tensor):
            node.meta["example_value"] = result
            return TensorValue(node, _to_meta(result), device)
        if isinstance(result, (tuple, list)) and any(
            isinstance(r, torch.Tensor) for r in result
        ):
            node.meta["example_value"] = tuple(result)
            items = []
            for i, r in enumerate(result):
                if not isinstance(r, torch.Tensor):
                    items.append(ConstValue(r))
                    continue
                item = self.graph.call_function(operator.getitem, (node, i))
                item.meta["example_value"] = r
                item.meta["user_loc"] = node.meta["user_loc"]
                items.append(TensorValue(item, _to_meta(r), device))
            if _is_namedtuple(result):  # torch.return_types: .values, .indices
                return NamedTupleValue(type(result), tuple(items))
            return TupleValue(tuple(items))
        raise self.error(
            f"{_op_name(kind, target)} returning {type(result).__name__}",
            "only tensor results are captured into the graph",
        )

    # -- results ----------------------------------------------------------------

    def has_ops(self) -> bool:
        return any(n.op in ("call_function", "call_method") for n in self.graph.nodes)

    def location(self) -> tuple[str, int]:
        """The user's (file, line) now being interpreted: the innermost frame that
        is not torch's own code (a torch module's forward points at its caller)."""
        for frame in reversed(self.frames):
            filename, lineno = frame.location()
            if not filename.startswith(_TORCH_DIR):
                return filename, lineno
        return self.frames[-1].location() if self.frames else ("<unknown>", 0)

    def error(self, reason: str, hint: str = "") -> CaptureError:
        """A CaptureError at the user's line, naming torch's line if it is inside."""
        user = self.location()
        if self.frames and self.frames[-1].location() != user:
            filename, lineno = self.frames[-1].location()
            inside = os.path.relpath(
                filename, os.path.dirname(_TORCH_DIR.rstrip(os.sep))
            )
            reason = f"{reason} (inside {inside}:{lineno})"
        return CaptureError(reason, *user, hint)


# Arithmetic where a float argument may be a 0-d float64 tensor instead: with
# float32 or float64 tensors the result (dtype and value: the kernels read a 0-d
# CPU tensor as a scalar) is the same, so the float need not be guarded by value.
_FLOAT_INPUT_FUNCTIONS = frozenset(
    {
        operator.add, operator.sub, operator.mul, operator.truediv, operator.pow,
        operator.iadd, operator.isub, operator.imul, operator.itruediv,
        torch.add, torch.sub, torch.mul, torch.div, torch.true_divide, torch.pow,
    }
)  # fmt: skip
_FLOAT_INPUT_METHODS = frozenset(
    {
        "add", "sub", "mul", "div", "true_divide", "pow",
        "add_", "sub_", "mul_", "div_",
        "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
        "__truediv__", "__rtruediv__", "__pow__", "__rpow__",
    }
)  # fmt: skip
_FLOAT_INPUT_DTYPES = (torch.float32, torch.float64)


def _float_operand_dtype(kind: str, target: Any, args: tuple) -> torch.dtype | None:
    """For arithmetic between floating-point tensors of one dtype and float
    inputs, that dtype: eager converts a Python number to it (a float64 input
    would promote a 0-d tensor); None for any other op."""
    if kind == "call_method":
        if target not in _FLOAT_INPUT_METHODS:
            return None
    elif target not in _FLOAT_INPUT_FUNCTIONS:
        return None
    if not any(isinstance(a, FloatInputValue) for a in args):
        return None
    dtypes = {a.meta.dtype for a in args if isinstance(a, TensorValue)}
    if len(dtypes) != 1 or not dtypes <= set(_FLOAT_INPUT_DTYPES):
        return None
    return dtypes.pop()


def _is_namedtuple(value: object) -> bool:
    """A namedtuple or one of torch.return_types' struct sequences (others,
    such as os.stat_result, have fields that are not items)."""
    kind = type(value)
    return issubclass(kind, tuple) and (
        hasattr(kind, "_fields") or kind.__module__ == "torch.return_types"
    )


def _placeholder_name(source: Source) -> str:
    return re.sub(r"\W+", "_", source.name()).strip("_").lower() or "input"


def _to_meta(t: torch.Tensor) -> torch.Tensor:
    if t.device.type == "meta":
        return t
    meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    if t.requires_grad:
        meta.requires_grad_(True)
    return meta


def _plain(v: object, tensor_leaf: Callable[[TensorValue], object]) -> object:
    """Values to the plain Python objects an op takes, tensors (and symbolic
    sizes) via ``tensor_leaf``."""
    if isinstance(v, (TensorValue, SymIntValue)):
        return tensor_leaf(v)
    if isinstance(v, SliceValue):
        return slice(*(_plain(p, tensor_leaf) for p in (v.start, v.stop, v.step)))
    if isinstance(v, (ConstValue, ObjectValue)):
        return _dtype_of_type(v.value)
    if isinstance(v, (TupleValue, ListValue, tuple, list)):
        items = v.items if isinstance(v, (TupleValue, ListValue)) else v
        plain = [_plain(i, tensor_leaf) for i in items]
        return list(plain) if isinstance(v, (ListValue, list)) else tuple(plain)
    if isinstance(v, dict):
        return {k: _plain(i, tensor_leaf) for k, i in v.items()}
    if isinstance(v, Value):
        raise TypeError(f"passing a {type(v).__name__} to a tensor op")
    return _dtype_of_type(v)  # a plain Python constant the interpreter passed itself


def _dtype_of_type(value: object) -> object:
    """``int`` as a dtype (``dtype=int``, ``.to(float)``) is the dtype torch's
    argument parser reads (a graph cannot print a type); anything else as is."""
    if isinstance(value, type) and value in _PYTHON_DTYPES:
        return _PYTHON_DTYPES[value]
    return value


# ``dtype=int`` and ``.to(float)``: the dtype torch's argument parser reads.
_PYTHON_DTYPES = {
    int: torch.int64,
    float: torch.float64,
    bool: torch.bool,
    complex: torch.complex128,
}


def _node_of(v: TensorValue | SymIntValue) -> torch.fx.Node:
    return v.node


def _meta_of(v: TensorValue | SymIntValue) -> object:
    return v.meta if isinstance(v, TensorValue) else v.value


def _entry_source(source: Source, position: int, key: object) -> Source:
    """Where a dict's entry is read: by its key, or by its position when no
    literal names the key (the keys are guarded in order either way)."""
    if index_text(key, MODULES_NAME) is None:
        return EntrySource(source, position, key)
    return ItemSource(source, key)


def tensor_leaves(v: object) -> list[TensorValue]:
    """The tensors in ``v`` (a value, or Python tuples, lists and dicts of
    values), each once, in order."""
    return [t for t in reachable(list(_values(v))) if isinstance(t, TensorValue)]


def _values(v: object):
    """The values in ``v``, through Python tuples, lists and dicts, in order."""
    if isinstance(v, (tuple, list)):
        for item in v:
            yield from _values(item)
    elif isinstance(v, dict):
        for item in v.values():
            yield from _values(item)
    else:
        yield v


# Tensor methods that move a tensor between devices.
_DEVICE_MOVES = frozenset({"to", "cpu", "cuda"})


def _is_foreach(target: object) -> bool:
    return getattr(target, "__name__", "").startswith("_foreach_")


def _scalars_on_cpu(args: tuple) -> tuple:
    """A foreach op's tensor of scalars (one per list entry) must be on the CPU
    even for its meta kernel, which reads only the lists' metadata."""
    return tuple(
        torch.zeros(a.shape, dtype=a.dtype)
        if isinstance(a, torch.Tensor) and a.dim() == 1
        else a
        for a in args
    )


def _on_meta(target: str, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The arguments of ``Tensor.to``/``cpu``/``cuda`` as ``to``'s, with every
    device made ``meta`` (``cpu()`` and ``cuda()`` become ``to("meta")``)."""
    if target != "to":
        kept = {k: v for k, v in kwargs.items() if k == "memory_format"}
        return args[:1], {**kept, "device": "meta"}
    receiver, *rest = args
    rest = ["meta" if isinstance(a, (torch.device, str)) else a for a in rest]
    kwargs = {k: "meta" if k == "device" else v for k, v in kwargs.items()}
    return (receiver, *rest), kwargs


def _result_device(args, kwargs, kind, target) -> torch.device:
    device = _plain(kwargs["device"], _node_of) if "device" in kwargs else None
    if device is not None:  # (``device=None``: the default, as if not given)
        return torch.device(device)
    if kind == "call_method" and target in ("to", "cpu", "cuda"):
        if target != "to":
            return torch.device(target)
        for a in list(args[1:]) + list(kwargs.values()):
            c = a.value if isinstance(a, ConstValue) else None
            if isinstance(c, (torch.device, str)):
                return torch.device(c)
    leaves = list(tensor_leaves((args, kwargs)))
    for leaf in leaves:  # a float taken in as a 0-d CPU tensor does not count
        if not isinstance(leaf.source, FloatTensorSource):
            return leaf.device
    return leaves[0].device if leaves else torch.get_default_device()


def _op_name(kind: str, target: Any) -> str:
    if kind == "call_method":
        return f"Tensor.{target}"
    return getattr(target, "__qualname__", None) or repr(target)

"""The __torch_dispatch__ mode that records functional aten calls into an fx graph.

Every aten call on a tracked tensor becomes a node; in-place ops become their
functional twins (see functionalize.py) and ops with a decomposition rule are
replaced by what the rule calls. Each node keeps the user's file:line.
"""

from __future__ import annotations

import keyword
import operator
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx
from torch.utils import _pytree as pytree

from . import autocast, symbolic
from .dispatch_mode import DispatchMode
from .errors import AotGradError
from .functionalize import (
    INVERSE_VIEWS,
    Ref,
    Storage,
    functional_twin,
    is_view_op,
    mutated_args,
    out_twin,
    replay,
    with_defaults,
)
from .layout import IDENTITY_VIEWS, ViewStep
from .meta import NOT_COVERED, meta_result
from .symbolic.values import NoShapeRule, has_symbols, is_symbolic

Decompositions = Mapping[torch._ops.OpOverload, Callable[..., Any]]

_DATA_DEPENDENT = (torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output)


class NeedsRealTensors(Exception):
    """An op has no meta kernel: the trace must run again on real tensors."""


class AtenRecorder(DispatchMode):
    """Records functional aten calls on tracked tensors into ``self.graph``.

    ``on_meta`` says whether the traced values are meta tensors; ``device`` is the
    device the recorded graph will run on (it replaces "meta" in recorded args).
    """

    def __init__(
        self,
        decompositions: Decompositions,
        mutation_rules: Decompositions,
        device: torch.device,
        on_meta: bool,
        env: symbolic.ShapeEnv | None = None,
    ) -> None:
        super().__init__()
        self.graph = torch.fx.Graph()
        # With symbolic input sizes: their symbols, and the nodes computing sizes.
        self.env = env
        self.sizes = None if env is None else symbolic.SizeNodes(self.graph, env.value)
        self.decompositions = decompositions
        self.mutation_rules = mutation_rules
        self.device = device
        self.on_meta = on_meta
        # Set when the graph has autocast regions: traced meta tensors report it.
        self.on_device: torch.device | None = None
        self.autocast_on = False  # whether the node now traced runs under autocast
        self.constants: dict[str, torch.Tensor] = {}
        self.user_loc: str | None = None
        self.recompute = False  # the node now traced is in a checkpointed region
        self.refs: dict[int, Ref] = {}
        self._alive: list[torch.Tensor] = []  # keeps ids unique while tracing

    # -- tracked tensors ---------------------------------------------------------

    def track(
        self, tensor: torch.Tensor, node: torch.fx.Node, input_index: int | None = None
    ) -> Ref:
        """``tensor`` is a fresh value (its own storage) computed by ``node``."""
        node.meta["val"] = _snapshot(tensor)
        ref = Ref(Storage(node, input_index), (), node, 0)
        self.bind(tensor, ref)
        return ref

    def bind(self, tensor: torch.Tensor, ref: Ref) -> None:
        self.refs[id(tensor)] = ref
        self._alive.append(tensor)

    def ref_of(self, tensor: torch.Tensor) -> Ref:
        ref = self.refs.get(id(tensor))
        if ref is None:
            raise AotGradError(
                "a tensor that is neither a graph input nor made inside the graph "
                f"reached the trace{self._where()}"
            )
        return ref

    def node_of(self, value: object) -> object:
        """The node of a tracked tensor's current value (other values unchanged)."""
        if isinstance(value, torch.Tensor):
            return self.current(self.ref_of(value))
        if isinstance(value, torch.device) and value.type == "meta":
            return self.device
        if isinstance(value, (torch.SymInt, torch.SymFloat)):
            return self.sizes.node(symbolic.expr_of(value))
        if is_symbolic(value):
            raise NoShapeRule(f"a symbolic {type(value).__name__} argument ({value})")
        return value

    def current(self, ref: Ref) -> torch.fx.Node:
        """Regenerates a view whose storage was written since it was last read."""
        if ref.version != ref.storage.version:
            node = ref.storage.node
            for step in ref.chain:
                node = replay(self.emit, step, node)
            ref.node, ref.version = node, ref.storage.version
        return ref.node

    def emit(self, op: Callable, *args: object, **kwargs: object) -> torch.fx.Node:
        """A node of ``op`` over existing nodes; its value is computed from theirs."""
        vargs, vkwargs = pytree.tree_map_only(
            torch.fx.Node, lambda n: n.meta["val"], (args, kwargs)
        )
        if self.env is not None:  # sizes replayed from a view: computed in the graph
            args, kwargs = pytree.tree_map_only(
                (torch.SymInt, torch.SymFloat), self.node_of, (args, kwargs)
            )
        node = self._new_node(op, args, kwargs)
        if self.env is not None and has_symbols((vargs, vkwargs)):
            value = symbolic.run_symbolic(self.env, op, vargs, vkwargs)
        else:
            value = op(*vargs, **vkwargs)
        node.meta["val"] = _snapshot(value)
        return node

    # -- dispatch ------------------------------------------------------------------

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # Autocast is off in here (torch turns it off to call a dispatch mode),
        # so a decomposition's or functional twin's ops are not cast again.
        kwargs = kwargs or {}
        if self.autocast_on:
            autocast.refuse_cast_inside(func)
        if func in self.mutation_rules:
            with self:
                return self.mutation_rules[func](*args, **kwargs)
        if func in self.decompositions:
            with self:
                out = self.decompositions[func](*args, **kwargs)
            if out is not NotImplemented:
                return out
        if _data_dependent(func, args):
            raise AotGradError(
                f"aten op {func}{self._where()} has an output that depends on tensor "
                "data, which the trace cannot know; the graph runs eagerly"
            )
        args, kwargs = pytree.tree_map(self._lift_constant, (args, kwargs))
        if not any(isinstance(a, torch.Tensor) for a in pytree.tree_leaves(args)):
            # A factory op (zeros, rand, ...): recorded, so it runs at call time.
            out = self._run(func, args, kwargs)
            self._track_outputs(out, self._record(func, args, kwargs))
            return out
        writes = mutated_args(func)
        twin = out_twin(func) if writes else None
        if twin is not None:
            return self._out_op(twin, args, kwargs)
        if writes:
            return self._mutation(func, args, kwargs, writes)
        if is_view_op(func):
            return self._view(func, args, kwargs)
        node = self._record(func, args, kwargs)
        out = self._run(func, args, kwargs)
        self._track_outputs(out, node)
        return out

    def _view(self, func, args, kwargs):
        base = self.ref_of(args[0])
        out = self._run(func, args, kwargs)
        step_args = (func, tuple(args[1:]), tuple(kwargs.items()))
        if func in IDENTITY_VIEWS:
            node = self.current(base)
            chain = (*base.chain, ViewStep(*step_args))
            self.bind(out, Ref(base.storage, chain, node, base.storage.version))
            return out
        node = self._record(func, args, kwargs)
        outs = [out] if isinstance(out, torch.Tensor) else list(out)
        for i, tensor in enumerate(outs):
            index = None if isinstance(out, torch.Tensor) else i
            item = (
                node if index is None else self._new_node(operator.getitem, (node, i))
            )
            item.meta["val"] = _snapshot(tensor)
            chain = (*base.chain, ViewStep(*step_args, index=index))
            self.bind(tensor, Ref(base.storage, chain, item, base.storage.version))
        return out

    def _out_op(self, twin, args, kwargs):
        """``op(..., out=t)``: the functional op, then ``t.copy_`` of its value
        (functionalized as any write); ``t`` keeps its shape, as eager's
        resize of an ``out`` of the right size leaves it."""
        kwargs = dict(kwargs)
        out = kwargs.pop("out")
        with self:
            result = twin(*args, **kwargs)
            if result.shape != out.shape:
                raise AotGradError(
                    f"aten op {twin}{self._where()} with an out= tensor of another "
                    "shape (eager resizes it); the graph runs eagerly"
                )
            torch.ops.aten.copy_.default(out, result)
        return out

    def _mutation(self, func, args, kwargs, writes):
        if writes != [0]:
            raise AotGradError(
                f"aten op {func}{self._where()} writes to an argument other than "
                "self, which aotgrad cannot functionalize; the graph runs eagerly"
            )
        target = self.ref_of(args[0])
        twin = functional_twin(func)
        with self:  # the functional twin is recorded (and decomposed) like any op
            result = twin(*with_defaults(func, args, kwargs), **kwargs)
        out = self._run(func, args, kwargs)  # keeps the traced value's metadata true
        if torch.Tag.inplace_view in func.tags:
            if target.storage.input_index is not None:
                raise AotGradError(
                    f"in-place view op {func}{self._where()} changes the shape of a "
                    "graph input; the graph runs eagerly"
                )
            self.bind(args[0], self.ref_of(result))
            return out
        node = self.current(self.ref_of(result))
        if node.meta["val"].dtype != args[0].dtype:
            node = self.emit(aten_to_copy, node, dtype=args[0].dtype)
        self._write(target, node)
        return out

    def _write(self, ref: Ref, value: torch.fx.Node) -> None:
        """Stores ``value`` into the view ``ref``: its storage gets a new value."""
        storage = ref.storage
        parents = [storage.node]
        for step in ref.chain[:-1]:
            parents.append(replay(self.emit, step, parents[-1]))
        src = value
        for step, parent in zip(reversed(ref.chain), reversed(parents)):
            inverse = INVERSE_VIEWS.get(step.op)
            if inverse is None:
                raise AotGradError(
                    f"a write through view op {step.op}{self._where()} is not "
                    "supported by aotgrad's functionalization; the graph runs eagerly"
                )
            src = inverse(self.emit, parent, src, step)
        storage.node = src
        storage.written_with_grad |= torch.is_grad_enabled()
        storage.version += 1
        ref.node, ref.version = value, storage.version

    # -- helpers ---------------------------------------------------------------------

    def _run(self, func, args, kwargs):
        if self.on_meta:
            args, kwargs = pytree.tree_map_only(
                torch.device, lambda d: torch.device("meta"), (args, kwargs)
            )
            if _is_factory(func, args) and "device" not in kwargs:
                kwargs = {**kwargs, "device": torch.device("meta")}
        try:
            if self.env is not None and has_symbols((args, kwargs)):
                return symbolic.run_symbolic(self.env, func, args, kwargs)
            result = meta_result(func, args, kwargs) if self.on_meta else NOT_COVERED
            if result is NOT_COVERED:
                result = func(*args, **kwargs)
            return autocast.lift(result, self.on_device)
        except NoShapeRule:
            raise
        except NotImplementedError as e:
            if self.on_meta:
                raise NeedsRealTensors(str(func)) from e
            raise self._op_error(func, e) from e
        except AotGradError:
            raise
        except Exception as e:
            raise self._op_error(func, e) from e

    def _op_error(self, func, e: Exception) -> AotGradError:
        values = "meta" if self.on_meta else "example"
        return AotGradError(
            f"aten op {func} could not run on {values} tensors{self._where()}: "
            f"{type(e).__name__}: {e}"
        )

    def _where(self) -> str:
        return f" (from {self.user_loc})" if self.user_loc else ""

    def _record(self, func, args, kwargs) -> torch.fx.Node:
        node_args, node_kwargs = pytree.tree_map(self.node_of, (args, kwargs))
        return self._new_node(func, node_args, node_kwargs)

    def _new_node(self, target, args, kwargs=None) -> torch.fx.Node:
        if keyword.iskeyword(getattr(target, "_overloadname", "")):
            raise AotGradError(
                f"aten op {target}{self._where()} has an overload name that a "
                "graph's Python code cannot spell; the graph runs eagerly"
            )
        node = self.graph.call_function(target, tuple(args), kwargs or {})
        if self.user_loc:
            node.meta["user_loc"] = self.user_loc
        if self.recompute:
            node.meta["ember_recompute"] = True
        return node

    def _track_outputs(self, out: object, node: torch.fx.Node) -> None:
        if isinstance(out, torch.Tensor):
            self.track(out, node)
        elif isinstance(out, (tuple, list)):
            # the whole value too: a compiler reads it instead of running the
            # op's meta kernel again
            node.meta["val"] = type(out)(_snapshot(item) for item in out)
            for i, item in enumerate(out):
                if isinstance(item, torch.Tensor):
                    self.track(item, self._new_node(operator.getitem, (node, i)))

    def _lift_constant(self, value: object) -> object:
        """A real tensor made outside the trace (``torch.tensor(...)``): a constant."""
        if not isinstance(value, torch.Tensor) or id(value) in self.refs:
            return value
        if value.device.type == "meta" or isinstance(value, autocast.OnDevice):
            return value  # ref_of names it when recorded
        name = f"_tensor_constant{len(self.constants)}"
        self.constants[name] = value
        traced = value
        if self.on_meta:
            traced = autocast.lift(_meta_like(value), self.on_device)
        self.track(traced, self.graph.get_attr(name))
        return traced


aten_to_copy = torch.ops.aten._to_copy.default


def _data_dependent(func, args) -> bool:
    """Whether the op's output shape depends on tensor data. Indexing with
    integer tensors does not (it broadcasts the indices); with a boolean mask
    it does."""
    if func is torch.ops.aten.index.Tensor:
        return any(
            i is not None and (i.dtype is torch.bool or i.dtype is torch.uint8)
            for i in args[1]
        )
    return any(tag in func.tags for tag in _DATA_DEPENDENT)


def _is_factory(func, args) -> bool:
    """An op that makes a tensor from no tensor, on a device it takes as argument."""
    takes_device = any(a.name == "device" for a in func._schema.arguments)
    return takes_device and not any(
        isinstance(a, torch.Tensor) for a in pytree.tree_leaves(args)
    )


def _snapshot(value: object) -> object:
    """A value for ``node.meta['val']`` that later in-place view ops cannot change."""
    if isinstance(value, torch.Tensor):
        with torch.utils._python_dispatch._disable_current_modes():
            return autocast.lower(value).detach()
    return value


def _meta_like(t: torch.Tensor) -> torch.Tensor:
    meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    return meta.requires_grad_(t.requires_grad) if t.is_floating_point() else meta


def _lists_as_index_tensors(index: object) -> object:
    """A tensor index with each list of ints made the CPU tensor torch would
    build from it (``x[..., [-2], :]``). On a meta tensor torch builds that
    tensor on the meta device, where its values are lost; a CPU tensor is a
    constant of the graph. (A list of bools is a mask: its result's size
    depends on the values, so it stays as it is.)"""
    if isinstance(index, tuple):
        return tuple(_lists_as_index_tensors(i) for i in index)
    ints = isinstance(index, list) and index and pytree.tree_leaves(index)
    if ints and all(type(v) is int for v in ints):
        return torch.tensor(index)
    return index


class LocatingInterpreter(torch.fx.Interpreter):
    """Runs the torch-level graph, telling the recorder which user line is running."""

    def __init__(self, gm: torch.fx.GraphModule, recorder: AtenRecorder) -> None:
        super().__init__(gm)
        self.recorder = recorder

    def run(self, *args: object, **kwargs: object) -> Any:
        self.autocast_modes: list = []  # regions entered and not yet left
        try:
            return super().run(*args, **kwargs)
        finally:
            for mode in reversed(self.autocast_modes):  # after a failure
                mode.__exit__(None, None, None)

    def call_function(self, target, args, kwargs) -> Any:
        if target in (operator.getitem, operator.setitem) and isinstance(
            args[0], torch.Tensor
        ):
            args = (args[0], _lists_as_index_tensors(args[1]), *args[2:])
        return super().call_function(target, args, kwargs)

    def run_node(self, n: torch.fx.Node) -> Any:
        self.recorder.user_loc = n.meta.get("user_loc")
        self.recorder.recompute = bool(n.meta.get("ember_recompute"))
        self.recorder.autocast_on = autocast.any_enabled()
        _refuse_custom_function(n)
        try:
            result = super().run_node(n)
            if n.target is autocast.ENTER:
                self.autocast_modes.append(result)
            elif n.target is autocast.EXIT:
                self.autocast_modes.pop()
            return result
        except (AotGradError, NeedsRealTensors, NoShapeRule):
            raise
        except Exception as e:
            where = f" (from {n.meta['user_loc']})" if n.meta.get("user_loc") else ""
            raise AotGradError(
                f"tracing {n.format_node()}{where} failed: {type(e).__name__}: {e}"
            ) from e


def _refuse_custom_function(n: torch.fx.Node) -> None:
    owner = getattr(n.target, "__self__", None)
    if isinstance(owner, type) and issubclass(owner, torch.autograd.Function):
        where = f" (from {n.meta['user_loc']})" if n.meta.get("user_loc") else ""
        raise AotGradError(
            f"custom autograd.Function {owner.__qualname__}{where} cannot be traced: "
            "its Python forward/backward may have side effects; the graph runs eagerly"
        )

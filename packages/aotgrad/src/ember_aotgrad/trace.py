"""Re-trace a torch-level fx graph down to aten op overloads.

The captured graph runs node by node on meta tensors under a ``__torch_dispatch__``
mode that records every aten call it sees into a new fx graph. Each aten node keeps
the user's file:line of the torch-level node it came from (``meta['user_loc']``).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from .errors import AotGradError

log = logging.getLogger("ember.aotgrad")

Decompositions = Mapping[torch._ops.OpOverload, Callable[..., Any]]


class _AtenRecorder(TorchDispatchMode):
    """Records the aten calls made on tracked meta tensors into ``self.graph``."""

    def __init__(self, decompositions: Decompositions) -> None:
        super().__init__()
        self.graph = torch.fx.Graph()
        self.decompositions = decompositions
        self.constants: dict[str, torch.Tensor] = {}
        self.user_loc: str | None = None
        self._nodes: dict[int, torch.fx.Node] = {}
        self._alive: list[torch.Tensor] = []  # keeps ids unique while tracing

    def track(self, tensor: torch.Tensor, node: torch.fx.Node) -> None:
        self._nodes[id(tensor)] = node
        self._alive.append(tensor)
        node.meta["val"] = tensor

    def node_of(self, value: object) -> object:
        if not isinstance(value, torch.Tensor):
            return value
        node = self._nodes.get(id(value))
        if node is None:
            raise AotGradError("a tensor that is not a graph input reached the trace")
        return node

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.decompositions:
            with self:
                return self.decompositions[func](*args, **kwargs)
        args, kwargs = pytree.tree_map(self._lift_constant, (args, kwargs))
        try:
            out = func(*args, **kwargs)
        except Exception as e:
            where = f" (from {self.user_loc})" if self.user_loc else ""
            raise AotGradError(
                f"aten op {func} could not run on meta tensors{where}: "
                f"{type(e).__name__}: {e}"
            ) from e
        node_args, node_kwargs = pytree.tree_map(self.node_of, (args, kwargs))
        node = self.graph.call_function(func, node_args, node_kwargs)
        if self.user_loc:
            node.meta["user_loc"] = self.user_loc
        if isinstance(out, torch.Tensor):
            self.track(out, node)
        elif isinstance(out, (tuple, list)):
            for i, item in enumerate(out):
                if isinstance(item, torch.Tensor):
                    self.track(
                        item, self.graph.call_function(operator.getitem, (node, i))
                    )
        return out

    def _lift_constant(self, value: object) -> object:
        """A real tensor made inside the graph (``torch.tensor(...)``) is a constant."""
        if not isinstance(value, torch.Tensor) or value.device.type == "meta":
            return value
        if id(value) in self._nodes:
            return value
        name = f"_tensor_constant{len(self.constants)}"
        self.constants[name] = value
        meta = _meta_like(value)
        self.track(meta, self.graph.get_attr(name))
        return meta


def _meta_like(t: torch.Tensor) -> torch.Tensor:
    meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    return meta.requires_grad_(t.requires_grad) if t.is_floating_point() else meta


class _LocatingInterpreter(torch.fx.Interpreter):
    """Runs the torch-level graph, telling the recorder which user line is running."""

    def __init__(self, gm: torch.fx.GraphModule, recorder: _AtenRecorder) -> None:
        super().__init__(gm)
        self.recorder = recorder

    def run_node(self, n: torch.fx.Node) -> Any:
        self.recorder.user_loc = n.meta.get("user_loc")
        return super().run_node(n)


def trace_to_aten(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[object],
    decompositions: Decompositions | None = None,
) -> torch.fx.GraphModule:
    """A GraphModule of aten op overloads computing what ``gm`` computes.

    Inputs are the same flat list as ``gm``'s; the result returns a flat tuple. Ops
    in ``decompositions`` are replaced by what their rule calls.
    """
    recorder = _AtenRecorder(decompositions or {})
    meta_inputs = []
    for i, value in enumerate(example_inputs):
        if isinstance(value, torch.Tensor):
            meta = _meta_like(value)
            recorder.track(meta, recorder.graph.placeholder(f"arg{i}"))
            meta_inputs.append(meta)
        else:
            recorder.graph.placeholder(f"arg{i}")
            meta_inputs.append(value)
    with recorder:
        outputs = _LocatingInterpreter(gm, recorder).run(*meta_inputs)
    flat = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    recorder.graph.output(tuple(recorder.node_of(o) for o in flat))
    root = torch.nn.Module()
    for name, value in recorder.constants.items():
        root.register_buffer(name, value)
    aten_gm = torch.fx.GraphModule(root, recorder.graph, class_name="AtenGraph")
    log.debug("aten graph:\n%s", aten_gm.code)
    return aten_gm

"""A GraphModule as bytes and back, node for node, for the caches that store graphs.

Pickling a GraphModule stores its Python code and traces that code again on
load. That trace runs every call whose arguments are all constants and freezes
the result into a tensor attribute: a loaded ``torch.rand(4, 8)`` returned the
same numbers on every call, and a ``scalar_tensor(0.0)`` became a buffer that
kernels read. It also drops the nodes' and the graph's ``meta`` (the user's
lines that kernels name, codegen's in-place input updates). Here each node is
stored as it is, with its meta but for traced values.
"""

from __future__ import annotations

import importlib
import io
import pickle
import types
from dataclasses import dataclass

import torch
import torch.fx

FORMAT = 1
# Meta entries holding traced example values: not plain data, and recomputed by
# whoever needs them (specialize.py for codegen).
_TRACED_META = frozenset({"val", "tensor_meta", "example_value"})


@dataclass(frozen=True)
class _Ref:
    """A node read by another node, by name."""

    name: str


def _op(namespace: str, name: str, overload: str) -> object:
    return getattr(getattr(getattr(torch.ops, namespace), name), overload)


def _packet(namespace: str, name: str) -> object:
    return getattr(getattr(torch.ops, namespace), name)


def _higher_order(name: str) -> object:
    return getattr(torch.ops.higher_order, name)


def _named(module: str, name: str) -> object:
    return getattr(importlib.import_module(module), name)


def _by_module_name(obj: types.FunctionType) -> tuple | None:
    """A function its module names otherwise than its ``__qualname__`` says
    (``F.max_pool2d``, made inside ``boolean_dispatch``): by that name."""
    if "<locals>" not in obj.__qualname__:
        return None
    module = importlib.import_module(obj.__module__)
    if getattr(module, obj.__name__, None) is not obj:
        return None
    return _named, (obj.__module__, obj.__name__)


class _Pickler(pickle.Pickler):
    """Operators by name (their objects do not pickle); the rest as pickle does."""

    def reducer_override(self, obj: object) -> object:
        if isinstance(obj, torch._ops.OpOverload):
            packet = obj.overloadpacket
            return _op, (obj.namespace, packet.__name__, obj._overloadname)
        if isinstance(obj, torch._ops.OpOverloadPacket):
            namespace = obj._qualified_op_name.split("::")[0]
            return _packet, (namespace, obj.__name__)
        if isinstance(obj, torch._ops.HigherOrderOperator):
            return _higher_order, (obj.name(),)
        if isinstance(obj, types.FunctionType):
            return _by_module_name(obj) or NotImplemented
        return NotImplemented


def _dumps(value: object) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


def _plain_meta(meta: dict) -> dict:
    """The entries of ``meta`` that are plain data (each one that pickles)."""
    kept = {}
    for key, value in meta.items():
        if key in _TRACED_META:
            continue
        try:
            _dumps(value)
        except Exception:  # advisory data of some pass: not stored
            continue
        kept[key] = value
    return kept


def _attribute(gm: torch.fx.GraphModule, target: str) -> object:
    value = gm
    for atom in target.split("."):
        value = getattr(value, atom)
    if isinstance(value, torch.fx.GraphModule):  # a subgraph (cond's branches)
        return _Nested(graph_to_bytes(value))
    return value


@dataclass(frozen=True)
class _Nested:
    """A GraphModule held by the graph, stored the same way."""

    data: bytes


def graph_to_bytes(gm: torch.fx.GraphModule) -> bytes:
    """Bytes from which ``graph_from_bytes`` rebuilds ``gm``: the same nodes
    (names, targets, arguments, meta but traced values), the attributes its
    ``get_attr`` and ``call_module`` nodes name, the graph's meta and the class
    name. Raises whatever pickling raises for a target or constant that does
    not pickle (a lambda)."""
    nodes = []
    attributes = {}
    for node in gm.graph.nodes:
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), _to_ref)
        if node.op in ("get_attr", "call_module"):
            attributes[node.target] = _attribute(gm, node.target)
        nodes.append(
            (node.op, node.name, node.target, args, kwargs, _plain_meta(node.meta))
        )
    state = {
        "format": FORMAT,
        "class": type(gm).__name__,
        "nodes": nodes,
        "attributes": attributes,
        "meta": _plain_meta(gm.meta),
    }
    return _dumps(state)


def _to_ref(node: torch.fx.Node) -> _Ref:
    return _Ref(node.name)


def graph_from_bytes(data: bytes) -> torch.fx.GraphModule:
    """The GraphModule ``graph_to_bytes`` stored. It unpickles: only read what
    the cache trusts (docs/security.md)."""
    state = pickle.loads(data)
    if state.get("format") != FORMAT:
        raise ValueError(f"unsupported graph format {state.get('format')}")
    graph = torch.fx.Graph()
    made: dict[str, torch.fx.Node] = {}

    def node_of(value: object) -> object:
        return made[value.name] if isinstance(value, _Ref) else value

    for op, name, target, args, kwargs, meta in state["nodes"]:
        args, kwargs = torch.fx.node.map_aggregate((args, kwargs), node_of)
        node = graph.create_node(op, target, args, kwargs, name)
        node.meta.update(meta)
        made[name] = node
    attributes = {
        target: graph_from_bytes(value.data) if isinstance(value, _Nested) else value
        for target, value in state["attributes"].items()
    }
    gm = torch.fx.GraphModule(attributes, graph, class_name=state["class"])
    gm.meta.update(state["meta"])
    return gm

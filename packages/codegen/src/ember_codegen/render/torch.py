"""The generated Python wrapper that runs one aten graph.

Every aten node becomes one line calling the op through torch (the fallback node:
always correct), with named buffers, a comment naming the user's source line, and
``del`` of each buffer right after its last use so memory is freed as early as in
eager. Later lowerings replace runs of these lines with calls to generated kernels.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch
import torch.fx

from ..errors import CodegenError
from ..ir.nodes import Ref


@dataclass(frozen=True)
class WrapperSource:
    source: str
    constant_names: tuple[str, ...]  # get_attr targets the wrapper reads by name
    fallback_ops: tuple[str, ...]  # aten ops run through torch, sorted


def emit_wrapper(gm: torch.fx.GraphModule, title: str) -> WrapperSource:
    """Python source defining ``call(*inputs)`` for ``gm``'s graph."""
    names: dict[torch.fx.Node, str] = {}
    nodes = list(gm.graph.nodes)
    last_use: dict[torch.fx.Node, int] = {}
    for i, node in enumerate(nodes):
        for used in node.all_input_nodes:
            last_use[used] = i

    params, body, constants, ops = [], [], [], set()
    location = None
    for i, node in enumerate(nodes):
        if node.op == "placeholder":
            names[node] = node.name
            params.append(node.name)
            continue
        if node.op == "get_attr":
            names[node] = node.target
            constants.append(node.target)
            continue
        if node.op == "output":
            body.append(f"return {render_arg(tuple(node.args[0]), names)}")
            continue
        loc = node.meta.get("user_loc")
        if loc and loc != location:
            body.append(f"# {loc}")
            location = loc
        names[node] = f"buf{len(names) - len(params) - len(constants)}"
        body.append(f"{names[node]} = {_call(node, names, ops)}")
        # Constants are wrapper globals, never freed; everything else dies here.
        dead = [
            names[n]
            for n in node.all_input_nodes
            if last_use[n] == i and n.op != "get_attr"
        ]
        dead += [names[node]] if node not in last_use else []
        if dead:
            body.append(f"del {', '.join(dead)}")

    header = [
        f"# ember codegen: {title}",
        "# target 'torch': each aten op below runs through torch's own kernel",
        f"def call({', '.join(params)}):",
    ]
    source = "\n".join(header + ["    " + line for line in body]) + "\n"
    return WrapperSource(source, tuple(constants), tuple(sorted(ops)))


def _call(node: torch.fx.Node, names, ops: set[str]) -> str:
    if node.op != "call_function":
        raise CodegenError(f"unexpected {node.op} node {node.name} in an aten graph")
    target = node.target
    args = [render_arg(a, names) for a in node.args]
    args += [f"{k}={render_arg(v, names)}" for k, v in node.kwargs.items()]
    if target is operator.getitem:
        return f"{args[0]}[{args[1]}]"
    if not isinstance(target, torch._ops.OpOverload):
        raise CodegenError(f"node {node.name} calls {target!r}, not an aten op")
    ops.add(str(target))
    return f"{op_path(target)}({', '.join(args)})"


def op_path(op: torch._ops.OpOverload) -> str:
    """How generated Python names an op overload."""
    namespace, name = op._schema.name.split("::")
    prefix = "aten" if namespace == "aten" else f"torch.ops.{namespace}"
    return f"{prefix}.{name}.{op._overloadname}"


def render_arg(a: object, names: dict) -> str:
    """Python source for an op argument; graph values (fx nodes or IR ``Ref``s)
    are written as their names in ``names``."""
    if isinstance(a, torch.fx.Node):
        return names[a]
    if isinstance(a, Ref):
        return names[a.name]
    if isinstance(a, (list, tuple)):
        inner = ", ".join(render_arg(x, names) for x in a)
        return (
            f"[{inner}]"
            if isinstance(a, list)
            else f"({inner}{',' if len(a) == 1 else ''})"
        )
    if isinstance(a, float) and not math.isfinite(a):
        return f"float({str(a)!r})"
    if isinstance(a, (torch.dtype, torch.layout, torch.memory_format)):
        return str(a)
    if isinstance(a, torch.device):
        return f"torch.device({str(a)!r})"
    if a is None or isinstance(a, (bool, int, float, str, complex)):
        return repr(a)
    raise CodegenError(f"cannot write a {type(a).__name__} argument into source: {a!r}")

"""Bytes for what aot_compile returns, so another process rebuilds it without
tracing, partitioning or compiling again.

The layout (output specs, mutated inputs, tangents, gradients) is written as tagged
JSON; the compiled forward and backward are opaque blobs made by the caller's
``save`` callback and read back by its ``load``, because aotgrad does not know what
its compilers return. docs/aotgrad.md ("Serialization") has the format.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable

import torch
import torch.fx

from .errors import AotGradError
from .layout import (
    ConstantOutput,
    Dynamic,
    GraphLayout,
    GraphOutput,
    InputAlias,
    OutputSpec,
    ViewStep,
)
from .runtime_wrapper import BackwardPlan, CompiledAot

SaveCompiled = Callable[[Callable], bytes]  # a compiled graph -> bytes
LoadCompiled = Callable[[bytes], Callable]  # bytes -> the compiled graph again

_MAGIC = b"EMBERAOT"
_FORMAT = 1
_HEADER = struct.Struct("<8sHQ")  # magic, format, JSON length
_BLOB = struct.Struct("<Q")


def save_compiled_aot(compiled: CompiledAot, save: SaveCompiled) -> bytes:
    """Bytes from which ``load_compiled_aot`` rebuilds ``compiled``.

    ``save(callable)`` serializes one compiled graph: the forward and, with a
    backward, the backward, which is compiled now if it has not run yet (see
    ``BackwardPlan.compile_now``). Raises AotGradError when the layout holds a
    value this format cannot write (a non-tensor output of an unknown type).
    """
    header: dict = {
        "layout": _layout_to_json(compiled.layout),
        "backward": None,
        "dynamic": _dynamic_to_json(compiled.dynamic),
        "specialized": compiled.specialized,
    }
    blobs = [save(compiled.forward)]
    plan = compiled.backward_plan
    if plan is not None:
        blobs.append(save(plan.compile_now()))
        header["backward"] = {
            "num_saved": plan.num_saved,
            "tangent_outputs": list(plan.tangent_outputs),
            "grad_inputs": list(plan.grad_inputs),
            "num_inputs": plan.num_inputs,
            "device": str(plan.device),
        }
    text = json.dumps(header).encode()
    parts = [_HEADER.pack(_MAGIC, _FORMAT, len(text)), text]
    for blob in blobs:
        parts += [_BLOB.pack(len(blob)), blob]
    return b"".join(parts)


def load_compiled_aot(
    data: bytes, eager: torch.fx.GraphModule, load: LoadCompiled
) -> CompiledAot:
    """The CompiledAot that ``save_compiled_aot`` wrote, with ``eager`` (the
    torch-level graph it was compiled from) as its fallback and ``load`` rebuilding
    each compiled graph. Raises ValueError for bytes not in this format."""
    if len(data) < _HEADER.size:
        raise ValueError("not a compiled aotgrad graph: too short")
    magic, fmt, length = _HEADER.unpack_from(data)
    if magic != _MAGIC or fmt != _FORMAT:
        raise ValueError("not a compiled aotgrad graph of this format")
    offset = _HEADER.size + length
    header = json.loads(data[_HEADER.size : offset])
    blobs = []
    while offset + _BLOB.size <= len(data):
        (size,) = _BLOB.unpack_from(data, offset)
        offset += _BLOB.size
        blobs.append(data[offset : offset + size])
        offset += size
    if offset != len(data) or len(blobs) != 1 + (header["backward"] is not None):
        raise ValueError("truncated compiled aotgrad graph")
    plan = None
    if (bw := header["backward"]) is not None:
        plan = BackwardPlan(
            None,
            None,
            bw["num_saved"],
            tuple(bw["tangent_outputs"]),
            tuple(bw["grad_inputs"]),
            bw["num_inputs"],
            torch.device(bw["device"]),
            compiled=load(blobs[1]),
        )
    layout = _layout_from_json(header["layout"])
    return CompiledAot(
        layout,
        load(blobs[0]),
        eager,
        plan,
        dynamic=_dynamic_from_json(header.get("dynamic")),
        specialized=header.get("specialized"),
    )


def _dynamic_to_json(dynamic: Dynamic | None) -> dict | None:
    if dynamic is None:
        return None
    import sympy  # only graphs with symbolic sizes pay for it

    return {
        "symbols": {name: list(where) for name, where in dynamic.symbols.items()},
        "guards": [sympy.srepr(g) for g in dynamic.guards],
    }


def _dynamic_from_json(data: dict | None) -> Dynamic | None:
    """The guards are sympy's own printed form, read back by sympy (which
    evaluates it: entries are read only from a trusted cache, docs/security.md)."""
    if data is None:
        return None
    import sympy  # only graphs with symbolic sizes pay for it

    symbols = {name: (i, d) for name, (i, d) in data["symbols"].items()}
    return Dynamic(symbols, tuple(sympy.sympify(g) for g in data["guards"]))


def _layout_to_json(layout: GraphLayout) -> dict:
    return {
        "outputs": [_spec_to_json(s) for s in layout.outputs],
        "num_user_outputs": layout.num_user_outputs,
        "mutated_inputs": list(layout.mutated_inputs),
        "tangent_outputs": list(layout.tangent_outputs),
        "grad_inputs": list(layout.grad_inputs),
        "output_requires_grad": list(layout.output_requires_grad),
    }


def _layout_from_json(data: dict) -> GraphLayout:
    return GraphLayout(
        tuple(_spec_from_json(s) for s in data["outputs"]),
        data["num_user_outputs"],
        tuple(data["mutated_inputs"]),
        tuple(data["tangent_outputs"]),
        tuple(data["grad_inputs"]),
        tuple(data["output_requires_grad"]),
    )


def _spec_to_json(spec: OutputSpec) -> dict:
    if isinstance(spec, GraphOutput):
        return {"graph_output": spec.index}
    if isinstance(spec, InputAlias):
        chain = [
            {
                "op": _op_name(step.op),
                "args": _encode(step.args),
                "kwargs": _encode(step.kwargs),
                "index": step.index,
            }
            for step in spec.chain
        ]
        return {"input_alias": spec.input_index, "chain": chain}
    return {"constant": _encode(spec.value)}


def _spec_from_json(data: dict) -> OutputSpec:
    if "graph_output" in data:
        return GraphOutput(data["graph_output"])
    if "input_alias" in data:
        chain = tuple(
            ViewStep(
                _op_from_name(step["op"]),
                _decode(step["args"]),
                _decode(step["kwargs"]),
                step["index"],
            )
            for step in data["chain"]
        )
        return InputAlias(data["input_alias"], chain)
    return ConstantOutput(_decode(data["constant"]))


def _op_name(op: torch._ops.OpOverload) -> str:
    return f"{op.namespace}.{op._schema.name.split('::')[1]}.{op._overloadname}"


def _op_from_name(name: str) -> torch._ops.OpOverload:
    namespace, packet, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), packet), overload)


# Values that may appear in view-op arguments and in non-tensor outputs, by the
# JSON tag that marks them; JSON's own scalars (None, bool, int, float, str) are
# written as they are.
_TORCH_ENUMS = {
    "dtype": torch.dtype,
    "layout": torch.layout,
    "memory_format": torch.memory_format,
}


def _encode(value: object) -> object:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.Size):
        return {"size": list(value)}
    if isinstance(value, (tuple, list)):
        return {type(value).__name__: [_encode(v) for v in value]}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch._ops.OpOverload):
        return {"op": _op_name(value)}
    for tag, kind in _TORCH_ENUMS.items():
        if isinstance(value, kind):
            return {tag: str(value).removeprefix("torch.")}
    raise AotGradError(
        f"cannot serialize a {type(value).__name__} ({value!r}) in a compiled "
        "graph's output layout; the graph works but is not stored"
    )


def _decode(data: object) -> object:
    if not isinstance(data, dict):
        return data
    [(tag, value)] = data.items()
    if tag == "tuple":
        return tuple(_decode(v) for v in value)
    if tag == "list":
        return [_decode(v) for v in value]
    if tag == "size":
        return torch.Size(value)
    if tag == "device":
        return torch.device(value)
    if tag == "op":
        return _op_from_name(value)
    kind = _TORCH_ENUMS.get(tag)
    member = getattr(torch, value, None) if kind else None
    if not isinstance(member, kind or ()):
        raise ValueError(f"unknown value {data!r} in a compiled aotgrad graph")
    return member

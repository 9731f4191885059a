"""ember's aotgrad and codegen behind torch.compile: ``torch.compile(model,
backend="ember")`` runs torch's own capture and hands each graph it captured to
``torch_compile_backend``. Installing the ember package registers the name under
torch's ``torch_dynamo_backends`` entry point (package metadata): nothing here
imports torch's compiler stack, the graph arrives as an ordinary fx graph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ember_runtime import Counters

from .backends import BACKENDS, CompileLog
from .config import Config

# What the last graphs compiled through torch.compile did (graphs, fallback ops,
# generated code, cache results), for a caller that wants to look: one log for
# the process, as torch.compile has no per-function object to hang it on.
LOG = CompileLog()


def torch_compile_backend(
    gm: torch.fx.GraphModule,
    example_inputs: list,
    *,
    mode: str | None = None,
    options: dict[str, Any] | None = None,
) -> Callable:
    """Compiles one graph torch.compile captured, as the "ember" backend does for
    ember.compile: aotgrad (forward and backward), codegen, the disk cache.

    ``options`` are ember's (``Config`` fields, as in ``ember.compile``);
    ``mode`` is accepted and, as in ember.compile, changes nothing yet. A graph
    with symbolic sizes (torch.compile's dynamic shapes: SymInt inputs, tensors
    whose example sizes are SymInts) keeps them symbolic through aotgrad, and the
    compiled code checks its inputs against what it assumed, since torch's
    guards do not know ember's relations. Returns a callable taking the graph's
    inputs in order.
    """
    del mode
    inputs, dynamic_dims = _real_inputs(gm, example_inputs)
    config = Config.from_options(options)
    backend = BACKENDS["ember"](config, LOG, Counters())
    if dynamic_dims:
        gm.meta["dynamic_dims"] = dynamic_dims
        # torch's guards hold its own relations between sizes, not the ones
        # aotgrad may assume: the compiled graph checks its inputs itself.
        backend.guarded = False
    return backend(gm, inputs)


def _real_inputs(
    gm: torch.fx.GraphModule, example_inputs: list
) -> tuple[list, dict[int, tuple[int, ...]]]:
    """The example inputs with each SymInt replaced by the value it has in this
    call, and which inputs are symbolic: per tensor input the dims whose traced
    size is a SymInt, per SymInt input no dims (the input itself is a symbol)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    # A SymInt input is the size of some tensor input's dim: its real value is
    # that tensor's size there (torch names the symbol the same in both).
    sizes: dict[str, int] = {}
    dynamic: dict[int, tuple[int, ...]] = {}
    for i, (node, value) in enumerate(zip(placeholders, example_inputs, strict=True)):
        traced = node.meta.get("example_value")
        if isinstance(value, torch.Tensor) and isinstance(traced, torch.Tensor):
            dims = tuple(
                d
                for d, size in enumerate(traced.shape)
                if isinstance(size, torch.SymInt)
            )
            if dims:
                dynamic[i] = dims
            for d in dims:
                sizes.setdefault(str(traced.shape[d]), value.shape[d])
    inputs = list(example_inputs)
    for i, value in enumerate(example_inputs):
        if isinstance(value, torch.SymInt):
            inputs[i] = sizes[str(value)] if str(value) in sizes else _hint(value)
            dynamic[i] = ()
    return inputs, dynamic


def _hint(value: torch.SymInt) -> int:
    """The example value torch traced a SymInt input with (one that is no
    tensor input's size, e.g. an integer argument made dynamic)."""
    hint = getattr(value.node, "hint", None)
    if hint is None:
        raise NotImplementedError(
            f"ember: torch.compile passed the symbolic int {value} with no example "
            "value; compile with dynamic=False"
        )
    return int(hint)

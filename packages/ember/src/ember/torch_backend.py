"""ember's aotgrad and codegen as a backend of torch's own compiler: a user who
picks the backend named "ember" there keeps torch's capture, which hands each
graph it made to ``torch_compile_backend``. The name is registered by the
package's metadata (an entry point, docs/configuration.md): nothing here
imports torch's compiler, and each graph arrives as an ordinary fx graph.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from ember_runtime import Counters

from .backends import BACKENDS, CompileLog
from .config import Config
from .logs import warn_user

# What the graphs compiled for torch's compiler did (graphs, fallback ops,
# generated code, cache results, why sizes stayed fixed), for a caller that
# wants to look: one log for the process, as torch's compiler has no per-function
# object to hang it on. Each list keeps its last LOG_ENTRIES items, so a
# long-running process does not grow it without end.
LOG = CompileLog()
LOG_ENTRIES = 256

log = logging.getLogger("ember.dynamic")


def torch_compile_backend(
    gm: torch.fx.GraphModule,
    example_inputs: list,
    *,
    mode: str | None = None,
    options: dict[str, Any] | None = None,
) -> Callable:
    """Compiles one graph torch's compiler captured, as the "ember" backend does for
    ember.compile: aotgrad (forward and backward), codegen, the disk cache.

    ``options`` are ember's (``Config`` fields, as in ``ember.compile``;
    ``recompile_limit`` also bounds the per-size compiles below); ``mode`` is
    accepted and, as in ember.compile, changes nothing yet. A graph with
    symbolic sizes (torch's dynamic shapes: SymInt inputs, tensors whose
    example sizes are SymInts) keeps them symbolic through aotgrad, and the
    compiled code checks its inputs against what it assumed, since torch's
    guards do not know ember's relations. When aotgrad has to fix the sizes (an
    op without a shape rule), the graph is compiled once per set of sizes it
    is called with instead. Returns a callable taking the graph's inputs in
    order.
    """
    del mode
    config = Config.from_options(options)
    try:
        inputs, dynamic_dims = _real_inputs(gm, example_inputs)
    except _NoExample as e:
        warn_user(f"ember: a graph torch's compiler captured runs with torch: {e}")
        return gm
    backend = BACKENDS["ember"](config, LOG, Counters())
    if not dynamic_dims:
        compiled = backend(gm, inputs)
    else:
        gm.meta["dynamic_dims"] = dynamic_dims
        # torch's guards hold its own relations between sizes, not the ones
        # aotgrad may assume: the compiled graph checks its inputs itself.
        backend.guarded = False
        compiled = backend(gm, inputs)
        fixed = getattr(compiled, "specialized", None)
        if fixed is not None:
            reason = f"sizes stay fixed: {fixed}; one compile per set of sizes"
            LOG.dynamic_reasons.append(reason)
            log.info("%s", reason)
            static = torch.fx.GraphModule(gm, gm.graph)  # without dynamic_dims
            compiled = _PerSize(static, backend, config.recompile_limit)
    _trim(LOG)
    return compiled


class _PerSize:
    """``gm`` compiled for each set of input sizes it is called with (at most
    ``limit``; later sizes run it with torch), for a graph torch's compiler made
    symbolic but whose trace had to fix its sizes."""

    def __init__(self, gm: torch.fx.GraphModule, backend: Callable, limit: int):
        self.gm, self.backend, self.limit = gm, backend, limit
        self.compiled: dict[tuple, Callable] = {}

    def __call__(self, *args: object) -> object:
        key = tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args)
        run = self.compiled.get(key)
        if run is None:
            if len(self.compiled) >= self.limit:
                return self.gm(*args)
            run = self.compiled[key] = self.backend(self.gm, list(args))
            _trim(LOG)
        return run(*args)


def _trim(compile_log: CompileLog) -> None:
    for value in vars(compile_log).values():
        if isinstance(value, list) and len(value) > LOG_ENTRIES:
            del value[:-LOG_ENTRIES]


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


class _NoExample(Exception):
    """A SymInt input whose value torch did not record (a data-dependent one)."""


def _hint(value: torch.SymInt) -> int:
    """The example value torch traced a SymInt input with (one that is no
    tensor input's size, e.g. an integer argument made dynamic). It is read
    from the SymInt's node: the public surface has no other way to it short of
    torch's symbolic-shapes module, which ember does not import, and ``int()``
    would add a guard after torch has finished its own."""
    hint = getattr(value.node, "hint", None)
    if hint is None:
        raise _NoExample(f"the symbolic int {value} has no example value")
    return int(hint)

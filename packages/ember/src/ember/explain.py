"""``ember.explain``: what was captured, where it broke, what was left to torch;
``ember.profile``: where a compiled call's time goes, kernel by kernel."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch.fx

import ember_codegen

from .api import CompiledModule, compile
from .convert import BreakReason


@dataclass(frozen=True)
class ExplainOutput:
    """The answers to "how much was captured, and why not more"."""

    graphs: list[torch.fx.GraphModule]
    graph_count: int
    graph_break_count: int
    break_reasons: list[BreakReason]
    ops_per_graph: list[dict[str, int]]
    fallback_ops: list[str]  # aten ops codegen left to torch's own kernels
    generated_code: list[str]  # codegen's source, one per compiled graph
    eager_graph_reasons: list[str]  # why a captured graph runs with torch as it is
    # Per graph compiled inside a DDP forward: the pieces it was split into at
    # DDP's gradient buckets.
    bucket_pieces: list[int] = field(default_factory=list)
    # Which input dims became symbolic sizes and why (docs/dynamic.md).
    dynamic_reasons: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [
            f"graphs: {self.graph_count}, graph breaks: {self.graph_break_count}",
        ]
        lines += [f"  break: {r}" for r in self.break_reasons]
        for i, ops in enumerate(self.ops_per_graph):
            counts = ", ".join(f"{name} x{n}" for name, n in sorted(ops.items()))
            lines.append(f"  graph {i}: {sum(ops.values())} ops ({counts})")
        split = "  graph split at DDP's buckets into {} pieces"
        lines += [split.format(n) for n in self.bucket_pieces]
        lines += [f"  graph run by torch: {r}" for r in self.eager_graph_reasons]
        lines += [f"  dynamic: {r}" for r in self.dynamic_reasons]
        if self.fallback_ops:
            lines.append(f"  ops run by torch: {', '.join(self.fallback_ops)}")
        return "\n".join(lines)


def explain(
    fn: Callable, *, backend: Any = "ember", options: dict | None = None
) -> Callable[..., ExplainOutput]:
    """``explain(fn)(*args, **kwargs)`` compiles and runs ``fn`` once, fresh.

    Nothing is shared with other compiled versions of ``fn``; warnings that the
    compile would print are collected into the result instead.
    """

    def run(*args: Any, **kwargs: Any) -> ExplainOutput:
        compiled = compile(fn, backend=backend, options=options)
        target = (
            compiled._compiled_forward
            if isinstance(compiled, CompiledModule)
            else compiled
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled(*args, **kwargs)
        graphs = list(target.log.graphs)
        return ExplainOutput(
            graphs=graphs,
            graph_count=len(graphs),
            graph_break_count=len(target.breaks),
            break_reasons=list(target.breaks),
            ops_per_graph=[_op_counts(gm) for gm in graphs],
            fallback_ops=sorted(target.log.fallback_ops),
            generated_code=list(target.log.generated_code),
            eager_graph_reasons=list(target.log.eager_graph_reasons),
            bucket_pieces=list(target.log.bucket_pieces),
            dynamic_reasons=list(target.log.dynamic_reasons),
        )

    return run


def _op_counts(gm: torch.fx.GraphModule) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for node in gm.graph.nodes:
        if node.op == "call_method":
            counts[f"Tensor.{node.target}"] += 1
        elif node.op == "call_function":
            module = (getattr(node.target, "__module__", None) or "").lstrip("_")
            name = getattr(node.target, "__name__", str(node.target))
            counts[f"{module}.{name}" if module else name] += 1
    return dict(counts)


def profile(
    measure_bandwidth: bool = True,
) -> AbstractContextManager[ember_codegen.ProfileReport]:
    """``with ember.profile() as report:`` times every graph ember generated code
    for that runs in the block (forward and backward), kernel by kernel and
    library call by library call, on the real inputs; ``print(report)`` shows
    each row's time, share and bytes against this machine's copy bandwidth.
    Results are unchanged; each call adds a clock read per wrapper statement."""
    return ember_codegen.profiling(measure_bandwidth)

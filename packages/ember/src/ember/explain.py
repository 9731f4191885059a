"""``ember.explain``: the four questions a disappointing speed-up raises, answered
(how much ran in graphs, where and why it broke, what recompiled, compile cost
against steady state); ``ember.profile``: where a compiled call's time goes."""

from __future__ import annotations

import os
import sys
import time
import types
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch.fx
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

import ember_codegen
from ember_runtime import Dispatcher

from .api import CompiledFunction, CompiledModule, compile
from .backends import CompileLog, CompileRecord
from .convert import BreakReason, frame_key, function_name

_EMBER_PACKAGES = {
    "ember",
    "ember_capture",
    "ember_aotgrad",
    "ember_codegen",
    "ember_runtime",
}
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
# (where os.py lives: sysconfig would cost ``import ember`` a millisecond)
_STDLIB_DIR = os.path.dirname(os.__file__) + os.sep
# Frames of compiled code: ember's generated wrappers ("<ember generated ...>"),
# guard checks (compiled from a string), and fx graphs (torch.fx's generated
# forward, run as a graph or traced when a stored graph is loaded).
_EMBER_FILES = ("<ember generated", "<string>", "<eval_with_key>")


@dataclass(frozen=True)
class FrameOps:
    """Tensor ops of one Python function, in one call of the explained function:
    how many ran inside compiled graphs and how many ran as Python."""

    frame: str  # qualname (file:line)
    in_graphs: int
    in_python: int


@dataclass(frozen=True)
class ExplainOutput:
    """The answers to "how much was captured, why not more, what recompiled,
    and does the compile pay for itself"."""

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
    # (1) tensor ops per Python function, in graphs and as Python
    frames: list[FrameOps] = field(default_factory=list)
    # (3) each recompile, ``function: the guard that failed``
    recompiles: list[str] = field(default_factory=list)
    # (4) each compile of this run; seconds per call compiled and eager
    compiles: list[CompileRecord] = field(default_factory=list)
    compiled_seconds: float | None = None
    eager_seconds: float | None = None
    # An already compiled function or module: its compiles and recompiles so far.
    history: list[str] = field(default_factory=list)

    @property
    def ops_in_graphs(self) -> int:
        return sum(f.in_graphs for f in self.frames)

    @property
    def ops_in_python(self) -> int:
        return sum(f.in_python for f in self.frames)

    @property
    def compile_seconds(self) -> float:
        return sum(r.total for r in self.compiles)

    def stage_seconds(self) -> dict[str, float]:
        """Seconds per compile stage, over this run's compiles."""
        total: Counter[str] = Counter()
        for record in self.compiles:
            total.update(record.stages())
        return dict(total)

    def calls_to_repay(self) -> float | None:
        """Calls after which the compile has paid for itself, or None when a
        compiled call is not faster (or was not measured)."""
        if self.compiled_seconds is None or self.eager_seconds is None:
            return None
        saved = self.eager_seconds - self.compiled_seconds
        return self.compile_seconds / saved if saved > 0 else None

    def __str__(self) -> str:
        return "\n".join(
            [*self._captured(), *self._breaks(), *self._recompiles(), *self._cost()]
        )

    def _captured(self) -> list[str]:
        total = self.ops_in_graphs + self.ops_in_python
        share = f" ({100 * self.ops_in_graphs / total:.0f}%)" if total else ""
        lines = [
            f"1. Captured: {self.ops_in_graphs} of {total} tensor ops ran in "
            f"{self.graph_count} graph(s){share}, {self.ops_in_python} as Python"
        ]
        shown = sorted(self.frames, key=lambda f: -(f.in_graphs + f.in_python))
        for f in shown[:12]:
            lines.append(
                f"   {f.frame}: {f.in_graphs} in graphs, {f.in_python} as Python"
            )
        if len(shown) > 12:
            lines.append(f"   ... and {len(shown) - 12} more functions")
        for i, ops in enumerate(self.ops_per_graph):
            counts = ", ".join(f"{name} x{n}" for name, n in sorted(ops.items()))
            lines.append(f"   graph {i}: {sum(ops.values())} ops ({counts})")
        split = "   graph split at DDP's buckets into {} pieces"
        lines += [split.format(n) for n in self.bucket_pieces]
        lines += [f"   graph run by torch: {r}" for r in self.eager_graph_reasons]
        if self.fallback_ops:
            lines.append(f"   ops run by torch: {', '.join(self.fallback_ops)}")
        return lines

    def _breaks(self) -> list[str]:
        lines = [f"2. Graph breaks: {self.graph_break_count}"]
        places: dict[str, list[str]] = {}
        for b in self.break_reasons:
            places.setdefault(b.reason, []).append(b.location)
        for reason, where in places.items():
            at = where[0] if len(where) == 1 else f"{len(where)} places: "
            lines.append(
                f"   {reason}, at {at}{', '.join(where) if len(where) > 1 else ''}"
            )
        return lines

    def _recompiles(self) -> list[str]:
        lines = [f"3. Recompiles: {len(self.recompiles)}"]
        lines += [f"   {r}" for r in self.recompiles]
        lines += [f"   dynamic: {r}" for r in self.dynamic_reasons]
        if self.history:
            lines.append("   before this run:")
            lines += [f"     {h}" for h in self.history]
        return lines

    def _cost(self) -> list[str]:
        stages = ", ".join(f"{k} {t:.2f}" for k, t in self.stage_seconds().items())
        lines = [
            f"4. Compile time: {self.compile_seconds:.2f} s in "
            f"{len(self.compiles)} compile(s) ({stages})"
        ]
        if self.compiled_seconds is not None and self.eager_seconds is not None:
            lines.append(
                f"   steady state: {_us(self.compiled_seconds)} per call compiled, "
                f"{_us(self.eager_seconds)} eager "
                f"({self.eager_seconds / self.compiled_seconds:.2f}x)"
            )
            repay = self.calls_to_repay()
            lines.append(
                f"   the compile pays for itself after {repay:,.0f} calls"
                if repay is not None
                else "   a compiled call is not faster: the compile does not pay off"
            )
        return lines


def explain(
    fn: Callable,
    *,
    backend: Any = "ember",
    options: dict | None = None,
    repeat: int = 10,
) -> Callable[..., ExplainOutput]:
    """``explain(fn)(*args, **kwargs)`` compiles and runs ``fn`` once, fresh,
    and answers the four questions (print the result to read them).

    Nothing is shared with other compiled versions of ``fn``; the warnings
    compiling and running would print are silenced (the result holds their
    reasons: breaks, graphs run by torch). Then it runs
    the compiled and the plain function ``repeat`` more times each on the same
    inputs, for the steady-state times (``repeat=0`` skips that, for a function
    whose side effects must not repeat, such as an optimizer step). Of a
    function or module ember already compiled, it also reports the compiles
    and recompiles it has had (``history``).
    """

    def run(*args: Any, **kwargs: Any) -> ExplainOutput:
        compiled = compile(fn, backend=backend, options=options)
        target = _compiled_function(compiled)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with counting_ops() as python:
                compiled(*args, **kwargs)
            compiled_seconds = _seconds(compiled, args, kwargs, repeat)
            eager_seconds = _seconds(compiled.original, args, kwargs, repeat)
        return from_log(
            target.log,
            target.breaks,
            python,
            compiled_seconds,
            eager_seconds,
            _history(fn),
        )

    return run


def from_log(
    log: CompileLog,
    breaks: list[BreakReason],
    python: Counter[str] | None = None,
    compiled_seconds: float | None = None,
    eager_seconds: float | None = None,
    history: list[str] | None = None,
    others: bool = True,
) -> ExplainOutput:
    """The answers from what a compiled function's log recorded; ``python``:
    the torch calls each function made as Python (``counting_ops``), of which
    only the compiled functions' count unless ``others``."""
    graphs = log.graph_modules()
    return ExplainOutput(
        graphs=graphs,
        graph_count=len(graphs),
        graph_break_count=len(breaks),
        break_reasons=list(breaks),
        ops_per_graph=[_op_counts(gm) for gm in graphs],
        fallback_ops=sorted(log.fallback_ops),
        generated_code=list(log.generated_code),
        eager_graph_reasons=list(log.eager_graph_reasons),
        bucket_pieces=list(log.bucket_pieces),
        dynamic_reasons=list(log.dynamic_reasons),
        frames=_frames(log, python or Counter(), others),
        recompiles=_recompiles(log),
        compiles=list(log.compiles),
        compiled_seconds=compiled_seconds,
        eager_seconds=eager_seconds,
        history=history or [],
    )


@contextmanager
def counting_ops() -> Iterator[Counter[str]]:
    """Counts, per Python function (``convert.frame_key``), the torch calls
    made as Python inside the block (not those of compiled graphs)."""
    with _OpCounter() as counter:
        yield counter.ops


def _compiled_function(compiled: CompiledFunction | CompiledModule) -> CompiledFunction:
    if isinstance(compiled, CompiledModule):
        return compiled._compiled_forward
    return compiled


def _recompiles(log: CompileLog) -> list[str]:
    return [
        f"{function_name(d.fn)}: {reason}"
        for d in log.dispatchers
        for reason in d.recompile_reasons
    ]


def _history(fn: Callable) -> list[str]:
    """What an already compiled function or module has been through."""
    if not isinstance(fn, (CompiledFunction, CompiledModule)):
        return []
    log = _compiled_function(fn).log
    compiles = sum(d.counters.compiles for d in log.dispatchers)
    return [f"{compiles} compile(s), {len(log.graphs)} graph(s)", *_recompiles(log)]


def _seconds(fn: Callable, args: tuple, kwargs: dict, repeat: int) -> float | None:
    """The median seconds of ``repeat`` calls (None for ``repeat=0``)."""
    if repeat <= 0:
        return None
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args, **kwargs)
        times.append(time.perf_counter() - start)
    import statistics  # (here: it imports fractions and decimal, 4 ms)

    return statistics.median(times)


def _frames(log: CompileLog, python: Counter[str], others: bool) -> list[FrameOps]:
    """Per Python function: the tensor ops of its graphs, and those it ran as
    Python (``python``, counted while the compiled code ran). ``others``: also
    the functions nobody compiled (called from compiled code as Python)."""
    in_graphs: Counter[str] = Counter()
    for frame, gm in zip(log.graph_frames, log.graph_modules()):
        in_graphs[frame] += _tensor_ops(gm)
    compiled = [
        frame_key(d.fn.__code__, d.fn.__module__, d.fn) for d in log.dispatchers
    ]
    names = dict.fromkeys([*compiled, *in_graphs, *(python if others else ())])
    return [
        FrameOps(name, in_graphs[name], python[name])
        for name in names
        if in_graphs[name] or python[name]
    ]


def _tensor_ops(gm: torch.fx.GraphModule) -> int:
    """The graph's calls that give tensors (not the size arithmetic and item
    access it also records)."""
    return sum(
        node.op in ("call_function", "call_method")
        and any(
            isinstance(v, torch.Tensor)
            for v in pytree.tree_leaves(node.meta.get("example_value"))
        )
        for node in gm.graph.nodes
    )


class _OpCounter(TorchFunctionMode):
    """Counts the torch function calls each Python function makes as Python
    (torch's and the standard library's frames are skipped, to the function
    that called into them). Calls made by ember's own code, which runs the
    compiled graphs and compiles them, are not counted."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        # ops that make tensors or read their values (not reads of .shape or
        # .dtype), as the graphs' ops are counted, and only inside a compiled
        # call
        made = getattr(func, "__name__", "") in _READS_VALUES or any(
            isinstance(v, torch.Tensor) for v in pytree.tree_leaves(result)
        )
        frame = _caller(sys._getframe(1)) if made else None
        if frame is not None and _inside_a_compiled_call(frame):
            self.ops[frame_key(frame.f_code, frame.f_globals.get("__name__"))] += 1
        return result


# Tensor methods that give the values as Python objects: a tensor op as Python.
_READS_VALUES = {"item", "tolist", "numpy", "__float__", "__int__", "__bool__"}

# The code that runs a compiled call (a dispatcher's entry or its fallback).
_DISPATCH_CODES = {Dispatcher.__call__.__code__, Dispatcher._miss.__code__}


def _inside_a_compiled_call(frame: types.FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code in _DISPATCH_CODES:
            return True
        frame = frame.f_back
    return False


def _caller(frame: types.FrameType | None) -> types.FrameType | None:
    """The first frame outside torch and the standard library; None when that
    is ember's own code."""
    while frame is not None and _passed_through(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None or frame.f_code.co_filename.startswith(_EMBER_FILES):
        return None
    module = frame.f_globals.get("__name__", "")
    if module.partition(".")[0] in _EMBER_PACKAGES and module != "ember.demo":
        return None
    return frame


def _passed_through(filename: str) -> bool:
    """torch's and the standard library's files: an op is counted for the
    code that called into them."""
    if filename.startswith(_TORCH_DIR):
        return True
    installed = "site-packages" in filename or "dist-packages" in filename
    return filename.startswith(_STDLIB_DIR) and not installed


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


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us"


def profile(
    measure_bandwidth: bool = True,
) -> AbstractContextManager[ember_codegen.ProfileReport]:
    """``with ember.profile() as report:`` times every graph ember generated code
    for that runs in the block (forward and backward), kernel by kernel and
    library call by library call, on the real inputs; ``print(report)`` shows
    each row's time, share and bytes against this machine's copy bandwidth.
    Results are unchanged; each call adds a clock read per wrapper statement."""
    return ember_codegen.profiling(measure_bandwidth)

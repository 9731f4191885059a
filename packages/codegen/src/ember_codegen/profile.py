"""Where a compiled graph's time goes: inside ``with profiling() as report``,
each CompiledGraph runs a copy of its wrapper timed statement by statement, and
the report gives, per graph, the time of each loop kernel and library call on
the real inputs, its share, and its bytes against this machine's copy speed."""

from __future__ import annotations

import ast
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from .profile_state import ACTIVE
from .render import KernelInfo

OVERHEAD = "wrapper"  # the row of everything else the wrapper does


@dataclass
class KernelTime:
    """One row: a loop kernel, a library call, an op through torch, or the
    wrapper's own statements (allocations, views, pointers, checks)."""

    kind: str  # "loop" | "extern" | "fallback" | "wrapper"
    name: str
    ops: tuple[str, ...]
    bytes: int  # read and written per call (0 when not known)
    seconds: float = 0.0  # summed over calls


@dataclass
class GraphProfile:
    """The accumulated times of one compiled graph across the profiled calls."""

    title: str
    rows: list[KernelTime]
    calls: int = 0
    seconds: float = 0.0  # whole calls, summed

    def table(self, bandwidth: float | None) -> str:
        """The rows as text; ``bandwidth`` (bytes/s) rates each row's bytes."""
        per_call = self.seconds / max(self.calls, 1)
        lines = [
            f"{self.title}: {per_call * 1e6:.1f} us per call over {self.calls} calls",
            f"  {'kind':8} {'name':12} {'us':>9} {'share':>6} {'bytes':>10} "
            f"{'GB/s':>7} {'of copy':>7}  ops",
        ]
        for row in self.rows:
            us = row.seconds / max(self.calls, 1) * 1e6
            share = row.seconds / self.seconds if self.seconds else 0.0
            rate, of_copy = "", ""
            if row.bytes and row.seconds:
                speed = row.bytes * self.calls / row.seconds
                rate = f"{speed / 1e9:.1f}"
                if bandwidth:
                    of_copy = f"{speed / bandwidth:.0%}"
            lines.append(
                f"  {row.kind:8} {row.name:12} {us:9.1f} {share:6.1%} "
                f"{row.bytes or '':>10} {rate:>7} {of_copy:>7}  {', '.join(row.ops)}"
            )
        return "\n".join(lines)


@dataclass
class ProfileReport:
    """What ``profiling()`` yields: one GraphProfile per compiled graph run in
    the block, in the order each first ran; ``bandwidth`` is this machine's
    measured copy speed in bytes/s (set when the block ends)."""

    graphs: list[GraphProfile] = field(default_factory=list)
    bandwidth: float | None = None
    _by_graph: dict[object, GraphProfile] = field(default_factory=dict, repr=False)

    def profile_of(
        self, key: object, title: str, rows: list[KernelTime]
    ) -> GraphProfile:
        if key not in self._by_graph:
            self._by_graph[key] = GraphProfile(title, rows)
            self.graphs.append(self._by_graph[key])
        return self._by_graph[key]

    def __str__(self) -> str:
        if self.bandwidth:
            head = f"copy bandwidth {self.bandwidth / 1e9:.1f} GB/s (read + write)"
        else:
            head = "copy bandwidth not measured"
        return "\n\n".join([head] + [g.table(self.bandwidth) for g in self.graphs])


@contextmanager
def profiling(measure_bandwidth: bool = True) -> Iterator[ProfileReport]:
    """Profile every CompiledGraph call made inside the block (forward and
    backward graphs alike). Each call runs as usual, its results unchanged;
    only a clock read is added around each statement of its wrapper."""
    report = ProfileReport()
    ACTIVE.append(report)
    try:
        yield report
    finally:
        ACTIVE.remove(report)
        if measure_bandwidth:
            report.bandwidth = copy_bandwidth()


_BANDWIDTH: list[float] = []


def copy_bandwidth() -> float:
    """Bytes per second that ``copy_`` moves (read plus write) between two
    32 MiB tensors, best of five: the speed a memory-bound kernel can reach
    here. Measured once per process."""
    if not _BANDWIDTH:
        src = torch.ones(8 << 20)
        dst = torch.empty_like(src)
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            dst.copy_(src)
            best = min(best, time.perf_counter() - start)
        _BANDWIDTH.append(2 * src.nbytes / best)
    return _BANDWIDTH[0]


@dataclass(frozen=True)
class Instrumented:
    """A wrapper rewritten to time its statements: ``source`` defines
    ``call(___clock, ___add, *inputs)``; ``rows`` are what ``___add(i, dt)``
    adds to (the last row is the wrapper's own statements)."""

    source: str
    rows: tuple[KernelTime, ...]


def instrument(wrapper_source: str, kernels: tuple[KernelInfo, ...]) -> Instrumented:
    """Times each top-level statement of ``call`` in ``wrapper_source``: one
    that calls a loop kernel counts for that kernel; one that calls an op
    through ``aten``/``torch`` for the next library call or fallback op in
    ``kernels``, in call order (a row of its own in a wrapper without kernels,
    the "torch" target's); any other for the wrapper row, which comes last."""
    tree = ast.parse(wrapper_source)
    (call,) = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    loops = {k.name: i for i, k in enumerate(kernels) if k.kind == "loop"}
    others = iter([i for i, k in enumerate(kernels) if k.kind != "loop"])
    rows = [KernelTime(k.kind, k.name, k.ops, k.bytes) for k in kernels]
    timed: list[tuple[ast.stmt, int | None]] = []
    for statement in call.body:
        row = None  # the wrapper's
        calls = [n for n in ast.walk(statement) if isinstance(n, ast.Call)]
        loop = [loops[name] for name in _launched(statement) if name in loops]
        op = [c.func for c in calls if _root_name(c.func) in ("aten", "torch")]
        if loop:
            row = loop[0]
        elif op:
            row = next(others, None)
            if row is None:
                target = (
                    statement.targets[0] if isinstance(statement, ast.Assign) else None
                )
                name = ast.unparse(target) if target is not None else ""
                rows.append(KernelTime("torch", name, (ast.unparse(op[0]),), 0))
                row = len(rows) - 1
        timed.append((statement, row))
    rows.append(KernelTime(OVERHEAD, "", (), 0))
    body: list[ast.stmt] = []
    for statement, row in timed:
        if isinstance(statement, ast.Return):
            body.append(statement)
            continue
        body += [
            ast.parse("___t = ___clock()").body[0],
            statement,
            ast.parse(
                f"___add({len(rows) - 1 if row is None else row}, ___clock() - ___t)"
            ).body[0],
        ]
    call.body = body
    call.args.args[:0] = [ast.arg("___clock"), ast.arg("___add")]
    return Instrumented(ast.unparse(ast.fix_missing_locations(tree)), tuple(rows))


def _launched(statement: ast.stmt) -> list[str]:
    """The names a statement may launch as kernels: called ones (C++:
    ``kernel0(...)``), subscripted ones (Triton: ``kernel0[grid](...)``) and
    those handed to ``launch_checked`` (a Triton launcher: ``kernel0``)."""
    names = []
    for node in ast.walk(statement):
        if isinstance(node, ast.Call):
            names.append(_name(node.func))
            if _name(node.func) == "launch_checked" and node.args:
                names.append(_name(node.args[0]))
        elif isinstance(node, ast.Subscript):
            names.append(_name(node.value))
    return [name for name in names if name is not None]


def _name(expr: ast.expr) -> str | None:
    return expr.id if isinstance(expr, ast.Name) else None


def _root_name(expr: ast.expr) -> str | None:
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return _name(expr)

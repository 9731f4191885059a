"""The C++ emitter: one translation unit per graph, one ``extern "C"`` function
per fused kernel. Plain C++17 with no ATen headers; OpenMP on the outer loops;
inner loops written so the compiler vectorizes them without -ffast-math.
Expressions are written by ``expr.py``, reduction loops by ``reduce.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

import torch

from ...ir.indexing import Index, offset, render, substitute, unit_stride_dim, var
from ...ir.nodes import (
    C_TYPES,
    COSTLY_OPS,
    HALF_TYPES,
    Call,
    Const,
    Expr,
    Load,
    Pointwise,
    Reduction,
    Scan,
    Scatter,
    describe_origin,
    exprs,
    loads,
    map_expr,
    node_loads,
    walk,
)
from ...scheduling.fusion import Kernel
from ...scheduling.memory import span
from ..repeats import canonical
from .build import KERNEL_BREAK
from .expr import (
    COMBINE,
    PREAMBLE,
    Body,
    Scope,
    calls,
    close_loops,
    identity,
    ivar,
    numel,
    open_loops,
    store_code,
    value_type,
)
from .reduce import column_reductions, next_rows, reductions

# Kernels with less work than this many elements run on one thread: waking the
# OpenMP team costs more than it saves.
PARALLEL_MIN_WORK = 32768


def checks_indices(kernel: Kernel) -> bool:
    """Whether the kernel reads through index tensors, so it returns 1 when an
    index is out of range (and 0 otherwise) instead of returning nothing."""
    return any(calls(e, "index_check") for stage in kernel.stages for e in exprs(stage))


def emit_kernel(
    kernel: Kernel,
    strides: dict[str, tuple[int, ...]],
    comment: str,
    varying: bool = False,
) -> str:
    """The C++ function for one kernel (``varying``: see ``emit_source``)."""
    params = [
        f"const {C_TYPES[_dtype_of(kernel, name)]}* __restrict__ {name}"
        for name in kernel.reads
        if name not in kernel.stored  # (an input updated in place: one pointer)
    ]
    params += [
        f"{C_TYPES[s.dtype]}* __restrict__ {s.name}"
        for s in kernel.stages
        if s.name in kernel.stored
    ]
    checked = checks_indices(kernel)
    lines = [
        f"// {kernel.name}: {comment}",
        f'extern "C" {"int" if checked else "void"} {kernel.name}'
        f"({', '.join(params)}) {{",
    ]
    if checked:
        lines.append("  int ember_oob = 0;")
    outer = kernel.outer
    work = sum(_work(s) for s in kernel.stages)
    parallel = work >= PARALLEL_MIN_WORK
    scope = Scope({}, strides, varying=varying)
    team = _team(scope, work)
    stages = _store_once(kernel, scope)
    columns = None if checked else column_reductions(kernel, scope, "  ", team)
    if columns is not None:
        return "\n".join([*lines, *columns, "}"])
    indent = "  "
    inner = None if checked else _inner_dim(kernel, scope)
    if inner is not None:
        return "\n".join([*lines, *_reordered(kernel, scope, inner, team), "}"])
    if outer and team is not None and numel(outer) > 1:
        collapse = f" collapse({len(outer)})" if len(outer) > 1 else ""
        lines.append(f"{indent}#pragma omp parallel for{collapse}{team}")
    for d, size in enumerate(outer):
        lines.append(f"{indent}for (int64_t i{d} = 0; i{d} < {size}; ++i{d}) {{")
        indent += "  "
    loops = 0
    prefetch: tuple[Load, ...] = ()
    while stages:
        stage = stages.pop(0)
        loops += 1
        if isinstance(stage, Scatter):
            lines += _scatter(stage, scope, indent, parallel)
            continue
        if isinstance(stage, Scan):
            lines += _scan(stage, scope, indent, team)
            continue
        # Without outer loops each stage is its own loop: a small one (an
        # optimizer's update of one bias, beside bigger ones) runs on this thread.
        own_team = None if outer else _team(scope, _work(stage))
        if isinstance(stage, Pointwise):
            lines += _pointwise(stage, kernel, scope, indent, own_team)
            continue
        group = [stage]
        while (
            stages
            and isinstance(stages[0], Reduction)
            and stages[0].reduce_sizes == stage.reduce_sizes
            and not any(
                ld.name in {g.name for g in group} for ld in loads(stages[0].expr)
            )
        ):
            group.append(stages.pop(0))
        if loops == 1:
            prefetch = next_rows(group, kernel, stages)
        lines += reductions(
            group,
            kernel,
            scope,
            indent,
            threads=parallel
            and not outer
            and sum(map(_work, group)) >= PARALLEL_MIN_WORK,
            prefetch=prefetch if loops == 2 else (),
        )
    for _ in outer:
        indent = indent[:-2]
        lines.append(f"{indent}}}")
    if checked:
        lines.append("  return ember_oob;")
    lines.append("}")
    return "\n".join(lines)


def _inner_dim(kernel: Kernel, scope: Scope) -> int | None:
    """The dim to run innermost in a kernel of pointwise stages over one set of
    sizes, when it is not the last: the one along which the most loads and
    stores step by exactly one element (they vectorize), where that beats the
    last dim. A transposed copy (``k.transpose(-2, -1) * scale``, stored with
    the input's strides) then reads and writes contiguously instead of both
    with a stride. Ties keep the last dim; size-1 dims never win."""
    stages = kernel.stages
    if not stages or not all(isinstance(s, Pointwise) for s in stages):
        return None
    sizes = stages[0].sizes
    if len(sizes) < 2 or len(kernel.outer) != len(sizes) - 1:
        return None
    if any(s.sizes != sizes or s.name not in scope.strides for s in stages):
        return None
    # A stage reading an earlier one elsewhere than at its own element relies
    # on the earlier stage's whole inner loop having run first.
    here = [f"i{d}" for d in range(len(sizes))]
    names = {s.name for s in stages}
    for ld in (ld for s in stages for ld in loads(s.expr) if ld.name in names):
        if [render(ix) for ix in ld.index] != here:
            return None
    flats = [
        offset(tuple(ivar(d) for d in range(len(sizes))), scope.strides[s.name])
        for s in stages
    ]
    flats += [
        offset(ld.index, scope.strides[ld.name])
        for s in stages
        for ld in loads(s.expr)
        if ld.name in scope.strides
    ]

    best = unit_stride_dim(flats, sizes)
    if best == len(sizes) - 1:
        return None
    # Other dims of size 1 only: the logical order keeps the loop on the team.
    if numel([n for d, n in enumerate(sizes) if d != best]) == 1:
        return None
    return best


def _reordered(kernel: Kernel, scope: Scope, inner: int, team: str | None) -> list[str]:
    """The loops of ``_inner_dim``'s kernel with dim ``inner`` innermost: the
    other dims outside (on the OpenMP team), then each stage's loop."""
    sizes = kernel.stages[0].sizes
    others = [d for d in range(len(sizes)) if d != inner]
    indent, lines = "  ", []
    if team is not None and numel([sizes[d] for d in others]) > 1:
        collapse = f" collapse({len(others)})" if len(others) > 1 else ""
        lines.append(f"{indent}#pragma omp parallel for{collapse}{team}")
    for d in others:
        lines.append(f"{indent}for (int64_t i{d} = 0; i{d} < {sizes[d]}; ++i{d}) {{")
        indent += "  "
    for stage in kernel.stages:
        lines.append(f"{indent}{{  // {stage.name} = {describe_origin(stage.origin)}")
        lines += _store_loop(
            stage.name, sizes, len(sizes), stage.expr, scope, indent, None, (inner,)
        )
        lines.append(f"{indent}}}")
    close_loops(len(others), indent, lines)
    return lines


def _work(stage) -> int:
    """Elements a stage visits: its outputs, times the reduced ones."""
    return numel(stage.sizes) * numel(getattr(stage, "reduce_sizes", ()))


# A loop put on the team only when its work is large enough (``_team``).
_TEAM_IF = re.compile(r"^( *)(#pragma omp parallel for.*) if\((\d+) >= (\d+)\)$")


def _both_ways(kernel: str) -> str:
    """``kernel`` with each loop whose pragma says ``if(work >= least)`` written
    twice, on the team when the work is large enough and on this thread
    otherwise: the clause alone still forms a team of one at each call of a
    small loop. The work is a literal that literals.py lifts."""
    lines, out, i = kernel.split("\n"), [], 0
    while i < len(lines):
        match = _TEAM_IF.match(lines[i])
        if match is None:
            out.append(lines[i])
            i += 1
            continue
        indent, pragma, work, least = match.groups()
        end = lines.index(indent + "}", i + 2)  # where the pragma's loop closes
        loop = ["  " + line for line in lines[i + 1 : end + 1]]
        out += [f"{indent}if ({work} >= {least}) {{", f"{indent}  {pragma}", *loop]
        out += [f"{indent}}} else {{", *loop, f"{indent}}}"]
        i = end + 1
    return "\n".join(out)


def _team(scope: Scope, work: int) -> str | None:
    """How a loop over ``work`` elements runs: on the OpenMP team ("" to
    append to its pragma) or on this thread (None). With varying sizes the
    pragma is always written and its ``if`` decides at run time, so that every
    size writes the same loops (literals.py lifts the work)."""
    if scope.varying:
        return f" if({work} >= {PARALLEL_MIN_WORK})"
    return "" if work >= PARALLEL_MIN_WORK else None


def _dtype_of(kernel: Kernel, name: str) -> torch.dtype:
    for stage in kernel.stages:
        for ld in node_loads(stage):
            if ld.name == name:
                return ld.dtype
    raise KeyError(name)


def _store_once(kernel: Kernel, scope: Scope) -> list[Pointwise | Reduction]:
    """The kernel's stages, where a later pointwise stage recomputes a costly
    per-element value of a reduction (over the stage's own inner range) reading
    it back from its own buffer instead; ``scope.spills`` says where the
    reduction stores it. The stage overwrites each element after reading it.
    Not where the stage itself, a stage in between, or the reduction or one
    before it (reductions may share its loop) elsewhere than at the element it
    stores, reads that buffer (one written into the memory it reads last:
    ``memory.takes``, an input updated in place): the spilled value would
    overwrite what they read."""
    stages = list(kernel.stages)
    n_outer = len(kernel.outer)
    for pos, red in enumerate(stages):
        if not isinstance(red, Reduction) or not red.reduce_sizes:
            continue
        rename = {
            f"r{d}": var(f"i{n_outer + d}", size)
            for d, size in enumerate(red.reduce_sizes)
        }
        for later, stage in enumerate(stages[pos + 1 :], pos + 1):
            if (
                not isinstance(stage, Pointwise)
                or stage.name not in kernel.stored
                or tuple(stage.sizes[n_outer:]) != red.reduce_sizes
                or stage.dtype in HALF_TYPES  # its buffer would round the value
            ):
                continue
            spilled_at = tuple(
                var(f"i{d}", size) for d, size in enumerate(kernel.outer)
            ) + tuple(var(f"r{d}", size) for d, size in enumerate(red.reduce_sizes))
            if any(
                ld.name == stage.name and (j > pos or ld.index != spilled_at)
                for j in range(later)
                for ld in node_loads(stages[j])
            ):
                continue
            for value in _costly(red.expr):
                seen = _substitute(value, rename)
                if seen == value or seen.dtype != stage.dtype:
                    continue  # the same for every element, or another dtype
                if not _contains(stage.expr, seen):
                    continue
                rest = _replace_expr(stage.expr, seen, Const(0, stage.dtype))
                if any(ld.name == stage.name for ld in loads(rest)):
                    continue  # it reads its own buffer besides the spilled value
                here = tuple(ivar(d) for d in range(len(stage.sizes)))
                back = Load(stage.name, here, stage.dtype)
                stages[later] = stage = replace(
                    stage, expr=_replace_expr(stage.expr, seen, back)
                )
                rvars = tuple(var(f"r{d}", 2**62) for d in range(len(rename)))
                at = offset(here[:n_outer] + rvars, scope.strides[stage.name])
                scope.spills.setdefault(red.name, []).append(
                    (value, f"{stage.name}[{render(at)}]")
                )
                break
    return stages


def _costly(e: Expr) -> list[Call]:
    """Calls to COSTLY_OPS in ``e``, outermost first: a value a reduction
    computes per element with one is stored once (in the buffer of the
    pointwise stage that needs it again) and read back, instead of being
    computed a second time (softmax's exp(x - max))."""
    return [x for x in walk(e) if isinstance(x, Call) and x.op in COSTLY_OPS]


def _substitute(e: Expr, mapping: dict[str, Index]) -> Expr:
    return map_expr(e, index=lambda i: substitute(i, mapping))


def _contains(e: Expr, part: Expr) -> bool:
    return any(x == part for x in walk(e))


def _replace_expr(e: Expr, old: Expr, new: Expr) -> Expr:
    return map_expr(e, lambda x: new if x == old else x)


def _pointwise(
    stage: Pointwise, kernel: Kernel, scope: Scope, indent: str, team: str | None
) -> list[str]:
    lines = [f"{indent}{{  // {stage.name} = {describe_origin(stage.origin)}"]
    lines += _store_loop(
        stage.name, stage.sizes, len(kernel.outer), stage.expr, scope, indent, team
    )
    lines.append(f"{indent}}}")
    return lines


def _store_loop(
    name: str,
    sizes: tuple[int, ...],
    first: int,
    expr: Expr,
    scope: Scope,
    indent: str,
    team: str | None,
    dims: tuple[int, ...] = (),
) -> list[str]:
    """Loops over ``sizes[first:]`` and then over ``dims`` (the other loops are
    open) storing ``expr`` into ``name``; ``team`` (see ``_team``) puts the
    first loop on the OpenMP team."""
    indent += "  "
    lines = []
    inner = sizes[first:]
    if team is not None and (inner or dims):
        lines.append(f"{indent}#pragma omp parallel for{team}")
    body_indent = open_loops(inner, first, "i", indent, lines)
    for d in dims:
        v = f"i{d}"
        lines.append(f"{body_indent}for (int64_t {v} = 0; {v} < {sizes[d]}; ++{v}) {{")
        body_indent += "  "
    body = Body(scope, body_indent)
    value = body.value(expr)
    lines += body.lines
    idx = tuple(ivar(d) for d in range(len(sizes)))
    at = render(offset(idx, scope.strides[name]))
    if expr.dtype in HALF_TYPES:
        value = store_code(expr.dtype, value)
    lines.append(f"{body_indent}{name}[{at}] = {value};")
    close_loops(len(inner) + len(dims), body_indent, lines)
    return lines


def _scan(stage: Scan, scope: Scope, indent: str, team: str | None) -> list[str]:
    """Loops over every dim but the scanned one (in parallel), then along it in
    order, the running fold kept in ``acc_dtype`` and stored at each step."""
    sizes, dim = stage.sizes, stage.dim
    others = [d for d in range(len(sizes)) if d != dim]
    lines = [
        f"{indent}// {stage.name} = cum{stage.kind.value} of "
        f"{describe_origin(stage.origin)}"
    ]
    if team is not None and numel([sizes[d] for d in others]) > 1:
        collapse = f"collapse({len(others)})"
        lines.append(f"{indent}#pragma omp parallel for {collapse}{team}")
    for d in others:
        lines.append(f"{indent}for (int64_t i{d} = 0; i{d} < {sizes[d]}; ++i{d}) {{")
        indent += "  "
    acc = f"{stage.name}_acc"
    lines.append(
        f"{indent}{value_type(stage.acc_dtype)} {acc} = "
        f"{identity(stage.kind, stage.acc_dtype)};"
    )
    lines.append(
        f"{indent}for (int64_t i{dim} = 0; i{dim} < {sizes[dim]}; ++i{dim}) {{"
    )
    body = Body(scope, indent + "  ")
    value = body.value(stage.expr)
    lines += body.lines
    lines.append(f"{indent}  {acc} = {COMBINE[stage.kind].format(acc, value)};")
    at = render(
        offset(tuple(ivar(d) for d in range(len(sizes))), scope.strides[stage.name])
    )
    lines.append(f"{indent}  {stage.name}[{at}] = {store_code(stage.dtype, acc)};")
    lines.append(f"{indent}}}")
    close_loops(len(others), indent, lines)
    return lines


def _scatter(stage: Scatter, scope: Scope, indent: str, parallel: bool) -> list[str]:
    """A scatter kernel: the output starts as ``init`` (in parallel), then a
    loop over the source writes each value in order, so duplicates combine (or
    overwrite) exactly as torch's serial loop does. When a source dim alone
    indexes an output dim, that dim is split across threads: each output
    element still gets its updates from one thread, in the same order."""
    name, t = stage.name, value_type(stage.dtype)
    kind = f"scatter_{stage.kind.value}" if stage.kind else "scatter"
    lines = [f"{indent}{{  // {name} = {kind} of {describe_origin(stage.origin)}"]
    inner = indent + "  "
    init_team = "" if parallel else None
    lines += _store_loop(name, stage.sizes, 0, stage.init, scope, indent, init_team)
    extent = span(stage.sizes, scope.strides[name])
    if stage.mean:
        lines.append(f"{inner}int64_t* {name}_count = new int64_t[{extent}]();")
    split = _free_dim(stage) if numel(stage.src_sizes) >= PARALLEL_MIN_WORK else None

    def source_loop(write: Callable[[str, str], list[str]], value: bool) -> None:
        body_indent, block = _source_loops(stage.src_sizes, split, inner, lines)
        body = Body(scope, body_indent, _LOCAL_CHECK)
        v = body.value(stage.value) if value else ""
        at = render(
            offset(stage.target, scope.strides[name]), lambda i: body.value(i.value)
        )
        lines.extend(body.lines)
        lines.extend(f"{body_indent}{line}" for line in write(f"{name}[{at}]", v))
        if stage.mean and value:
            lines.append(f"{body_indent}{name}_count[{at}] += 1;")
        close_loops(len(stage.src_sizes), body_indent, lines)
        lines.append(
            f"{block}if (ember_bad) __atomic_store_n(&ember_oob, 1, __ATOMIC_RELAXED);"
        )
        lines.append(f"{block[:-2]}}}")

    if not stage.include_self:
        # Every targeted element starts from the identity, not from init.
        start = identity(stage.kind, stage.dtype)
        source_loop(lambda out, v: [f"{out} = {start};"], False)
    if stage.kind is None:
        source_loop(lambda out, v: [f"{out} = {v};"], True)
    else:
        combine = COMBINE[stage.kind]
        source_loop(lambda out, v: [f"{out} = {combine.format(out, v)};"], True)
    if stage.mean:
        # torch divides the sum by the number of values (self counted once).
        lines.append(f"{inner}for (int64_t o = 0; o < {extent}; ++o) {{")
        lines.append(
            f"{inner}  const int64_t n = {name}_count[o] + {int(stage.include_self)};"
        )
        lines.append(f"{inner}  if (n > 0) {name}[o] = {name}[o] / {t}(n);")
        lines.append(f"{inner}}}")
        lines.append(f"{inner}delete[] {name}_count;")
    lines.append(f"{indent}}}")
    return lines


def _free_dim(stage: Scatter) -> int | None:
    """The first or last source dim that is, alone, the index of some output
    dim (source positions differing in it never write the same element)."""
    n = len(stage.src_sizes)
    for k in dict.fromkeys((0, n - 1)) if n else ():
        size = stage.src_sizes[k]
        if size > 1 and var(f"r{k}", size) in stage.target:
            return k
    return None


# Index checks in scatter loops go to a flag of each thread's own, branch-free,
# so the loops vectorize; the flag is folded into the kernel's at the end.
_LOCAL_CHECK = {"index_check": "ember_check_index_into({0}, {1}, {2}, {3}, ember_bad)"}


def _source_loops(
    sizes: tuple[int, ...], split: int | None, indent: str, lines: list[str]
) -> tuple[str, str]:
    """Open a block with the thread's ``ember_bad`` flag and the loops over a
    scatter's source, dim ``split`` divided among the OpenMP team (the first
    dim: whole slices per thread; the last: a block of it per thread, kept
    innermost so reads stay contiguous). Returns the body's indent and the
    block's (for the lines after the loops)."""
    last = len(sizes) - 1
    if split is not None and split == last and last > 0:
        lines.append(f"{indent}#pragma omp parallel")
    lines.append(f"{indent}{{")
    block = indent + "  "
    lines.append(f"{block}int ember_bad = 0;")
    if split is None:
        return open_loops(sizes, 0, "r", block, lines), block
    if split == 0:
        lines.append(f"{block}#pragma omp parallel for reduction(|:ember_bad)")
        return open_loops(sizes, 0, "r", block, lines), block
    lines.append(
        f"{block}const int64_t ember_t = omp_get_thread_num(), "
        "ember_nt = omp_get_num_threads();"
    )
    size = sizes[last]
    lines.append(f"{block}const int64_t ember_lo = {size} * ember_t / ember_nt;")
    lines.append(f"{block}const int64_t ember_hi = {size} * (ember_t + 1) / ember_nt;")
    body = open_loops(sizes[:last], 0, "r", block, lines)
    r = f"r{last}"
    lines.append(f"{body}for (int64_t {r} = ember_lo; {r} < ember_hi; ++{r}) {{")
    return body + "  ", block


def emit_source(
    kernels: list[Kernel],
    strides: dict[str, tuple[int, ...]],
    title: str,
    varying: bool = False,
) -> str:
    """The translation unit for a graph's kernels. With ``varying`` (a graph
    compiled for many sizes) the loops' shape depends on the sizes as little
    as it can, so that sizes share a library (literals.py)."""
    parts = [f"// {title}", PREAMBLE]
    first: dict[str, str] = {}  # each distinct kernel's text, by its canonical form
    for kernel in kernels:
        parts.append(KERNEL_BREAK)
        text = emit_kernel(kernel, strides, describe_origin(kernel.origin), varying)
        if varying:  # (literals.py lifts each kernel's own literals)
            parts.append(_both_ways(text))
            continue
        names = {kernel.name, *kernel.reads, *(s.name for s in kernel.stages)}
        same = first.setdefault(canonical(text, names, "//"), text)
        parts.append(text if same is text else _forwarding(text, same))
    return "\n".join(parts) + "\n"


def _forwarding(text: str, same: str) -> str:
    """Kernel ``text`` written as a call of the kernel whose ``same`` text
    computes it on other buffers: the loops are compiled once, however many
    layers repeat them (a declaration first, as the build may put the two in
    different units)."""
    comment, signature = text.split("\n")[:2]
    target = same.split("\n")[1]
    name = re.search(r"(\w+)\(", target).group(1)
    params = signature[signature.index("(") + 1 : signature.rindex(")")]
    args = ", ".join(p.split()[-1] for p in params.split(", ")) if params else ""
    call = "return " if signature.startswith('extern "C" int') else ""
    return "\n".join(
        [
            comment,
            f"// the same loops as {name}, on these buffers",
            target.removesuffix(" {") + ";",
            f"{signature} {call}{name}({args}); }}",
        ]
    )

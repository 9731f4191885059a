"""C++ loops for reductions: lanes of partial accumulators (so the loop
vectorizes and hides the add's latency), a pairwise fold of the lanes in a
fixed order, full reductions split across the OpenMP team with per-thread
partials, prefetches of the next row while a row is in cache, and column
reductions (over dims outer in memory) with the lanes along the output instead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...ir.indexing import (
    Var,
    indirect_terms,
    offset,
    render,
    substitute,
    unit_stride_dim,
    var,
    var_step,
)
from ...ir.nodes import (
    HALF_TYPES,
    Load,
    Pointwise,
    Reduction,
    contiguous,
    describe_origin,
    loads,
)
from ...scheduling.fusion import Kernel
from .expr import (
    ARG_KINDS,
    ARG_TAKES,
    COMBINE,
    NO_POSITION,
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

# Reductions keep up to this many partial accumulators (four 512-bit vectors of
# float32): the loop vectorizes, and four independent chains hide the add's
# latency, which one vector of accumulators does not.
LANES = 64


# With sizes that vary (a graph compiled per set of sizes), a dim shorter than
# LANES takes this many lanes whatever its length, so that each length writes
# the same loops and their sizes share one library (literals.py).
VARYING_LANES = 16


def lanes_for(size: int, varying: bool = False) -> int:
    """Partial accumulators for a reduction whose last dim has ``size`` elements:
    ``LANES``, or the largest power of two not above a short dim (with
    ``varying`` sizes, ``VARYING_LANES`` for any short dim)."""
    if varying and size < LANES:
        return VARYING_LANES
    if size < 4:
        return 1
    return min(LANES, 1 << (max(size, 1).bit_length() - 1))


def reductions(
    group: list[Reduction],
    kernel: Kernel,
    scope: Scope,
    indent: str,
    threads: bool = False,
    prefetch: tuple[Load, ...] = (),
) -> list[str]:
    """One loop nest accumulating every reduction of ``group``; ``threads``
    splits it across the OpenMP team (a full reduction: no outer loops), with
    per-thread partials combined in thread order. ``prefetch`` are loads of
    the kernel's next outer iteration to start fetching in the block loop."""
    lines = [
        f"{indent}// {r.name} = {r.kind.value} of {describe_origin(r.origin)}"
        for r in group
    ]
    sizes = group[0].reduce_sizes
    last = sizes[-1] if sizes else 1
    lanes = lanes_for(last, scope.varying)
    if threads:
        lines += _split_reductions(group, scope, indent, lanes)
    else:
        lines += _declare_acc(group, indent, lanes)
        lines += _reduce_loops(group, scope, indent, lanes, prefetch=prefetch)
        lines += _tree_combine(group, indent, lanes)
    for red in group:
        local, t = f"{red.name}_val", value_type(red.dtype)
        # argmax and argmin return the position, not the value.
        result = _slot(red, f"{red.name}_acc", "0")[1 if red.kind in ARG_KINDS else 0]
        value = f"static_cast<{t}>({result})"
        if red.dtype in HALF_TYPES:
            # eager rounds a 16-bit reduction's result; a later stage reads that
            value = f"ember_round_{HALF_TYPES[red.dtype]}({value})"
        lines.append(f"{indent}const {t} {local} = {value};")
        scope.locals_[red.name] = local
        if red.name in kernel.stored:
            idx = tuple(ivar(d) for d in range(len(red.sizes)))
            value = store_code(red.dtype, local) if red.dtype in HALF_TYPES else local
            lines.append(
                f"{indent}{red.name}[{render(offset(idx, scope.strides[red.name]))}]"
                f" = {value};"
            )
    return lines


def next_rows(
    first: list[Reduction], kernel: Kernel, rest: list[Pointwise | Reduction]
) -> tuple[Load, ...]:
    """The first loop's unit-stride reads of kernel inputs, moved to the next
    outer iteration, when the second loop is a reduction over the same range.

    The first loop streams the row from memory; the second (softmax's exp, layer
    norm's centered squares) computes on the cached row, so fetching the next
    row there overlaps memory with work (measured: 1.25x on softmax rows).
    """
    if not kernel.outer or not rest or not isinstance(rest[0], Reduction):
        return ()
    sizes = first[0].reduce_sizes
    if not sizes or rest[0].reduce_sizes != sizes:
        return ()
    last_i = f"i{len(kernel.outer) - 1}"
    found: dict[Load, None] = {}
    for red in first:
        for ld in loads(red.expr):
            if ld.name not in kernel.reads or any(indirect_terms(i) for i in ld.index):
                continue
            step = {last_i: ivar(len(kernel.outer) - 1) + 1}
            moved = tuple(substitute(i, step) for i in ld.index)
            found[Load(ld.name, moved, ld.dtype)] = None
    return tuple(found)


def _declare_acc(group: list[Reduction], indent: str, lanes: int) -> list[str]:
    lines = []
    for r in group:
        lines += _declare(r, f"{r.name}_acc", lanes, indent)
        value, pos = _slot(r, f"{r.name}_acc", "k")
        start = f"{value} = {identity(r.kind, r.acc_dtype)};"
        if r.kind in ARG_KINDS:
            start += f" {pos} = {NO_POSITION};"
        lines.append(f"{indent}for (int k = 0; k < {lanes}; ++k) {{ {start} }}")
    return lines


def _declare(red: Reduction, array: str, size: int | str, indent: str) -> list[str]:
    """Declarations of ``size`` accumulator slots named ``array`` (and their
    positions, for argmax and argmin)."""
    lines = [f"{indent}{value_type(red.acc_dtype)} {array}[{size}];"]
    if red.kind in ARG_KINDS:
        lines.append(f"{indent}int64_t {array}_pos[{size}];")
    return lines


def _slot(red: Reduction, array: str, at: str) -> tuple[str, str]:
    """The value and position lvalues of accumulator slot ``array[at]`` (the
    position array exists for argmax and argmin only)."""
    return f"{array}[{at}]", f"{array}_pos[{at}]"


def _copy(red: Reduction, into: tuple[str, str], src: tuple[str, str]) -> str:
    """A C++ statement copying accumulator slot ``src`` into ``into``."""
    copy = f"{into[0]} = {src[0]};"
    return f"{copy} {into[1]} = {src[1]};" if red.kind in ARG_KINDS else copy


def _fold(red: Reduction, into: tuple[str, str], value: str, pos: str) -> str:
    """A C++ statement folding ``value`` (at flat position ``pos``, for argmax
    and argmin) into the accumulator slot ``into``."""
    acc, acc_pos = into
    if red.kind not in ARG_KINDS:
        return f"{acc} = {COMBINE[red.kind].format(acc, value)};"
    # Branch-free selects on two arrays of lanes: the loop vectorizes (an array
    # of value-position structs did not, and ran 18x slower).
    take = ARG_TAKES[red.kind].format(acc, acc_pos, value, pos)
    return (
        f"{{ const bool take = {take}; {acc} = take ? {value} : {acc}; "
        f"{acc_pos} = take ? {pos} : {acc_pos}; }}"
    )


def _simd(group: list[Reduction] | list[Pointwise]) -> bool:
    """Whether the lane loop may carry ``omp simd``: each lane is independent,
    and GCC needs the hint to vectorize the NaN-propagating max/min selects;
    lazy selects and index checks must stay scalar."""
    return not any(
        calls(r.expr, "index_check") or calls(r.expr, "select") for r in group
    )


def _reduce_loops(
    group: list[Reduction],
    scope: Scope,
    indent: str,
    lanes: int,
    split: str = "",
    tail: bool = True,
    prefetch: tuple[Load, ...] = (),
) -> list[str]:
    """The loops over the reduced dims: blocks of ``lanes`` elements of the last
    dim, one accumulator per lane, then the last partial block (``tail``).
    ``split`` is put before the outermost loop (an ``omp for``)."""
    sizes = group[0].reduce_sizes
    if not sizes:
        body = _accumulate(group, scope, indent + "  ", "0")
        return [f"{indent}{{", *body, f"{indent}}}"]
    lines: list[str] = []
    head, last = sizes[:-1], sizes[-1]
    chunked = last - last % lanes
    if split:
        lines.append(f"{indent}{split}")
    loop_indent = open_loops(head, 0, "r", indent, lines)
    r = f"r{len(sizes) - 1}"
    simd = _simd(group)
    # With varying sizes the blocks' end is written from the length (a number
    # of whole blocks is equal for many lengths and would not be lifted).
    whole, rest = (
        (f"({last} - {last} % {lanes})", f"{last} % {lanes}")
        if scope.varying
        else (chunked, last - chunked)
    )
    lines.append(f"{loop_indent}for (int64_t rb = 0; rb < {whole}; rb += {lanes}) {{")
    lines += _prefetch_lines(prefetch, scope, r, lanes, loop_indent + "  ")
    if simd:
        lines.append(f"{loop_indent}  #pragma omp simd")
    lines.append(f"{loop_indent}  for (int64_t k = 0; k < {lanes}; ++k) {{")
    lines.append(f"{loop_indent}    const int64_t {r} = rb + k;")
    lines += _accumulate(group, scope, loop_indent + "    ", "k")
    lines.append(f"{loop_indent}  }}")
    lines.append(f"{loop_indent}}}")
    # (with varying sizes the loop stays when it runs no times, as the loops
    # of every size must look alike)
    if tail and (chunked < last or scope.varying):
        if simd:
            lines.append(f"{loop_indent}#pragma omp simd")
        lines.append(f"{loop_indent}for (int64_t k = 0; k < {rest}; ++k) {{")
        lines.append(f"{loop_indent}  const int64_t {r} = {whole} + k;")
        lines += _accumulate(group, scope, loop_indent + "  ", "k")
        lines.append(f"{loop_indent}}}")
    close_loops(len(head), loop_indent, lines)
    return lines


def _tree_combine(group: list[Reduction], indent: str, lanes: int) -> list[str]:
    """Fold the lanes pairwise (k with k + w, w halving): a fixed order, so
    the result is deterministic, and each level vectorizes."""
    lines = []
    # One loop per level with a constant width, so that the compiler sees
    # whole vectors in each (a loop over a halving ``w`` left it scalar code).
    w = lanes // 2
    while w > 0:
        lines.append(f"{indent}#pragma omp simd")
        lines.append(f"{indent}for (int k = 0; k < {w}; ++k) {{")
        for red in group:
            acc = f"{red.name}_acc"
            fold = _fold(red, _slot(red, acc, "k"), *_slot(red, acc, f"k + {w}"))
            lines.append(f"{indent}  {fold}")
        lines.append(f"{indent}}}")
        w //= 2
    return lines


def _split_reductions(
    group: list[Reduction], scope: Scope, indent: str, lanes: int
) -> list[str]:
    """A full reduction split across the OpenMP team: a static schedule gives
    each thread one contiguous range of the reduced loops but the last (of the
    block loop when there is one dim); partials are combined in thread order,
    then the last partial block, so a given thread count always gives one
    result."""
    sizes = group[0].reduce_sizes
    team = f"{group[0].name}_team"
    lines = [
        line
        for r in group
        for line in _declare(r, f"{r.name}_part", "EMBER_MAX_THREADS", indent)
    ]
    lines.append(f"{indent}int {team} = 1;")
    lines.append(f"{indent}#pragma omp parallel num_threads(ember_threads())")
    lines.append(f"{indent}{{")
    inner = indent + "  "
    lines.append(
        f"{inner}if (omp_get_thread_num() == 0) {team} = omp_get_num_threads();"
    )
    lines += _declare_acc(group, inner, lanes)
    one_dim = len(sizes) == 1
    collapse = f" collapse({len(sizes) - 1})" if len(sizes) > 2 else ""
    lines += _reduce_loops(
        group,
        scope,
        inner,
        lanes,
        f"#pragma omp for schedule(static){collapse}",
        not one_dim,
    )
    lines += _tree_combine(group, inner, lanes)
    for r in group:
        part = _slot(r, f"{r.name}_part", "omp_get_thread_num()")
        lines.append(f"{inner}{_copy(r, part, _slot(r, f'{r.name}_acc', '0'))}")
    lines.append(f"{indent}}}")
    for r in group:
        every = _slot(r, f"{r.name}_all", "0")
        lines += _declare(r, f"{r.name}_all", 1, indent)
        lines.append(f"{indent}{_copy(r, every, _slot(r, f'{r.name}_part', '0'))}")
        fold = _fold(r, every, *_slot(r, f"{r.name}_part", "t"))
        lines.append(f"{indent}for (int t = 1; t < {team}; ++t) {fold}")
    tail = sizes[-1] % lanes if one_dim else 0
    if not tail:
        for r in group:
            lines += _declare(r, f"{r.name}_acc", 1, indent)
            acc = _slot(r, f"{r.name}_acc", "0")
            lines.append(f"{indent}{_copy(r, acc, _slot(r, f'{r.name}_all', '0'))}")
        return lines
    # The last partial block, after the team: its own lanes, folded in last.
    lines += _declare_acc(group, indent, lanes)
    lines.append(f"{indent}for (int64_t k = 0; k < {tail}; ++k) {{")
    lines.append(f"{indent}  const int64_t r0 = {sizes[-1] - tail} + k;")
    lines += _accumulate(group, scope, indent + "  ", "k")
    lines.append(f"{indent}}}")
    lines += _tree_combine(group, indent, lanes)
    for r in group:
        acc = _slot(r, f"{r.name}_acc", "0")
        # The block comes last in position order, so it folds in last.
        every = _slot(r, f"{r.name}_all", "0")
        lines.append(f"{indent}{_fold(r, every, *acc)}")
        lines.append(f"{indent}{_copy(r, acc, every)}")
    return lines


def _prefetch_lines(
    loads_: tuple[Load, ...], scope: Scope, r: str, lanes: int, indent: str
) -> list[str]:
    """``__builtin_prefetch`` of each 64-byte line that the unit-stride loads in
    ``loads_`` (already moved to the next outer iteration) touch in this block.
    A prefetch never faults, so the one past the last row is harmless."""
    lines = []
    for ld in loads_:
        at = offset(ld.index, scope.strides[ld.name])
        if not any(isinstance(t, Var) and t.name == r and c == 1 for t, c in at.terms):
            continue  # a strided read: a prefetch per element would not pay
        per_line = max(64 // ld.dtype.itemsize, 1)
        for first in range(0, lanes, per_line):
            shifted = substitute(at, {r: var("rb", 2**62) + first})
            lines.append(f"{indent}__builtin_prefetch(&{ld.name}[{render(shifted)}]);")
    return lines


def _accumulate(
    group: list[Reduction], scope: Scope, indent: str, lane: str
) -> list[str]:
    body = Body(scope, indent)
    for red in group:
        v = body.value(red.expr)
        acc = _slot(red, f"{red.name}_acc", lane)
        body.lines.append(f"{indent}{_fold(red, acc, v, _position(red))}")
        for value, at in scope.spills.get(red.name, ()):
            body.lines.append(f"{indent}{at} = {body.value(value)};")
    return body.lines


def _position(red: Reduction) -> str:
    """C++ for the flat (row-major) position of ``r0, r1, ...`` in the reduced
    dims: what argmax and argmin return."""
    rvars = tuple(var(f"r{d}", 2**62) for d in range(len(red.reduce_sizes)))
    return render(offset(rvars, contiguous(red.reduce_sizes)))


# A column reduction folds this many consecutive rows into a partial before
# adding it to the total, so a float sum over R rows errs like about 64 + R/64
# additions, not R (torch's own sums are cascaded, too).
COLUMN_BLOCK = 64
# A column reduction needs an output row at least this long (a 256-bit vector
# of float32, two of float64); shorter ones keep their lanes along the rows.
MIN_COLUMN_LANES = 8


@dataclass(frozen=True)
class Columns:
    """How a kernel run by columns lays out its lanes: ``lanes`` of them along
    output dim ``dim`` (of ``rank``), every other output dim a loop outside."""

    rank: int
    dim: int
    lanes: int


def column_reductions(
    kernel: Kernel, scope: Scope, indent: str, team: str | None
) -> list[str] | None:
    """The loops of a kernel of reductions over dims outer in memory (a bias
    gradient: a sum over the rows of a row-major matrix), or None for any other
    kernel. The lanes run along an output dim contiguous in the input (the
    last, or where more reads and stores step by one along another, that one:
    the channels of a channels-last pooling), and each lane folds its column
    over the reduced dims in order; rows are contiguous reads. With the lanes
    along the reduced dim instead, each lane would read a strided column.

    Reductions may read earlier ones and pointwise stages over the output (a
    variance reads its mean, a logsumexp its max): each pass over the rows
    folds the reductions that read nothing of the pass, then keeps each lane's
    result in ``<name>_col[k]`` for the stages after it."""
    group = list(kernel.stages)
    dim = _column_dim(group, kernel, scope)
    if dim is None:
        return None
    first = next(s for s in group if isinstance(s, Reduction))
    sizes, size = first.sizes, first.sizes[dim]
    cols = Columns(len(sizes), dim, lanes_for(size, scope.varying))
    lines = [
        f"{indent}// {s.name} = {_what(s)} of {describe_origin(s.origin)}, by columns"
        for s in group
    ]
    blocks = -(-size // cols.lanes)
    # (with varying sizes the pragma is there for any width: see _team)
    if team is not None and (scope.varying or blocks * numel(sizes) // size > 1):
        lines.append(f"{indent}#pragma omp parallel for collapse({cols.rank}){team}")
    inner = indent
    for d in (d for d in range(cols.rank) if d != dim):
        lines.append(f"{inner}for (int64_t i{d} = 0; i{d} < {sizes[d]}; ++i{d}) {{")
        inner += "  "
    lines.append(f"{inner}for (int64_t ib = 0; ib < {size}; ib += {cols.lanes}) {{")
    body = inner + "  "
    lines.append(
        f"{body}const int64_t width = {size} - ib < {cols.lanes} ? {size} - ib "
        f": {cols.lanes};"
    )
    for step in _passes(group):
        if isinstance(step, Pointwise):
            lines += _column_pointwise(step, kernel, scope, body, cols)
        else:
            lines += _column_pass(step, kernel, scope, body, cols)
    lines.append(f"{inner}}}")
    close_loops(cols.rank - 1, inner, lines)
    return lines


def _what(stage: Pointwise | Reduction) -> str:
    return stage.kind.value if isinstance(stage, Reduction) else "pointwise"


def _passes(
    stages: list[Pointwise | Reduction],
) -> list[Pointwise | list[Reduction]]:
    """The stages in order, consecutive reductions that read none of each
    other gathered into one pass over the rows."""
    steps: list[Pointwise | list[Reduction]] = []
    for stage in stages:
        last = steps[-1] if steps else None
        if (
            isinstance(stage, Reduction)
            and isinstance(last, list)
            and not any(ld.name in {r.name for r in last} for ld in loads(stage.expr))
        ):
            last.append(stage)
        elif isinstance(stage, Reduction):
            steps.append([stage])
        else:
            steps.append(stage)
    return steps


def _column_pass(
    group: list[Reduction], kernel: Kernel, scope: Scope, body: str, cols: Columns
) -> list[str]:
    """One pass over the rows folding ``group`` per lane, then each lane's
    result kept in ``<name>_col`` (and stored, where the kernel stores it)."""
    lines = _declare_acc(group, body, cols.lanes)
    reduce_sizes = group[0].reduce_sizes
    rows = open_loops(reduce_sizes[:-1], 0, "r", body, lines)
    r, total = f"r{len(reduce_sizes) - 1}", reduce_sizes[-1]
    lines.append(f"{rows}for (int64_t rb = 0; rb < {total}; rb += {COLUMN_BLOCK}) {{")
    part_group = [_renamed(red) for red in group]
    lines += _declare_acc(part_group, rows + "  ", cols.lanes)
    lines.append(
        f"{rows}  for (int64_t {r} = rb; {r} < rb + {COLUMN_BLOCK} && {r} < {total}; "
        f"++{r}) {{"
    )
    lines += _lane_loop(
        part_group,
        rows + "    ",
        cols,
        lambda ind: _accumulate(part_group, scope, ind, "k"),
    )
    lines.append(f"{rows}  }}")

    def fold_parts(ind: str) -> list[str]:
        lines = []
        for red in group:
            part = _slot(red, f"{red.name}_part_acc", "k")
            lines.append(
                f"{ind}{_fold(red, _slot(red, f'{red.name}_acc', 'k'), *part)}"
            )
        return lines

    lines += _lane_loop(group, rows + "  ", cols, fold_parts, indexed=False)
    lines.append(f"{rows}}}")
    close_loops(len(reduce_sizes) - 1, rows, lines)
    lines += [f"{body}{value_type(r.dtype)} {r.name}_col[{cols.lanes}];" for r in group]

    def keep(ind: str) -> list[str]:
        out = []
        for red in group:
            t = value_type(red.dtype)
            acc = _slot(red, f"{red.name}_acc", "k")[1 if red.kind in ARG_KINDS else 0]
            out.append(f"{ind}{red.name}_col[k] = static_cast<{t}>({acc});")
            out += _store_lane(red, kernel, scope, ind, cols)
        return out

    stored = any(red.name in kernel.stored for red in group)
    lines += _lane_loop(group, body, cols, keep, indexed=stored)
    for red in group:
        scope.locals_[red.name] = f"{red.name}_col[k]"
    return lines


def _column_pointwise(
    stage: Pointwise, kernel: Kernel, scope: Scope, body: str, cols: Columns
) -> list[str]:
    """A pointwise stage over the output, one value per lane in ``<name>_col``."""
    lines = [f"{body}{value_type(stage.dtype)} {stage.name}_col[{cols.lanes}];"]

    def compute(ind: str) -> list[str]:
        code = Body(scope, ind)
        value = code.value(stage.expr)
        code.lines.append(f"{ind}{stage.name}_col[k] = {value};")
        return code.lines + _store_lane(stage, kernel, scope, ind, cols)

    lines += _lane_loop([stage], body, cols, compute)
    scope.locals_[stage.name] = f"{stage.name}_col[k]"
    return lines


def _store_lane(
    stage: Pointwise | Reduction, kernel: Kernel, scope: Scope, ind: str, cols: Columns
) -> list[str]:
    if stage.name not in kernel.stored:
        return []
    index = tuple(ivar(d) for d in range(cols.rank))
    at = render(offset(index, scope.strides[stage.name]))
    value = store_code(stage.dtype, f"{stage.name}_col[k]")
    return [f"{ind}{stage.name}[{at}] = {value};"]


def _lane_loop(
    group: list[Reduction], indent: str, cols: Columns, body, indexed: bool = True
) -> list[str]:
    """``for k < width``; ``indexed`` sets the lanes' output loop variable to
    ``ib + k`` in it."""
    lines = [f"{indent}#pragma omp simd"] if _simd(group) else []
    lines.append(f"{indent}for (int64_t k = 0; k < width; ++k) {{")
    if indexed:
        lines.append(f"{indent}  const int64_t i{cols.dim} = ib + k;")
    lines += body(indent + "  ")
    lines.append(f"{indent}}}")
    return lines


def _renamed(red: Reduction) -> Reduction:
    """``red`` accumulating into ``<name>_part_acc`` (a block's partial)."""
    return replace(red, name=f"{red.name}_part")


def _column_dim(group: list, kernel: Kernel, scope: Scope) -> int | None:
    """The output dim to run lanes along if ``group`` is a kernel worth running
    by columns, else None: reductions over the same ranges, reading no
    indirect index, and pointwise stages over their output (a gather at an
    argmax's position, too); some reduction must read an input contiguously
    along that output dim but not along the last reduced dim (reads contiguous
    along the reduced dim belong in rows), or, over a short window (pooling),
    read it moving with the output at all."""
    if not group or scope.spills:
        return None
    reductions = [s for s in group if isinstance(s, Reduction)]
    if not reductions or not all(isinstance(s, (Reduction, Pointwise)) for s in group):
        return None
    first = reductions[0]
    if not first.reduce_sizes or kernel.outer != first.sizes or not first.sizes:
        return None
    if any(
        s.sizes != first.sizes
        or (isinstance(s, Reduction) and s.reduce_sizes != first.reduce_sizes)
        for s in group
    ):
        return None
    names = {s.name for s in group}
    reads = [
        offset(ld.index, scope.strides[ld.name])
        for stage in reductions  # a pointwise stage reads one element per lane
        for ld in loads(stage.expr)
        if ld.name not in names  # (an earlier stage's value for this lane)
    ]
    if any(indirect_terms(flat) for flat in reads):
        return None
    dim = _lane_dim(first, reads, [scope.strides.get(s.name) for s in group])
    if first.sizes[dim] < MIN_COLUMN_LANES:
        return None  # lanes this short would not fill a vector
    i_lane, r_last = f"i{dim}", f"r{len(first.reduce_sizes) - 1}"
    # A last reduced dim this short (a pooling window) gives its lanes too
    # little to fill a vector: lanes along the output pay even where they read
    # with a stride (a pooling step) and the window is contiguous.
    window = first.reduce_sizes[-1] < MIN_COLUMN_LANES
    along_output = False
    for flat in reads:
        out_step, red_step = var_step(flat, i_lane), var_step(flat, r_last)
        if out_step is None or red_step is None:
            return None
        if red_step == 1 and out_step != 0 and not window:
            return None
        along_output |= out_step != 0 and (window or (out_step == 1 and red_step != 1))
    return dim if along_output else None


def _lane_dim(first: Reduction, reads: list, stores: list) -> int:
    """The last output dim, unless another steps by one element in more of the
    kernel's reads and stores (a channels-last pooling: the channels)."""
    index = tuple(ivar(d) for d in range(len(first.sizes)))
    flats = reads + [offset(index, s) for s in stores if s is not None]
    return unit_stride_dim(flats, first.sizes)

"""The scheduler: decides which IR nodes get memory and groups the rest into
fused loop kernels, following the rules written down in docs/codegen.md
("Fusion rules"). Its output is an ordered list of steps for the wrapper.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ..ir.indexing import (
    ZERO,
    Index,
    Var,
    indirect_terms,
    map_indirect,
    substitute,
    var,
    var_step,
)
from ..ir.nodes import (
    COSTLY_OPS,
    Call,
    Expr,
    Extern,
    IndexValue,
    Input,
    Load,
    LoweredGraph,
    Node,
    Pointwise,
    Reduction,
    Scan,
    Scatter,
    Stage,
    TensorSpec,
    loads,
    map_expr,
    node_loads,
    refs,
    walk,
)

# A pointwise value read by several consumers is recomputed in each (no buffer)
# while its expression has at most this many ops; past that it is stored once.
RECOMPUTE_LIMIT = 12

# A pointwise value that one reduction reads more often than it has elements,
# at points that move with the reduced range (a pooling window overlapping its
# neighbours: 3x3 with stride 2 reads most elements two or four times), is
# recomputed at every read when inlined, where no compiler can hoist it. Past
# this many ops it is stored once instead.
REREAD_LIMIT = 3

# A pointwise value with a transcendental op that its readers read, all
# together, at least this many times per element (a broadcast: rotary
# embeddings' cos and sin, one per position, read by every head of q and k in
# every layer) is stored once instead of recomputed at every read: the op
# costs far more than a load. Below this factor (softmax's exp, read by its
# sum and its division) recomputing stays cheaper than a store and a load.
BROADCAST_LIMIT = 4


@dataclass(frozen=True, slots=True)
class AliasView:
    """A strided view of a realized tensor's storage, made by the wrapper with
    ``as_strided`` (an extern's argument or a graph output that is a view)."""

    name: str
    base: str
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int


@dataclass(frozen=True, slots=True)
class Kernel:
    """One generated loop nest: parallel outer loops over ``outer`` and, inside,
    one inner loop (or loop nest) per stage, in order."""

    name: str
    outer: tuple[int, ...]
    stages: tuple[Stage, ...]
    stored: frozenset[str]  # stage names written to memory
    reads: tuple[str, ...]  # buffers read from outside the kernel

    @property
    def origin(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for stage in self.stages:
            for op in stage.origin:
                seen[op] = None
        return tuple(seen)


Step = Kernel | Extern | AliasView


@dataclass
class Schedule:
    steps: list[Step]
    buffers: dict[str, Node]  # realized nodes by name (inputs, externs, stored stages)
    views: dict[str, AliasView] = field(default_factory=dict)


def _substitute_expr(e: Expr, mapping: dict[str, Index]) -> Expr:
    return map_expr(e, index=lambda i: substitute(i, mapping))


def inline(e: Expr, inlined: dict[str, Pointwise]) -> Expr:
    """``e`` with every load of an inlined pointwise node replaced by its
    expression, inside indirect indices too."""

    def expand(x: Expr) -> Expr:
        if not isinstance(x, Load) or x.name not in inlined:
            return x
        mapping = {f"i{d}": idx for d, idx in enumerate(x.index)}
        return _substitute_expr(inlined[x.name].expr, mapping)

    return map_expr(e, expand)


def _size(e: Expr) -> int:
    return 1 + sum(_size(a) for a in e.args) if isinstance(e, Call) else 0


def pure_view(node: Pointwise, lowered: LoweredGraph) -> AliasView | None:
    """The strided view ``node`` is, when it only re-indexes one realized tensor
    with an affine index (no div/mod)."""
    e = node.expr
    if not isinstance(e, Load):
        return None
    flat = ZERO  # div/mod of a reshape fold away once multiplied by the strides
    for idx, stride in zip(e.index, lowered.specs[e.name].strides):
        flat = flat + idx * stride
    strides = [0] * len(node.sizes)
    for term, coef in flat.terms:
        if not isinstance(term, Var) or not term.name.startswith("i"):
            return None
        strides[int(term.name[1:])] += coef
    if any(s < 0 for s in strides):
        return None  # flip: torch's as_strided takes no negative strides
    offset = flat.const
    # A size-1 dim's stride is free; keep the one torch gives the view.
    meta_strides = lowered.specs[node.name].strides
    strides = [m if n == 1 else s for s, m, n in zip(strides, meta_strides, node.sizes)]
    return AliasView(node.name, e.name, node.sizes, tuple(strides), offset)


def keeps_layout(view: AliasView, spec: TensorSpec) -> bool:
    """Whether ``view`` has the strides the graph traced for its node.

    A copy (clone, contiguous, a same-dtype cast) that folded to a plain load
    would otherwise reach an op through torch as a view with other strides.
    The values are the same, but some ops read the layout too:
    ``_embedding_bag``'s CPU kernel takes its indices as contiguous memory, as
    its public wrapper made them, and ``as_strided_scatter`` clones its input
    keeping the strides. Such a node is computed into its own buffer instead
    (library kernels take any strides, so their arguments stay views).
    """
    if 0 in spec.sizes:
        return True
    return all(
        s == m for s, m, n in zip(view.strides, spec.strides, spec.sizes) if n > 1
    )


def schedule(lowered: LoweredGraph) -> Schedule:
    """Fuse the lowered graph into kernels; see docs/codegen.md for the rules."""
    nodes = _live(lowered)
    by_name = {n.name: n for n in nodes if not isinstance(n, Extern)}
    outputs = {n for n in lowered.outputs if n}
    users = _users(nodes)
    reread = _reread(nodes)
    needs_tensor = outputs | {
        n for e in nodes if isinstance(e, Extern) for n in _refs(e)
    }
    # Library kernels take any strides; an op through torch may read them, and
    # a convolution runs faster on the channels-last operands it was given.
    exact = {
        n for e in nodes if isinstance(e, Extern) and e.exact_layout for n in _refs(e)
    }
    # A view that must be a tensor is cheapest as a strided view of its base: so
    # the base (through chains of views) gets memory in its own layout.
    for node in reversed(nodes):
        if (
            node.name in needs_tensor
            and isinstance(node, Pointwise)
            and node.view  # (a copy computes its value: its source needs no memory)
            and isinstance(node.expr, Load)
            and not any(indirect_terms(i) for i in node.expr.index)
            and isinstance(by_name.get(node.expr.name), Pointwise)
        ):
            needs_tensor.add(node.expr.name)
    element_reads = _element_reads(nodes, needs_tensor)

    inlined: dict[str, Pointwise] = {}
    views: dict[str, AliasView] = {}
    compute: list[Node] = []  # realized stages and externs, in order
    computed_reads: set[str] = set()  # what they read (kept as compute grows)

    def to_compute(node: Node) -> None:
        compute.append(node)
        computed_reads.update(_reads(node))

    realized: set[str] = set(lowered.inputs) | set(lowered.constants.values())
    copied: set[str] = set()  # inlined values read through an inlined copy
    for node in nodes:
        if isinstance(node, Input):
            continue
        if isinstance(node, Extern):
            to_compute(node)
            realized.update(o for o in node.outputs if o)
            continue
        # A clone folded to a load, then viewed, would view the clone's source.
        through_copy = isinstance(node, Pointwise) and (
            not node.view or any(ld.name in copied for ld in loads(node.expr))
        )
        original = node
        node = inline_loads(node, inlined)
        if isinstance(node, (Reduction, Scatter, Scan)):
            to_compute(node)
            realized.add(node.name)
            continue
        as_tensor = node.name in needs_tensor
        # An output may alias memory only where eager's would (a chain of view
        # ops); a clone or cast that folded to a plain load must still be a copy,
        # and so must a view of one.
        may_alias = not through_copy or node.name not in outputs
        view = pure_view(node, lowered) if as_tensor and may_alias else None
        source = _copy_viewed(original, views, copied) if as_tensor else None
        if view is None and source is not None and source not in computed_reads:
            # A copy taken as a view of its own source (a clone of a permute)
            # and then viewed with split or merged dims (flattened for a
            # matmul) is no view of that source: compute the copy in its own
            # layout, which the view then is a view of, instead of reading
            # the source through divisions and modulos here. (Not once a step
            # before this one took the copy as that view.)
            del views[source]
            to_compute(inlined.pop(source))
            realized.add(source)
            node = inline_loads(original, inlined)
            view = pure_view(node, lowered) if may_alias else None
        if (
            view is not None
            and view.base in realized
            and (node.name not in exact or keeps_layout(view, lowered.specs[node.name]))
        ):
            views[node.name] = view
            inlined[node.name] = node
        elif as_tensor or _worth_storing(
            node,
            len(users.get(node.name, ())),
            node.name in reread,
            element_reads.get(node.name, 0),
        ):
            to_compute(node)
            realized.add(node.name)
            continue
        else:
            inlined[node.name] = node
        if through_copy:
            copied.add(node.name)
    return _group(compute, views, outputs, lowered)


def _copy_viewed(
    node: Node, views: dict[str, AliasView], copied: set[str]
) -> str | None:
    """The copy that view ``node`` reads, where that copy became a strided view
    of its own source instead of memory of its own."""
    if not (isinstance(node, Pointwise) and node.view and isinstance(node.expr, Load)):
        return None
    name = node.expr.name
    return name if name in views and name in copied else None


def inline_loads(node: Stage, inlined: dict[str, Pointwise]) -> Stage:
    """``node`` with the inlined nodes it reads substituted, and their origin
    (memory planning uses it to rename a buffer a kernel reads)."""
    origin = _origin(node, inlined)
    if isinstance(node, Scatter):
        return replace(
            node,
            init=inline(node.init, inlined),
            value=inline(node.value, inlined),
            target=tuple(
                map_indirect(i, lambda v: inline(v, inlined)) for i in node.target
            ),
            origin=origin,
        )
    return replace(node, expr=inline(node.expr, inlined), origin=origin)


def _origin(node: Stage, inlined: dict[str, Pointwise]) -> tuple[str, ...]:
    """The aten nodes computed by ``node`` once what it reads is inlined."""
    seen: dict[str, None] = {}
    for ld in node_loads(node):
        if ld.name in inlined:
            seen.update(dict.fromkeys(inlined[ld.name].origin))
    seen.update(dict.fromkeys(node.origin))
    return tuple(seen)


def _refs(node: Extern) -> list[str]:
    return refs(node.args) + refs(node.kwargs)


def _reads(node: Node) -> set[str]:
    if isinstance(node, (Pointwise, Reduction, Scatter, Scan)):
        return {ld.name for ld in node_loads(node)}
    if isinstance(node, Extern):
        return set(_refs(node))
    return set()


def _live(lowered: LoweredGraph) -> list[Node]:
    """The nodes some output depends on, in order (externs once each)."""
    nodes = list(dict.fromkeys(lowered.nodes))
    live = {n for n in lowered.outputs if n}
    kept = []
    for node in reversed(nodes):
        names = (
            [o for o in node.outputs if o] if isinstance(node, Extern) else [node.name]
        )
        if isinstance(node, Input) or live.intersection(names):
            live |= _reads(node)
            kept.append(node)
    return kept[::-1]


def _users(nodes: list[Node]) -> dict[str, set[str]]:
    users: dict[str, set[str]] = {}
    for node in nodes:
        for name in _reads(node):
            users.setdefault(name, set()).add(node.name)
    return users


def _worth_storing(node: Pointwise, readers: int, reread: bool, reads: int) -> bool:
    """Whether computing ``node`` once into memory costs less than computing it
    again at each of its reads (``RECOMPUTE_LIMIT``, ``REREAD_LIMIT``,
    ``BROADCAST_LIMIT``); ``reads``: how many elements its readers read."""
    ops = _size(node.expr)
    return (
        (readers > 1 and ops > RECOMPUTE_LIMIT)
        or (reread and ops > REREAD_LIMIT)
        or (
            0 < math.prod(node.sizes) * BROADCAST_LIMIT <= reads
            and any(isinstance(x, Call) and x.op in COSTLY_OPS for x in walk(node.expr))
        )
    )


def _element_reads(nodes: list[Node], realized: set[str]) -> dict[str, int]:
    """Per pointwise node, how many of its elements are computed when it is
    inlined: each load of it once per point of its reader's loops (a
    reduction's load that stays put over the reduced range once per output),
    and through a pointwise reader that is inlined in turn (not ``realized``)
    as often as that reader is computed."""
    found: dict[str, int] = {}
    for node in reversed(nodes):
        if not isinstance(node, (Pointwise, Reduction)):
            continue
        outer = math.prod(node.sizes)
        if isinstance(node, Pointwise) and node.name not in realized:
            outer = max(outer, found.get(node.name, 0))
        reduced = (
            [f"r{d}" for d in range(len(node.reduce_sizes))]
            if isinstance(node, Reduction)
            else []
        )
        for ld in loads(node.expr):
            moving = reduced and any(_moves(i, reduced) for i in ld.index)
            count = outer * math.prod(node.reduce_sizes) if moving else outer
            found[ld.name] = found.get(ld.name, 0) + count
    return found


def _reread(nodes: list[Node]) -> set[str]:
    """The pointwise nodes some reduction reads more times than they have
    elements, counting only its loads whose index moves with the reduced range
    (a load that does not is evaluated once per output element)."""
    sizes = {n.name: n.sizes for n in nodes if isinstance(n, Pointwise)}
    found = set()
    for node in nodes:
        if not isinstance(node, Reduction):
            continue
        reads: dict[str, int] = {}
        reduced = [f"r{d}" for d in range(len(node.reduce_sizes))]
        for ld in loads(node.expr):
            if ld.name in sizes and any(_moves(i, reduced) for i in ld.index):
                reads[ld.name] = reads.get(ld.name, 0) + 1
        per_load = math.prod(node.sizes) * math.prod(node.reduce_sizes)
        found.update(n for n, k in reads.items() if k * per_load > math.prod(sizes[n]))
    return found


def _moves(index: Index, names: list[str]) -> bool:
    """Whether ``index`` changes with one of the loop variables ``names``, also
    through the values of its indirect terms (a clamped window position)."""
    if any(var_step(index, n) != 0 for n in names):
        return True
    for term in indirect_terms(index):
        for x in walk(term.value):
            if isinstance(x, IndexValue) and _moves(x.index, names):
                return True
            if isinstance(x, Load) and any(_moves(i, names) for i in x.index):
                return True
    return False


def _outer_vars(outer: tuple[int, ...]) -> tuple[Index, ...]:
    return tuple(var(f"i{d}", s) for d, s in enumerate(outer))


def _fits(node: Stage, outer: tuple[int, ...], members: dict) -> bool:
    """Whether ``node`` can join a kernel with these outer sizes and stages: every
    read of a stage already in the kernel must be at the same outer index. A
    scatter writes anywhere in its output, and a scan runs its own loops, so
    each is always a kernel of its own."""
    if isinstance(node, (Scatter, Scan)) or any(
        isinstance(m, (Scatter, Scan)) for m in members.values()
    ):
        return False
    if tuple(node.sizes[: len(outer)]) != outer:
        return False
    if isinstance(node, Reduction) and tuple(node.sizes) != outer:
        return False
    row = _outer_vars(outer)
    for ld in node_loads(node):
        if ld.name not in members:
            continue
        member = members[ld.name]
        want = len(outer) if isinstance(member, Reduction) else len(member.sizes)
        if len(ld.index) != want or tuple(ld.index[: len(outer)]) != row:
            return False
    return True


def _group(compute, views, outputs, lowered: LoweredGraph) -> Schedule:
    steps: list[Step] = []
    buffers: dict[str, Node] = {
        n.name: n for n in lowered.nodes if isinstance(n, Input)
    }
    open_stages: list[Pointwise | Reduction] = []
    outer: tuple[int, ...] = ()
    emitted_views: set[str] = set()

    def close() -> None:
        if open_stages:
            steps.append(
                _kernel(
                    len([s for s in steps if isinstance(s, Kernel)]), outer, open_stages
                )
            )
            open_stages.clear()

    def need(names) -> None:
        for name in names:
            if name in views and name not in emitted_views:
                steps.append(views[name])
                emitted_views.add(name)

    for node in compute:
        if isinstance(node, Extern):
            close()
            need(_refs(node))
            steps.append(node)
            for o in node.outputs:
                if o:
                    buffers[o] = node
            continue
        members = {s.name: s for s in open_stages}
        if not open_stages or not _fits(node, outer, members):
            close()
            outer = _outer_of(node)
        open_stages.append(node)
    close()
    need([o for o in lowered.outputs if o])

    # A stage needs memory when something outside its kernel reads it.
    read_outside: set[str] = set(outputs)
    for step in steps:
        if isinstance(step, Extern):
            read_outside |= set(_refs(step))
        elif isinstance(step, AliasView):
            read_outside.add(step.base)
        else:
            inside = {s.name for s in step.stages}
            for stage in step.stages:
                read_outside |= {ld.name for ld in node_loads(stage)} - inside
    final: list[Step] = []
    for step in steps:
        if isinstance(step, Kernel):
            stored = frozenset(
                s.name
                for s in step.stages
                if isinstance(s, (Pointwise, Scatter, Scan)) or s.name in read_outside
            )
            step = replace(step, stored=stored)
            for s in step.stages:
                if s.name in stored:
                    buffers[s.name] = s
        final.append(step)
    return Schedule(final, buffers, views)


def _outer_of(node: Stage) -> tuple[int, ...]:
    """The parallel outer sizes of a kernel that starts with ``node``."""
    if isinstance(node, (Scatter, Scan)):
        return ()  # its writes do not follow any outer index; a scan loops itself
    if isinstance(node, Reduction):
        return tuple(node.sizes)
    return tuple(node.sizes[:-1])


def _kernel(index: int, outer: tuple[int, ...], stages: list) -> Kernel:
    inside = {s.name for s in stages}
    reads: dict[str, None] = {}
    for stage in stages:
        for ld in node_loads(stage):
            if ld.name not in inside:
                reads[ld.name] = None
    return Kernel(f"kernel{index}", outer, tuple(stages), frozenset(), tuple(reads))

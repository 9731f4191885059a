"""Memory planning: when each buffer is allocated and freed, and which dead
buffer's memory a new one takes. Fused intermediates never reach this stage
(the scheduler gave them no buffer). A kernel may write a stage into the
memory of a buffer it reads for the last time (``takes``); the new value of
an input updated in place may be written into the input itself (``in_place``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ..ir.aten import returns_view
from ..ir.indexing import ZERO, Index, bounds, offset, substitute, var, var_step
from ..ir.nodes import Extern, Load, Pointwise, TensorSpec, node_loads, refs
from .fusion import AliasView, Kernel, Schedule, inline_loads


@dataclass(frozen=True, slots=True)
class Allocation:
    """Buffer ``name`` is made before its step, fresh or in ``reuses``'s memory."""

    name: str
    reuses: str | None


@dataclass
class MemoryPlan:
    allocations: dict[str, Allocation] = field(default_factory=dict)
    frees: dict[int, list[str]] = field(default_factory=dict)  # step -> names to del
    reused: int = 0  # how many allocations took a dead buffer's memory
    # Output -> the input whose memory its kernel writes it into (the caller
    # copies that output into that input anyway: an update in place).
    in_place: dict[str, str] = field(default_factory=dict)
    # Step -> {stage: the buffer whose memory the stage is written into}: dense
    # memory of the same dtype and size that this kernel reads last, each
    # element before it is overwritten (an epilogue written into its library
    # call's output, a softmax into its scores). No allocation at all.
    takes: dict[int, dict[str, str]] = field(default_factory=dict)


# Below this size a fresh tensor from torch's allocator costs less than viewing a
# dead buffer's memory as a new tensor (about 1 µs more of Python per reuse):
# the allocator hands back recently freed memory. Measured, allocating and
# filling: 64 KiB 2.6 µs fresh, 3.7 reused; 1 MiB 10.9 and 12.0; 3 MiB 55 and 33,
# where a fresh block comes from the kernel and faults in page by page.
MIN_REUSE_BYTES = 1024 * 1024


def span(sizes: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """Elements of storage a tensor of these sizes and strides spans from its
    first element (0 when it has none)."""
    if any(s == 0 for s in sizes):
        return 0
    return 1 + sum((n - 1) * st for n, st in zip(sizes, strides))


def nbytes(spec: TensorSpec) -> int:
    """Bytes a tensor with this layout spans from its first element."""
    return span(spec.sizes, spec.strides) * spec.dtype.itemsize


def _step_uses(step) -> list[str]:
    if isinstance(step, Kernel):
        return list(step.reads)
    if isinstance(step, Extern):
        return refs(step.args) + refs(step.kwargs)
    return [step.base]


def plan_memory(
    schedule: Schedule,
    specs: dict[str, TensorSpec],
    outputs: set[str],
    updates: dict[str, str] | None = None,
) -> MemoryPlan:
    """Reuse the memory of dead buffers for later kernel buffers of fitting size;
    free every other intermediate right after its last use. ``updates`` maps
    an output to the input it is the new value of: where nothing reads that
    input after the output's element is written, the output is written there.
    A stage whose kernel is the last reader of a buffer of its dtype and size
    is written into that buffer (``takes``) where ``_writable`` allows it."""
    base = {name: view.base for name, view in schedule.views.items()}
    forever = math.inf
    last_use: dict[str, float] = {}
    for s, step in enumerate(schedule.steps):
        for name in _step_uses(step):
            last_use[base.get(name, name)] = s
    for name in outputs:
        last_use[base.get(name, name)] = forever

    # A torch op whose result is a view keeps its argument's memory in use for
    # as long as that view lives: such memory is never handed to another buffer.
    viewed = {
        base.get(name, name)
        for step in schedule.steps
        if isinstance(step, Extern) and step.fallback and returns_view(step.op)
        for name in _step_uses(step)
    }
    plan = MemoryPlan()
    free: list[tuple[int, str]] = []  # (bytes, holder) of dead reusable memory
    donors: set[str] = set()
    taken: set[str] = set()  # buffers a stage was written into
    takers: set[str] = set()  # those stages: their memory is such a buffer's

    def ours(name: str) -> bool:
        """Memory this graph made and nothing else holds a view of."""
        return name not in viewed and (
            name in plan.allocations
            or name in takers
            or _fresh_extern_output(schedule, name)
        )

    for s, step in enumerate(schedule.steps):
        if isinstance(step, Kernel):
            for stage in step.stages:
                if stage.name not in step.stored:
                    continue
                dying = [
                    name
                    for name in step.reads
                    if last_use.get(name) == s
                    and name not in outputs
                    and name not in schedule.views
                    and name not in taken
                    and ours(name)
                ]
                need = nbytes(specs[stage.name])
                fits = (
                    [f for f in free if f[0] >= need >= MIN_REUSE_BYTES]
                    if stage.name not in outputs
                    else []
                )
                target = (updates or {}).get(stage.name)
                if target and _updates_in_place(schedule, s, stage, target, specs):
                    plan.in_place[stage.name] = target  # no memory of its own
                elif (into := _writable(step, stage, dying, specs)) is not None:
                    plan.takes.setdefault(s, {})[stage.name] = into
                    taken.add(into)
                    takers.add(stage.name)
                elif fits:
                    chosen = min(fits)
                    free.remove(chosen)
                    donors.add(chosen[1])
                    plan.reused += 1
                    plan.allocations[stage.name] = Allocation(stage.name, chosen[1])
                else:
                    plan.allocations[stage.name] = Allocation(stage.name, None)
        defined = _defined(step)
        for name in defined:
            last_use.setdefault(name, s)  # never read: dies where it is made
        for name, when in last_use.items():
            if when != s or name not in schedule.buffers or name in outputs:
                continue
            if name in taken:
                continue  # its memory went on to the stage written into it
            if ours(name):
                free.append((nbytes(specs[name]), name))
    for name, when in last_use.items():
        if when is forever or name not in schedule.buffers or name in donors:
            continue
        if (
            name in plan.allocations
            or name in takers
            or isinstance(schedule.buffers[name], Extern)
        ):
            plan.frees.setdefault(int(when), []).append(name)
    return plan


def _dense(spec: TensorSpec) -> bool:
    """No element shared by two positions and no gap: one write per element."""
    return nbytes(spec) == math.prod(spec.sizes) * spec.dtype.itemsize


def _writable(
    kernel: Kernel, stage, dying: list[str], specs: dict[str, TensorSpec]
) -> str | None:
    """The buffer among ``dying`` (read last by ``kernel``) that pointwise
    ``stage`` can be stored into: dense memory of the same dtype and size (its
    shape may differ: a batched product's output viewed with its batch dims
    split), read by the stage only at the address it writes, by earlier stages
    only within the addresses the stage writes for the same outer element
    (they run before it, for that element), and by no later stage."""
    spec = specs[stage.name]
    if not isinstance(stage, Pointwise) or not _dense(spec):
        return None
    own = offset(_own_index(stage), spec.strides)
    outer = [f"i{d}" for d in range(len(kernel.outer))]
    steps = {v: var_step(own, v) for v in outer}
    # The addresses of one outer element, where they are one dense block.
    block = bounds(substitute(own, {v: ZERO for v in outer}))
    if block[1] - block[0] + 1 != math.prod(stage.sizes[len(outer) :]):
        block = None
    position = kernel.stages.index(stage)
    for name in dying:
        given = specs[name]
        same = given.dtype == spec.dtype and nbytes(given) == nbytes(spec)
        if not (same and _dense(given)):
            continue
        reads = [
            (j, offset(ld.index, given.strides))
            for j, other in enumerate(kernel.stages)
            for ld in node_loads(other)
            if ld.name == name
        ]
        if all(
            (j == position and at == own)
            or (j < position and _within(at, steps, block))
            for j, at in reads
        ):
            return name
    return None


def _within(
    at: Index, steps: dict[str, int | None], block: tuple[int, int] | None
) -> bool:
    """Whether address ``at`` moves with each outer variable as the written
    address does (``steps``) and otherwise stays inside ``block``."""
    if block is None or any(var_step(at, v) != step for v, step in steps.items()):
        return False
    lo, hi = bounds(substitute(at, {v: ZERO for v in steps}))
    return block[0] <= lo and hi <= block[1]


def _updates_in_place(
    schedule: Schedule, at: int, stage, target: str, specs: dict[str, TensorSpec]
) -> bool:
    """Whether the kernel at step ``at`` may store ``stage`` into input
    ``target``'s memory: the same layout (the caller gets the input itself
    back), no later step or strided view reading ``target``, and the kernel's
    reads of it as ``_writable`` allows."""
    if specs[stage.name] != specs[target]:
        return False
    for s, step in enumerate(schedule.steps):
        if isinstance(step, AliasView) and step.base == target:
            return False
        if s > at and target in _step_uses(step):
            return False
    return _writable(schedule.steps[at], stage, [target], specs) == target


def _own_index(stage) -> tuple:
    """The index a pointwise stage stores each element at: its loop variables."""
    return tuple(var(f"i{d}", size) for d, size in enumerate(stage.sizes))


def write_in_place(kernel: Kernel, in_place: dict[str, str]) -> Kernel:
    """``kernel`` storing each output it updates in place under its input's
    name, and reading it there: its function takes one pointer for both, so
    every pointer stays ``__restrict__``."""
    moved = {out: inp for out, inp in in_place.items() if out in kernel.stored}
    if not moved:
        return kernel
    aliases = {
        stage.name: Pointwise(
            stage.name,
            stage.sizes,
            stage.dtype,
            Load(moved[stage.name], _own_index(stage), stage.dtype),
            (),
        )
        for stage in kernel.stages
        if stage.name in moved
    }
    stages = []
    for stage in kernel.stages:
        stage = inline_loads(stage, aliases)
        stages.append(replace(stage, name=moved.get(stage.name, stage.name)))
    stored = frozenset(moved.get(n, n) for n in kernel.stored)
    return replace(kernel, stages=tuple(stages), stored=stored)


def write_into(
    kernel: Kernel, takes: dict[str, str], specs: dict[str, TensorSpec]
) -> Kernel:
    """``kernel`` with each stage in ``takes`` (stage -> buffer) reading, where
    it and earlier stages read the buffer, its own memory at the same address
    (the wrapper binds the stage's name to that memory), so the C++ function
    takes one pointer for both and every pointer stays ``__restrict__``."""
    if not takes:
        return kernel
    aliases = {}
    for out, buf in takes.items():
        given, spec = specs[buf], specs[out]
        at = offset(
            tuple(var(f"i{d}", n) for d, n in enumerate(given.sizes)), given.strides
        )
        index = tuple(
            (at // stride) % size if size > 1 else ZERO
            for stride, size in zip(spec.strides, spec.sizes)
        )
        aliases[buf] = Pointwise(
            buf, given.sizes, given.dtype, Load(out, index, spec.dtype), ()
        )
    stages = tuple(inline_loads(stage, aliases) for stage in kernel.stages)
    reads = tuple(n for n in kernel.reads if n not in aliases)
    return replace(kernel, stages=stages, reads=reads)


def _defined(step) -> list[str]:
    if isinstance(step, Kernel):
        return sorted(step.stored)
    if isinstance(step, Extern):
        return [o for o in step.outputs if o]
    return []  # an AliasView makes no memory


def _fresh_extern_output(schedule: Schedule, name: str) -> bool:
    """Library kernels return new memory; a fallback op may return a view of an
    input, whose memory must never be written."""
    node = schedule.buffers.get(name)
    return isinstance(node, Extern) and not node.fallback

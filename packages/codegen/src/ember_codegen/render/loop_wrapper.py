"""The Python wrapper of a loop target (C++, Triton): checks the inputs match
what the kernels were compiled for (else runs the graph through torch),
allocates buffers as the memory plan says, calls kernels and library
functions, frees buffers early. How a kernel is called is the target's
(``Launch``); the rest is shared.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..ir.aten import STORAGE_READERS
from ..ir.nodes import (
    Extern,
    LoweredGraph,
    Ref,
    TensorSpec,
    contiguous,
    describe_origin,
    refs,
)
from ..scheduling.fusion import AliasView, Kernel, Schedule
from ..scheduling.memory import MemoryPlan, nbytes
from . import KernelInfo, Rendered, Scheduled
from .torch import op_path, render_arg


@dataclass(frozen=True)
class Launch:
    """How a target's wrapper calls its kernels: ``call(kernel, args)`` is the
    call expression given its argument expressions, which are the buffers'
    data pointers (``pointers``) or the tensors themselves; a kernel that
    ``checks_indices`` returns nonzero for an out-of-range index, and the
    wrapper then runs the graph through torch (which raises torch's error)."""

    target: str
    language: str  # of the kernels' source, for the wrapper's header
    call: Callable[[Kernel, list[str]], str]
    pointers: bool
    checks_indices: Callable[[Kernel], bool]


def render_loops(
    scheduled: Scheduled,
    emit_source: Callable[[list[Kernel], dict[str, tuple[int, ...]], str], str],
    launch: Launch,
) -> Rendered:
    """A loop target's rendering: its kernels' source from ``emit_source``
    (kernels, each buffer's strides, the graph's title) and this wrapper."""
    lowered = scheduled.lowered
    kernels = [s for s in scheduled.schedule.steps if isinstance(s, Kernel)]
    strides = {name: spec.strides for name, spec in lowered.specs.items()}
    source = emit_source(kernels, strides, scheduled.title) if kernels else ""
    wrapper, infos = emit_loop_wrapper(
        lowered,
        scheduled.schedule,
        scheduled.plan,
        scheduled.title,
        launch,
        scheduled.check_inputs,
        scheduled.device,
    )
    return Rendered(wrapper, source, infos)


def _layout(spec: TensorSpec) -> str:
    return f"{tuple(spec.sizes)}, {tuple(spec.strides)}"


def _spec_args(spec: TensorSpec, device: str) -> str:
    on = "" if device == "cpu" else f", device={device!r}"
    return f"{tuple(spec.sizes)}, {tuple(spec.strides)}, dtype={spec.dtype}{on}"


def emit_loop_wrapper(
    lowered: LoweredGraph,
    schedule: Schedule,
    plan: MemoryPlan,
    title: str,
    launch: Launch,
    check_inputs: bool = True,
    device: str = "cpu",
) -> tuple[str, tuple[KernelInfo, ...]]:
    """Source defining ``call(*inputs)`` and the list of kernels it runs; with
    ``check_inputs`` its first line sends inputs unlike the compiled ones to the
    "torch" wrapper."""
    specs = lowered.specs
    params = list(lowered.inputs)
    # the device itself (cuda:1 is not cuda:0), where kernels launch and
    # buffers are made
    on_device = "is_cpu" if device == "cpu" else "device == DEVICE"
    guard = " and ".join(
        f"{n}.dtype is {specs[n].dtype} and {n}.shape == {tuple(specs[n].sizes)} "
        f"and {n}.stride() == {tuple(specs[n].strides)} and {n}.{on_device}"
        for n in params
        if check_inputs
    )
    tensor_needed = {
        n for s in schedule.steps if isinstance(s, Extern) for n in _refs(s)
    }
    outputs = {n for n in lowered.outputs if n}
    products = _product_calls(schedule, specs, outputs)
    # (a library call that takes a view's base in its place reads the base)
    taken = {name for form in products.values() for name in form.views}
    made_as = (
        _made_as_views(schedule, specs, plan, tensor_needed | outputs, taken, outputs)
        if launch.pointers
        else {}
    )
    view_bases = {s.base for s in schedule.steps if isinstance(s, AliasView)}
    # (the caller's tensors: inputs and the graph's constants)
    given = set(params) | set(lowered.constants.values())
    returned_bases = _returned_bases(schedule, specs, outputs, given)
    tensor_needed |= view_bases
    # Kernels and strided views index these with the strides the meta kernel
    # gave, and the caller gets outputs with eager's strides (a library call
    # or an op through torch given a channels-last input may return that).
    spec_layout = view_bases | {n for n in lowered.outputs if n}
    spec_layout |= {n for s in schedule.steps if isinstance(s, Kernel) for n in s.reads}
    # (and the buffers kernels write into: ``write_into`` took them off ``reads``)
    spec_layout |= {buf for into in plan.takes.values() for buf in into.values()}
    # A pointer several kernels take is read from its tensor once.
    kernel_uses: dict[str, int] = {}
    for step in schedule.steps:
        if isinstance(step, Kernel):
            for name in _kernel_args(step):
                kernel_uses[name] = kernel_uses.get(name, 0) + 1
    pointers: set[str] = set()
    # Names bound to a tensor unlike their spec: in another shape over the same
    # row-major memory (a product taken unflattened), or anything (``raw``: a
    # dead buffer's memory reused, where only kernels read the name).
    reshaped = {
        step.outputs[0]
        for step in schedule.steps
        if id(step) in products and products[id(step)].unflattened
    }
    # (a buffer made in its view's shape is the view's tensor: its own name
    # is read by kernels only, and a stage written into its memory later, or
    # a buffer reusing it, reinterprets that memory)
    raw: set[str] = set(made_as)
    own_tensor = tensor_needed | outputs  # names whose tensor itself is read
    # Views that only such calls took are never made.
    unused = {name for step in products.values() for name in step.views} - {
        n
        for s in schedule.steps
        if not (isinstance(s, Extern) and id(s) in products)
        for n in _uses(s)
    }
    unused -= outputs
    body: list[str] = []
    if guard:
        body += [f"if not ({guard}):", f"    return fallback({', '.join(params)})"]
    # Outputs a kernel writes into the input they update (the same tensor).
    body += [f"{out} = {inp}  # updated in place" for out, inp in plan.in_place.items()]
    kernels: list[KernelInfo] = []
    for s, step in enumerate(schedule.steps):
        if isinstance(step, Kernel):
            into = plan.takes.get(s, {})
            for out, buf in into.items():
                take = _take(buf, specs[buf], specs[out], buf in reshaped, buf in raw)
                if out not in own_tensor and take != buf:
                    take = buf  # (kernels read its memory only)
                    row_major = buf in reshaped or _row_major(specs[buf])
                    (reshaped if row_major and buf not in raw else raw).add(out)
                body.append(f"{out} = {take}  # written into {buf}'s memory")
            for name in sorted(step.stored):
                if name in given or name in into:
                    continue  # an input updated in place, or a buffer taken
                alloc = plan.allocations[name]
                if alloc.reuses is not None and name not in tensor_needed:
                    raw.add(name)
                spec = specs[name]
                if name in made_as:
                    view = made_as[name]
                    spec = TensorSpec(view.sizes, view.strides, spec.dtype)
                body += _allocate(alloc, spec, name in tensor_needed, device)
            body.append(f"# {step.name}: {describe_origin(step.origin)}")
            args = []
            for name in _kernel_args(step):
                if not launch.pointers:
                    args.append(name)
                    continue
                if kernel_uses[name] == 1:
                    args.append(f"{name}.data_ptr()")
                    continue
                if name not in pointers:
                    body.append(f"{name}_ptr = {name}.data_ptr()")
                    pointers.add(name)
                args.append(f"{name}_ptr")
            call = launch.call(step, args)
            checked = launch.checks_indices(step)
            if checked:
                # torch raises its own error for the out-of-range index.
                body += [f"if {call}:", f"    return fallback({', '.join(params)})"]
            else:
                body.append(call)
            moved = sum(nbytes(specs[n]) for n in _kernel_args(step))
            kernels.append(
                KernelInfo(
                    "loop", step.name, _ops(step.origin), len(args), checked, moved
                )
            )
        elif isinstance(step, Extern) and id(step) in products:
            form = products[id(step)]
            body.append(f"{step.outputs[0]} = {form.call}")
            kernels.append(
                KernelInfo("extern", step.name, (str(step.op),), bytes=form.bytes)
            )
        elif isinstance(step, Extern):
            body += _extern(step, specs, spec_layout, given)
            kind = "fallback" if step.fallback else "extern"
            touched = dict.fromkeys([*_refs(step), *filter(None, step.outputs)])
            moved = sum(nbytes(specs[n]) for n in touched if n in specs)
            kernels.append(KernelInfo(kind, step.name, (str(step.op),), bytes=moved))
        elif made_as.get(step.base) is step:
            body.append(f"{step.name} = {step.base}  # made in this shape")
        elif step.name not in unused:
            # a returned view is a tensor of its own, as eager's is, unless it
            # is all of a base the graph made and returns only through it
            own = step.name in outputs and step.name not in returned_bases
            body.append(f"{step.name} = {_view(step, specs[step.base], own)}")
        if plan.frees.get(s):
            body.append(f"del {', '.join(plan.frees[s])}")
    results = []
    for i, name in enumerate(lowered.outputs):
        results.append(name if name else render_arg(lowered.output_constants[i], {}))
    body.append(f"return ({', '.join(results)}{',' if len(results) == 1 else ''})")
    loops = sum(k.kind == "loop" for k in kernels)
    externs = sum(k.kind == "extern" for k in kernels)
    header = [
        f"# ember codegen: {title}",
        f"# target {launch.target!r}: {loops} generated loop kernels "
        f"({launch.language} source below), "
        f"{externs} library calls, {len(lowered.fallback_ops)} ops through torch",
        # made once, not at each call's input check
        *([] if device == "cpu" else [f"DEVICE = torch.device({device!r})"]),
        f"def call({', '.join(params)}):",
    ]
    source = "\n".join(header + ["    " + line for line in body]) + "\n"
    return source, tuple(kernels)


@dataclass(frozen=True)
class Product:
    """An ``mm`` library call written as the same call made more cheaply:
    ``mm(x, w.t())`` of a row-major weight as ``F.linear(x, w)`` (linear
    multiplies by the transposed weight itself), and ``mm`` of a row-major
    tensor viewed flat as ``linear`` or ``matmul`` of the tensor itself (both
    fold its leading dims into rows, the product keeping them): the views are
    never made in Python (about 1 us each, two per transformer projection)."""

    call: str
    views: tuple[str, ...]  # the views of the mm this call does not need
    bytes: int
    unflattened: bool  # the product keeps the leading dims of its input


def _product_calls(
    schedule: Schedule, specs: dict[str, TensorSpec], outputs: set[str]
) -> dict[int, Product]:
    """The mm library calls (by ``id`` of the step) with a cheaper form. A
    flat view's own tensor is taken only where nothing reads the product's
    shape (kernels and strided views read its memory)."""
    views = {s.name: s for s in schedule.steps if isinstance(s, AliasView)}
    # (a view that is all of its base binds the base itself: ``_view``)
    shaped = outputs | {
        n for s in schedule.steps if isinstance(s, Extern) for n in _refs(s)
    }
    shaped |= {v.base for v in views.values() if _whole(v, specs[v.base])}
    found = {}
    for step in schedule.steps:
        if not (
            isinstance(step, Extern)
            and step.op is torch.ops.aten.mm.default
            and not step.kwargs
            and all(isinstance(a, Ref) for a in step.args)
        ):
            continue
        x, w = (a.name for a in step.args)
        used = []
        transposed = views.get(w)
        if transposed is not None and _transposes(transposed, specs[transposed.base]):
            w, function = transposed.base, "torch.nn.functional.linear"
            used.append(transposed.name)
        else:
            function = "torch.matmul"
            whole = views.get(w)
            if whole is not None and _whole(whole, specs[whole.base]):
                w = whole.base
                used.append(whole.name)
        flat = views.get(x)
        unflattened = (
            flat is not None
            and step.outputs[0] not in shaped
            and _flattens(flat, specs[flat.base])
        )
        if unflattened:
            x = flat.base
            used.append(flat.name)
        if not used:  # (a plain mm of tensors it takes as they are)
            continue
        moved = sum(nbytes(specs[n]) for n in (x, w, step.outputs[0]))
        found[id(step)] = Product(
            f"{function}({x}, {w})", tuple(used), moved, unflattened
        )
    return found


def _view(view: AliasView, base: TensorSpec, own: bool) -> str:
    """The expression making ``view``: the base itself where the view is all of
    it as it is (a weight seen as itself, as a backward's matmul takes it) and
    need not be a tensor of its own (``own``), else ``torch.as_strided``
    (``as_strided`` in the wrapper's globals), from the base's own offset when
    the view starts where the base does. The function form is the cheapest
    view torch makes from Python: 1.3 us, against 1.5 for the method
    ``t.as_strided`` and 2.1 for ``t.view`` (torch 2.13)."""
    sizes, strides = tuple(view.sizes), tuple(view.strides)
    if _whole(view, base) and not own:
        return view.base
    if view.offset == 0:
        return f"as_strided({view.base}, {sizes}, {strides})"
    offset = f"{view.base}.storage_offset() + {view.offset}"
    return f"as_strided({view.base}, {sizes}, {strides}, {offset})"


def _whole(view: AliasView, base: TensorSpec) -> bool:
    """Whether ``view`` is all of ``base``, as it is."""
    return (
        view.offset == 0
        and tuple(view.sizes) == tuple(base.sizes)
        and tuple(view.strides) == tuple(base.strides)
    )


def _row_major(spec: TensorSpec) -> bool:
    """Whether ``spec`` has the strides torch gives a new tensor of its sizes
    (a library call folds only such a tensor into rows the same way)."""
    return tuple(spec.strides) == contiguous(spec.sizes)


def _transposes(view: AliasView, base: TensorSpec) -> bool:
    """Whether ``view`` is ``base.t()`` of a row-major 2-D ``base``."""
    return (
        len(base.sizes) == 2
        and _row_major(base)
        and view.offset == 0
        and view.sizes == base.sizes[::-1]
        and view.strides == (1, base.sizes[1])
    )


def _flattens(view: AliasView, base: TensorSpec) -> bool:
    """Whether ``view`` is all of a row-major ``base`` seen as rows of its last
    dim (with the strides torch gives it: matmul folds only such a tensor)."""
    return (
        len(view.sizes) == 2
        and _row_major(base)
        and view.offset == 0
        and math.prod(view.sizes) == math.prod(base.sizes)
        and view.sizes[1] == base.sizes[-1]
        and view.strides == (base.sizes[-1], 1)
    )


def _made_as_views(
    schedule: Schedule,
    specs: dict[str, TensorSpec],
    plan: MemoryPlan,
    read_as_tensors: set[str],
    taken: set[str],
    outputs: set[str],
) -> dict[str, AliasView]:
    """Buffers made only to be seen through one view of all their memory (a
    kernel's result that a batched matmul reads as (B, M, K)), by name, with
    that view: they are allocated in the view's shape and the view is never
    made (about 1.3 us each; 8 of the 18 views of a tiny GPT-2's eval).
    Kernels take such a buffer's pointer only, so its shape is theirs to
    choose. The buffer must be new (not a dead buffer's memory), read by no
    library call and not returned; the view must start at its memory's start,
    cover it densely, and be neither returned nor one a library call takes
    the base for (``taken``). ``read_as_tensors``: what library calls read
    and the graph returns."""
    found = {}
    for base, (view, *more) in _views_by_base(schedule, lambda v: True).items():
        alloc = plan.allocations.get(base)
        spec = specs[base]
        if (
            not more
            and alloc is not None
            and alloc.reuses is None
            and base not in read_as_tensors
            and view.name not in taken | outputs
            and view.offset == 0
            and math.prod(view.sizes) == math.prod(spec.sizes)
            and _dense(view.sizes, view.strides)
            and _dense(spec.sizes, spec.strides)
        ):
            found[base] = view
    return found


def _returned_bases(
    schedule: Schedule,
    specs: dict[str, TensorSpec],
    outputs: set[str],
    given: set[str],
) -> set[str]:
    """Returned views that are all of their base as it is (a backward's weight
    gradient, an ``mm`` viewed as its own shape), whose base is not ``given``
    (an input or a constant),
    is not returned itself and has no other view returned: such a view is
    returned as its base, the tensor itself (1.3 us less each; a tiny T5's
    backward returned 44)."""
    returned = _views_by_base(schedule, lambda view: view.name in outputs)
    return {
        view.name
        for base, (view, *more) in returned.items()
        if not more
        and base not in outputs | given
        and base in specs
        and _whole(view, specs[base])
    }


def _views_by_base(
    schedule: Schedule, keep: Callable[[AliasView], bool]
) -> dict[str, list[AliasView]]:
    """The wrapper's views that ``keep`` keeps, by the name of their base."""
    views: dict[str, list[AliasView]] = {}
    for step in schedule.steps:
        if isinstance(step, AliasView) and keep(step):
            views.setdefault(step.base, []).append(step)
    return views


def _dense(sizes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether a layout covers exactly ``prod(sizes)`` elements from its start,
    each once (a permutation of a row-major layout)."""
    step = 1
    for size, stride in sorted(zip(sizes, strides), key=lambda d: d[1]):
        if size != 1 and stride != step:
            return False
        step *= size
    return True


def _uses(step) -> list[str]:
    """The buffers a wrapper step reads."""
    if isinstance(step, Kernel):
        return _kernel_args(step)
    if isinstance(step, Extern):
        return _refs(step)
    return [step.base]


def _kernel_args(step: Kernel) -> list[str]:
    """The buffers a kernel takes, in parameter order: reads, then stores (an
    input it updates in place is taken once, as a store)."""
    reads = [n for n in step.reads if n not in step.stored]
    return reads + [s.name for s in step.stages if s.name in step.stored]


def _ops(origin: tuple[str, ...]) -> tuple[str, ...]:
    """Op names of an origin list, without the user locations."""
    return tuple(dict.fromkeys(o.split(" @ ")[0] for o in origin))


def _refs(step: Extern) -> list[str]:
    return refs(step.args) + refs(step.kwargs)


def _take(
    buf: str, given: TensorSpec, spec: TensorSpec, reshaped: bool, raw: bool
) -> str:
    """The tensor with ``spec`` over the memory of ``buf`` (with spec ``given``,
    bound to a tensor of another shape where ``reshaped``, to anything where
    ``raw``): a stage written into that memory (``MemoryPlan.takes``)."""
    sizes, strides = tuple(spec.sizes), tuple(spec.strides)
    if raw:
        return f"reinterpret({buf}, {spec.dtype}, {sizes}, {strides})"
    if given == spec and not reshaped:
        return buf
    # (dense memory from the buffer's own offset, as ``_view``)
    return f"as_strided({buf}, {sizes}, {strides})"


def _allocate(alloc, spec: TensorSpec, as_tensor: bool, device: str) -> list[str]:
    if alloc.reuses is None:
        return [f"{alloc.name} = empty_strided({_spec_args(spec, device)})"]
    if as_tensor:
        make = (
            f"reinterpret({alloc.reuses}, {spec.dtype}, {tuple(spec.sizes)}, "
            f"{tuple(spec.strides)})"
        )
    else:
        make = alloc.reuses
    return [
        f"{alloc.name} = {make}  # reuses the memory of {alloc.reuses} "
        f"({nbytes(spec)} bytes)",
        f"del {alloc.reuses}",
    ]


def _extern(step: Extern, specs, spec_layout: set[str], given: set[str]) -> list[str]:
    names = {n: n for n in _refs(step)}
    lines = []
    if step.op in STORAGE_READERS and isinstance(step.args[0], Ref):
        # Its storage as the graph made it; the caller's own tensors are eager's.
        root = step.args[0].name
        if root not in given:
            names[root] = f"{root}_storage"
            lines.append(
                f"{root}_storage = own_storage({root}, {_layout(specs[root])})"
            )
    args = [render_arg(a, names) for a in step.args]
    args += [f"{k}={render_arg(v, names)}" for k, v in step.kwargs]
    targets = [o or "_" for o in step.outputs]
    lhs = ", ".join(targets)
    if len(targets) == 1 and _returns_sequence(step):
        lhs += ","
    call = DIRECT_CALLS.get(step.op) or op_path(step.op)
    lines.append(f"{lhs} = {call}({', '.join(args)})")
    for name in targets:
        if (
            name != "_"
            and name in spec_layout
            and (step.fallback or step.op not in CONTIGUOUS_RESULTS)
        ):
            lines.append(f"{name} = fix_layout({name}, {_layout(specs[name])})")
    return lines


# Library kernels whose result always has the strides their meta kernel gives
# (a fresh row-major tensor). Others may not: convolution's meta kernel says
# row-major where the CPU kernel returns channels-last for a channels-last
# input, so a loop reading the result gets it in the layout it was compiled for.
CONTIGUOUS_RESULTS = frozenset([torch.ops.aten.mm.default, torch.ops.aten.bmm.default])


# Library kernels called through torch's public function, which binds exactly
# this overload for the arguments an Extern passes (the same kernel): half the
# Python cost of calling the OpOverload (1.3 against 2.6 us), for every matmul.
DIRECT_CALLS = {
    torch.ops.aten.mm.default: "torch.mm",
    torch.ops.aten.bmm.default: "torch.bmm",
    torch.ops.aten.addmm.default: "torch.addmm",
    torch.ops.aten.baddbmm.default: "torch.baddbmm",
    torch.ops.aten.convolution.default: "torch.convolution",
}


def _returns_sequence(step: Extern) -> bool:
    return len(step.op._schema.returns) != 1 or str(
        step.op._schema.returns[0].type
    ).endswith("[]")

"""The parallel form of a scatter that adds (index_add, scatter_add,
index_put with accumulate, embedding's backward, scatter_reduce's sum and
mean): the one-program form walks the source in order, which a GPU runs on
one core. Here ``kernelN_init`` writes the output's initial values,
``kernelN_zero`` (without self) zeroes every targeted element, and
``kernelN_add`` adds each source value with ``tl.atomic_add``, blocks of the
source side by side (for a mean it also counts the values each element got,
and ``kernelN_mean`` divides by the count); ``kernelN``, plain Python in the
module, launches them in order. The additions into one element come in no
fixed order, as in torch's own CUDA kernels for these ops."""

from __future__ import annotations

import math

import torch

from ...ir.nodes import (
    Call,
    IndexValue,
    Pointwise,
    ReduceKind,
    Scatter,
    describe_origin,
    loads,
    walk,
)
from ...scheduling.fusion import Kernel
from ...scheduling.memory import span
from .kernels import (
    BLOCK,
    TL_TYPES,
    Body,
    Scope,
    checks_indices,
    emit_kernel,
    grid,
    group,
    narrow,
    pow2,
    split_vars,
    typed,
    warps,
    warps_for,
)

# Element types tl.atomic_add adds in on a GPU and under the interpreter alike
# (16-bit floats keep the one-program form).
ATOMIC_DTYPES = (torch.float32, torch.float64, torch.int32, torch.int64)


def atomic_scatter(kernel: Kernel) -> bool:
    """Whether ``kernel`` is a lone scatter that adds (or takes the mean) into
    a tensor of an ATOMIC_DTYPES type."""
    if len(kernel.stages) != 1 or not isinstance(kernel.stages[0], Scatter):
        return False
    stage = kernel.stages[0]
    return stage.kind is ReduceKind.SUM and stage.dtype in ATOMIC_DTYPES


def emit_atomic_scatter(kernel: Kernel, strides: dict[str, tuple[int, ...]]) -> str:
    """The three ``@triton.jit`` functions and the launcher of a kernel that
    ``atomic_scatter`` accepts."""
    (stage,) = kernel.stages
    name, out = kernel.name, stage.name
    init = Pointwise(out, stage.sizes, stage.dtype, stage.init, stage.origin)
    init_kernel = Kernel(
        f"{name}_init",
        (),
        (init,),
        frozenset({out}),
        tuple(dict.fromkeys(ld.name for ld in loads(stage.init) if ld.name != out)),
    )
    parts = [emit_kernel(init_kernel, strides)]
    if not math.prod(stage.sizes):
        calls = ["    pass  # an empty output"]
    else:
        calls = [_launch(init_kernel, [*init_kernel.reads, out])]
    # the walks over the source after the initial values (none without one):
    # zeroing the targets (without self), then adding
    walks = []
    if math.prod(stage.sizes) and math.prod(stage.src_sizes):
        walks = [True] if stage.include_self else [False, True]
    if stage.mean and walks:
        # the values each element got, indexed as the output's storage
        extent = span(stage.sizes, strides[out])
        calls.append(
            f"    p_{out}_count = torch.zeros({extent}, dtype=torch.int32, "
            f"device=p_{out}.device)"
        )
    for value in walks:
        walk_name = f"{name}_{'add' if value else 'zero'}"
        parts.append(_source_kernel(stage, kernel, strides, walk_name, value))
        calls.append(_source_launch(stage, walk_name, value))
    if stage.mean and walks:
        parts.append(_mean_kernel(stage, f"{name}_mean", extent))
        block = min(BLOCK, pow2(extent))
        calls.append(
            f"    {name}_mean[({-(-extent // block)},)](p_{out}, p_{out}_count, "
            f"num_warps={warps_for(block)})"
        )
    params = [f"p_{r}" for r in kernel.reads] + [f"p_{out}"]
    oob = ", *oob" if checks_indices(kernel) else ""
    launcher = [f"def {name}({', '.join(params)}{oob}):", *calls]
    return "\n\n".join(parts) + "\n\n" + "\n".join(launcher) + "\n"


def _launch(kernel: Kernel, buffers: list[str]) -> str:
    args = ", ".join(f"p_{b}" for b in buffers)
    return f"    {kernel.name}[({grid(kernel)},)]({args}, num_warps={warps(kernel)})"


def _source_reads(stage: Scatter, value: bool) -> list[str]:
    """The buffers a walk over the source reads: the index tensors of the
    target, and with ``value`` what the value reads."""
    names = (ld.name for e in _source_exprs(stage, value) for ld in loads(e))
    return list(dict.fromkeys(n for n in names if n != stage.name))


def _source_exprs(stage: Scatter, value: bool) -> list:
    """What a walk over the source evaluates: the target's positions, and
    with ``value`` the value."""
    exprs = [IndexValue(index) for index in stage.target]
    return [*exprs, stage.value] if value else exprs


def _checks(stage: Scatter, value: bool) -> bool:
    """Whether that walk checks an index (a target read through a gathered
    index checks it too): its kernel then takes the out-of-range flag."""
    return any(
        isinstance(x, Call) and x.op == "index_check"
        for e in _source_exprs(stage, value)
        for x in walk(e)
    )


def _source_kernel(
    stage: Scatter,
    kernel: Kernel,
    strides: dict[str, tuple[int, ...]],
    kernel_name: str,
    value: bool,
) -> str:
    """Blocks of the source side by side: with ``value`` each lane adds its
    value at its target atomically, without it writes a zero there."""
    params = _walk_buffers(stage, value)
    if _checks(stage, value):
        params.append("oob")
    n = math.prod(stage.src_sizes)
    block = min(BLOCK, pow2(n))
    body = Body(
        Scope(dict(strides)),
        "    ",
        block,
        frozenset(f"r{d}" for d in range(len(stage.src_sizes))),
    )
    body.lines += [
        f"    flat = tl.program_id(0).to(tl.int64) * {block} + "
        f"tl.arange(0, {block}).to(tl.int64)",
        f"    mask = flat < {n}",
        *("    " + v for v in split_vars("r", 0, stage.src_sizes, "flat")),
    ]
    at = group(body.offset(stage.name, stage.target, "mask"))
    target = f"p_{stage.name} + {at}"
    if value:
        v = narrow(body.value(stage.value, "mask"), stage.dtype)
        body.lines.append(f"    tl.atomic_add({target}, {v}, mask=mask)")
        if stage.mean:
            body.lines.append(
                f"    tl.atomic_add(p_{stage.name}_count + {at}, "
                f"tl.full([{block}], 1, tl.int32), mask=mask)"
            )
    else:
        zero = f"tl.zeros([{block}], {TL_TYPES[stage.dtype]})"
        body.lines.append(f"    tl.store({target}, {zero}, mask=mask)")
    what = "adds" if value else "zeroes the targets"
    return "\n".join(
        [
            "@triton.jit",
            f"def {kernel_name}({', '.join(params)}):",
            f"    # {stage.name} = scatter_{'mean' if stage.mean else 'sum'} of "
            f"{describe_origin(stage.origin)}: {what}",
            f"    # {typed(params, kernel, **{f'p_{stage.name}_count': torch.int32})}",
            *body.lines,
        ]
    )


def _walk_buffers(stage: Scatter, value: bool) -> list[str]:
    """The buffers a walk over the source takes, as the launcher names them:
    what it reads, the output, and for a mean's adding walk the counts."""
    names = [*_source_reads(stage, value), stage.name]
    if stage.mean and value:
        names.append(f"{stage.name}_count")
    return [f"p_{n}" for n in names]


def _source_launch(stage: Scatter, kernel_name: str, value: bool) -> str:
    args = _walk_buffers(stage, value)
    if _checks(stage, value):
        args.append("*oob")
    n = math.prod(stage.src_sizes)
    block = min(BLOCK, pow2(n))
    programs = -(-n // block)
    return (
        f"    {kernel_name}[({programs},)]({', '.join(args)}, "
        f"num_warps={warps_for(block)})"
    )


def _mean_kernel(stage: Scatter, kernel_name: str, extent: int) -> str:
    """Each element divided by the number of values it got (self counting
    as one), where it got any, as torch's mean: in the output's dtype."""
    block = min(BLOCK, pow2(extent))
    out = f"p_{stage.name}"
    dtype = TL_TYPES[stage.dtype]
    return "\n".join(
        [
            "@triton.jit",
            f"def {kernel_name}({out}, {out}_count):",
            f"    # {stage.name} = scatter_mean of {describe_origin(stage.origin)}: "
            "divides by the count",
            f"    # {out}: {dtype.removeprefix('tl.')}, {out}_count: int32",
            f"    flat = tl.program_id(0).to(tl.int64) * {block} + "
            f"tl.arange(0, {block}).to(tl.int64)",
            f"    n = tl.load({out}_count + flat, mask=flat < {extent}, other=0) "
            f"+ {int(stage.include_self)}",
            f"    mask = (flat < {extent}) & (n > 0)",
            f"    total = tl.load({out} + flat, mask=mask, other=0)",
            # (lanes without values divide by one: no 0/0 even where masked)
            f"    tl.store({out} + flat, total / tl.maximum(n, 1).to({dtype}), "
            "mask=mask)",
        ]
    )

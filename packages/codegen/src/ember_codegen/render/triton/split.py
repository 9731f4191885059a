"""The two-stage form of a long reduction with few rows (a loss's sum, a
gradient's norm): one program per row would walk all its blocks alone and
leave the GPU idle. Instead ``kernelN_parts`` gives each row ``parts``
programs, each folding a contiguous share of the blocks into a partial value,
and ``kernelN_final`` folds a row's partials, then runs the kernel's later
pointwise stages for the row (a mean's division, a loss's scaling);
``kernelN``, plain Python in the module, allocates the partials and launches
both."""

from __future__ import annotations

import math

from ...ir.nodes import Pointwise, ReduceKind, Reduction, describe_origin, loads
from ...scheduling.fusion import Kernel
from .kernels import (
    BLOCK,
    Scope,
    accumulate,
    checks_indices,
    fold,
    identity_of,
    partial_dtype,
    pointwise_stage,
    pow2,
    rounded,
    split_vars,
    store_result,
    typed,
    warps_for,
)

# The heuristic: programs enough to fill a large GPU a couple of times over
# (132 SMs on an H100 or H200), each folding at least MIN_BLOCKS blocks of
# BLOCK lanes (fewer do not pay for the second launch), and at most MAX_PARTS
# partials per row, which the final program folds in one block.
TARGET_PROGRAMS = 256
MIN_BLOCKS = 4
MAX_PARTS = 128

_FOLDS = (ReduceKind.SUM, ReduceKind.PROD, ReduceKind.MAX, ReduceKind.MIN)


def split_parts(kernel: Kernel) -> int:
    """Programs per row for ``kernel`` in the two-stage form; 1 for a kernel
    that keeps one program per row (anything but a sum, product, max or min
    reduction followed by pointwise stages only, without index checks, long
    enough and with few enough rows)."""
    if checks_indices(kernel):
        return 1
    stage, *after = kernel.stages
    if not isinstance(stage, Reduction) or stage.kind not in _FOLDS:
        return 1
    if not all(isinstance(s, Pointwise) for s in after):
        return 1
    rows = math.prod(kernel.outer)
    blocks = -(-math.prod(stage.reduce_sizes) // BLOCK)
    if stage.sizes != kernel.outer or rows < 1:
        return 1
    parts = min(MAX_PARTS, blocks // MIN_BLOCKS, -(-TARGET_PROGRAMS // rows))
    return parts if parts >= 2 else 1


def emit_split(kernel: Kernel, strides: dict[str, tuple[int, ...]]) -> str:
    """The two ``@triton.jit`` functions and the launcher of a kernel that
    ``split_parts`` splits."""
    stage, *after = kernel.stages
    parts, rows = split_parts(kernel), math.prod(kernel.outer)
    n = math.prod(stage.reduce_sizes)
    blocks = -(-n // BLOCK)
    chunk = -(-blocks // parts) * BLOCK  # whole blocks per part
    name, what = kernel.name, describe_origin(stage.origin)
    reads = [f"p_{r}" for r in kernel.reads if r not in kernel.stored]
    loop = [f"    for k in range(0, {chunk}, {BLOCK}):", "        start = lo + k"]
    lines, acc = accumulate(stage, Scope(dict(strides)), BLOCK, loop)
    acc_dtype = partial_dtype(stage.acc_dtype)  # as the one-program form's
    first = [
        "@triton.jit",
        f"def {name}_parts({', '.join([*reads, 'p_part'])}):",
        f"    # {stage.name} = {stage.kind.value} of {what}: part of a row",
        f"    # {typed([*reads, 'p_part'], kernel, p_part=acc_dtype)}",
        "    pid = tl.program_id(0).to(tl.int64)",
        f"    row = pid // {parts}",
        f"    lo = (pid % {parts}) * {chunk}",
        *("    " + v for v in split_vars("i", 0, kernel.outer, "row")),
        *lines,
        *fold(stage, acc, "part"),
        "    tl.store(p_part + pid, part)",
    ]
    result = f"{stage.name}_val"
    width = pow2(parts)
    outs = [f"p_{s.name}" for s in kernel.stages if s.name in kernel.stored]
    params = ["p_part", *reads, *outs]
    scope = Scope(dict(strides))
    second = [
        "@triton.jit",
        f"def {name}_final({', '.join(params)}):",
        f"    # {stage.name} = {stage.kind.value} of {what}: a row's parts",
        f"    # {typed(params, kernel, p_part=acc_dtype)}",
        "    pid = tl.program_id(0).to(tl.int64)",
        *("    " + v for v in split_vars("i", 0, kernel.outer, "pid")),
        f"    k = tl.arange(0, {width})",
        f"    {stage.name}_acc = tl.load(p_part + pid * {parts} + k, "
        f"mask=k < {parts}, other={identity_of(stage.kind, stage.acc_dtype)})",
        *fold(stage, f"{stage.name}_acc", result),
        *rounded(stage, result),
        *store_result(stage, kernel, scope, result),
    ]
    written = {stage.name} & kernel.stored
    for later in after:  # as the one-program form runs them
        if any(ld.name in written for ld in loads(later.expr)):
            second.append("    tl.debug_barrier()  # reads what this program stored")
        second += pointwise_stage(later, kernel, scope)
        written |= {later.name} & kernel.stored
    launcher = [
        f"def {name}(*args):",
        f"    reads, outs = args[:{len(reads)}], args[{len(reads)}:]",
        f"    part = torch.empty({rows * parts}, dtype={acc_dtype}, "
        "device=args[0].device)",
        f"    {name}_parts[({rows * parts},)](*reads, part, "
        f"num_warps={warps_for(BLOCK)})",
        f"    {name}_final[({rows},)](part, *reads, *outs, "
        f"num_warps={warps_for(width)})",
    ]
    return "\n".join([*first, "", "", *second, "", "", *launcher]) + "\n"

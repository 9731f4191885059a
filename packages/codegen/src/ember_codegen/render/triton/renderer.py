"""The Triton target behind the renderer interface: the kernels' module
(``emit_source``: the preamble, then each kernel, from kernels.py or in its
two-stage form from split.py) and the loop wrapper, which launches each
kernel on its grid with the buffers' tensors."""

from __future__ import annotations

import importlib.util
import os
import re

import torch

from ...ir.nodes import describe_origin
from ...scheduling.fusion import Kernel
from .. import KERNEL_BREAKS, Rendered, Scheduled
from ..loop_wrapper import Launch, render_loops
from ..repeats import canonical
from .atomic import atomic_scatter, emit_atomic_scatter
from .kernels import checks_indices, emit_kernel, grid, warps
from .preamble import PREAMBLE
from .split import emit_split, split_parts

KERNEL_BREAK = KERNEL_BREAKS["triton"]


def emit_source(kernels: list[Kernel], strides, title: str) -> str:
    """The module holding every kernel of a graph, preamble first; a long
    reduction with few rows in its two-stage form (split.py)."""
    parts = [f"# {title}\n{PREAMBLE}"]
    first: dict[str, Kernel] = {}  # each distinct kernel, by its canonical form
    for k in kernels:
        emit = emit_kernel
        if split_parts(k) > 1:
            emit = emit_split
        elif atomic_scatter(k):
            emit = emit_atomic_scatter
        text = emit(k, strides)
        names = {k.name, *k.reads, *(s.name for s in k.stages)}
        names |= {f"p_{n}" for n in names}
        # the parameters' dtypes are a comment here, and Triton compiles a
        # kernel per argument types: they are part of the form, so a repeat
        # takes the dtypes its kernel was compiled for
        types = "\n".join(re.findall(r"^ *# (p_\w+: .*)$", text, re.M))
        form = canonical(text, names, "#") + canonical(types, names)
        same = first.setdefault(form, k)
        if same is not k:  # a repeated layer's: Triton compiles the first once
            text = (
                f"# {k.name}: {describe_origin(k.origin)}\n"
                f"# the same kernel as {same.name}, on these buffers\n"
                f"{k.name} = {same.name}"
            )
        parts.append(text)
    return f"\n{KERNEL_BREAK}\n".join(parts)


def _call(kernel: Kernel, args: list[str]) -> str:
    if split_parts(kernel) > 1:  # its launcher sets up both launches
        return f"{kernel.name}({', '.join(args)})"
    if atomic_scatter(kernel):  # its launcher runs its kernels in order
        if checks_indices(kernel):
            return f"launch_checked({kernel.name}, {', '.join(args)})"
        return f"{kernel.name}({', '.join(args)})"
    launch = f"{kernel.name}[({grid(kernel)},)]"
    options = f"num_warps={warps(kernel)}"
    if checks_indices(kernel):
        # launched with an out-of-range flag, which the call returns
        return f"launch_checked({launch}, {', '.join(args)}, {options})"
    return f"{launch}({', '.join(args)}, {options})"


LAUNCH = Launch(
    "triton",
    "Triton",
    _call,
    pointers=False,
    checks_indices=checks_indices,
)


def interpreted() -> bool:
    """Whether Triton runs kernels on CPU tensors here (its interpreter)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


class TritonRenderer:
    description = (
        "Triton kernels (GPU; CPU tensors under TRITON_INTERPRET=1), "
        "library calls for matmul/conv"
    )

    needs = (
        "Triton (pip install 'ember-codegen[triton]') and a CUDA device, or "
        "TRITON_INTERPRET=1 to run its kernels on CPU tensors"
    )

    def available(self) -> bool:
        if importlib.util.find_spec("triton") is None:
            return False
        return interpreted() or torch.cuda.is_available()

    def render(self, scheduled: Scheduled) -> Rendered:
        return render_loops(scheduled, emit_source, LAUNCH)


RENDERER = TritonRenderer()

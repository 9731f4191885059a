"""Loading a Triton graph's kernels: its module source executed once
(``source.run_source``: ``triton.jit`` reads a kernel's source from its
``linecache`` entry); Triton caches their compiled forms."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ...source import run_source

if TYPE_CHECKING:
    from ...compiled import CompiledGraph


def load_kernels(compiled: CompiledGraph) -> tuple[dict[str, Callable], Path | None]:
    """The loop kernels of ``compiled`` by name (no file: the module is text);
    with ``autotune``, each jitted one launched with the fastest warp count
    found for it (tuning.py; a long reduction's two-stage launcher is not
    tuned)."""
    namespace = run_source(compiled.cpp_source, {}, "triton")
    names = [info.name for info in compiled.kernels if info.kind == "loop"]
    kernels = {name: namespace[name] for name in names}
    if compiled.autotune:
        from .tuning import Tuned

        folder = Path(compiled.cache_dir) / "tuning" if compiled.cache_dir else None
        kernels = {
            name: Tuned(fn, _own_source(compiled, name), folder)
            if hasattr(fn, "__getitem__")
            else fn
            for name, fn in kernels.items()
        }
    return {**kernels, "launch_checked": launch_checked}, None


def _own_source(compiled: CompiledGraph, name: str) -> str:
    """Kernel ``name``'s source, and for a repeat (``kernel7 = kernel3``) the
    source of the kernel it is, which the tuning key must cover."""
    source = compiled.kernel_source(name)
    same = re.search(rf"^{re.escape(name)} = (\w+)$", source, re.M)
    return source + compiled.kernel_source(same.group(1)) if same else source


def launch_checked(launch: Callable, *args: torch.Tensor, **options: int) -> bool:
    """Runs a kernel that reads through index tensors with a flag of its own
    (and Triton's launch ``options``); True when an index was out of range
    (the wrapper then runs the graph through torch, which raises torch's
    error)."""
    oob = torch.zeros(1, dtype=torch.int32, device=args[0].device)
    launch(*args, oob, **options)
    return bool(oob.item())

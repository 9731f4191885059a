"""Loading a C++ graph's kernels: its library from the kernel cache (or built
now), each loop kernel bound through ctypes with its pointer arguments."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .build import load_library

if TYPE_CHECKING:
    from ...compiled import CompiledGraph


def load_kernels(compiled: CompiledGraph) -> tuple[dict[str, Callable], Path | None]:
    """The loop kernels of ``compiled`` by name, and the library they are in.
    With ``lifted`` literals the library is the template that other sizes of
    the graph share, its kernels bound to this source's values (literals.py)."""
    source, extra = compiled.cpp_source, 0
    if compiled.lifted:  # (only graphs with symbolic sizes lift literals)
        from .literals import bind, find_literals, template, values

        literals = find_literals(source)
        source, extra = template(literals, compiled.lifted), 2
        ints, floats = values(literals, compiled.lifted)
    lib, path = load_library(
        source, compiled.cache_dir, compiled.locations, compiled.signer
    )
    kernels = {}
    for info in compiled.kernels:
        if info.kind == "loop":
            fn = getattr(lib, info.name)
            fn.argtypes = [ctypes.c_void_p] * (info.arity + extra)
            fn.restype = ctypes.c_int if info.checks_indices else None
            kernels[info.name] = bind(fn, ints, floats) if extra else fn
    return kernels, path

"""A capture's guards as the runtime's fast check: tensor guards become
TensorChecks (C++ when built), the rest one generated Python check. A saved
entry (saved_entries.py) keeps the same split as text and rebuilds it."""

from __future__ import annotations

import dataclasses
import sys
import types
from dataclasses import dataclass

import ember_capture
from ember_capture.checks import MODULES_NAME, CompiledCheck
from ember_runtime import GuardCheck, GuardSpec, TensorCheck, compile_guards


@dataclass(frozen=True)
class SplitGuards:
    """``tensors`` are checked by the runtime on the values ``reads`` (the
    body of a tuple display over ``L``, ``G``, ``C``) gives; ``rest`` checks
    every other guard (None: there is none). ``symbolic``: some guard admits
    sizes other than the call's (a symbolic size, or a relation between sizes),
    so the dispatcher tries this entry after the ones with fixed sizes.
    ``first``: the guards on the objects the reads pass through, which
    ``rest`` then leaves out; the runtime checks them, then the tensors, then
    ``rest``. Without it (an entry saved before ``first`` was), ``rest`` holds
    them all and runs first."""

    tensors: tuple[TensorCheck, ...]
    reads: str
    rest: CompiledCheck | None  # a GuardChecker, or a saved entry's PortableCheck
    symbolic: bool = False
    first: CompiledCheck | None = None


def _tensor_guards(result: ember_capture.CaptureResult) -> list:
    """The tensor guards with fixed sizes: the runtime's TensorChecks."""
    kinds = ember_capture.GuardKind
    return [
        g
        for g in result.guards
        if g.kind is kinds.TENSOR_MATCH and not g.expected.dynamic
    ]


@dataclass(frozen=True)
class GuardParts:
    """A capture's guards in the runtime's three parts: ``tensors`` (the tensor
    guards with fixed sizes), ``on_paths`` (the guards on the objects their
    reads pass through: checked before the reads) and ``rest``."""

    tensors: tuple
    on_paths: ember_capture.GuardSet
    rest: ember_capture.GuardSet


def guard_parts(result: ember_capture.CaptureResult) -> GuardParts:
    """``result``'s guards split for the runtime (a saved entry keeps the same
    parts as portable checks)."""
    tensors = _tensor_guards(result)
    paths = set().union(*(_within(g.source) for g in tensors))
    others = [g for g in result.guards if g not in tensors]
    return GuardParts(
        tuple(tensors),
        ember_capture.GuardSet(g for g in others if g.source in paths),
        ember_capture.GuardSet(g for g in others if g.source not in paths),
    )


def _within(source: object) -> set:
    """The sources ``source`` reads through (its children, theirs, ...)."""
    found = set()
    for field in dataclasses.fields(source):
        child = getattr(source, field.name)
        if isinstance(child, ember_capture.Source):
            found |= {child, *_within(child)}
    return found


def split_guards(result: ember_capture.CaptureResult) -> SplitGuards:
    """The tensor guards with fixed sizes, the guards on what their reads pass
    through, and the rest, compiled for the captured function (tensors with
    symbolic sizes are checked with the Python guards)."""
    kinds = ember_capture.GuardKind
    parts = guard_parts(result)
    tensor_guards = parts.tensors
    fn = result.fn
    cells = ember_capture.CellView(fn.__code__.co_freevars, fn.__closure__)
    rest = parts.rest
    checker = rest.compile(fn.__globals__, cells) if len(rest) else None
    first = parts.on_paths.compile(fn.__globals__, cells)
    checks = tuple(
        TensorCheck(
            g.source.name(),
            s.type,
            s.dtype,
            s.device,
            s.shape,
            s.stride,
            s.requires_grad,
        )
        for g in tensor_guards
        for s in [g.expected]
    )
    # A tuple display evaluates left to right: shared parts are read once.
    shared = ember_capture.SharedReads(g.source for g in tensor_guards)
    reads = "".join(f"{shared.expr(g.source)}, " for g in tensor_guards)
    symbolic = any(
        g.kind is kinds.SIZES or (g.kind is kinds.TENSOR_MATCH and g.expected.dynamic)
        for g in result.guards
    )
    return SplitGuards(checks, reads, checker, symbolic, first)


def tensor_reader(reads: str, f_globals: dict, cells: object):
    """``L -> the tensors`` from SplitGuards.reads, for one function object
    (a tensor read through an ``import`` inside the function reads
    ``sys.modules`` by the name checks give it)."""
    scope = {"G": f_globals, "C": cells, MODULES_NAME: sys.modules}
    return eval(f"lambda L: ({reads})", scope)


def guard_check(fn: types.FunctionType, split: SplitGuards) -> GuardCheck:
    """The runtime's fast check for a capture's guards, split by
    ``split_guards``, for the captured function ``fn``."""
    cells = ember_capture.CellView(fn.__code__.co_freevars, fn.__closure__)
    other, first = split.rest, split.first
    spec = GuardSpec(
        split.tensors,
        tensor_reader(split.reads, fn.__globals__, cells),
        other.check if other else None,
        other.failure if other else None,
        first.check if first else None,
        first.failure if first else None,
    )
    return compile_guards(spec)

"""torch.compiler's toolbox under the same names and meanings: ``disable``,
``allow_in_graph``, ``set_stance``, ``is_compiling``, ``list_backends``, and
``compile_module_`` for what ``nn.Module.compile()`` does (docs/configuration.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import ContextDecorator
from typing import Any, TypeVar

import torch

import ember_capture
import ember_runtime

from .api import compile
from .backends import BACKENDS

F = TypeVar("F", bound=Callable)


def disable(fn: F | None = None, recursive: bool = True) -> Any:
    """``fn`` never captured: a call of it from compiled code is a graph break
    and runs as Python, and compiling it runs it as it is. With ``recursive``
    (the default) the compiled functions it calls, in this thread, run as
    Python too. Without ``fn`` (``ember.disable()``), both a decorator that
    does the same and a context manager in which every compiled function this
    thread calls runs as Python."""
    if fn is None:
        return _Disable(recursive)

    @functools.wraps(fn)
    def never_captured(*args: Any, **kwargs: Any) -> Any:
        if not recursive:
            return fn(*args, **kwargs)
        with ember_runtime.eagerly():
            return fn(*args, **kwargs)

    return ember_capture.never_capture(never_captured)


class _Disable:
    """What ``ember.disable()`` gives: a decorator (as ``ember.disable(fn)``)
    and a context manager."""

    def __init__(self, recursive: bool) -> None:
        self.recursive = recursive
        self._blocks: list = []  # one per entered block, innermost last

    def __call__(self, fn: F) -> F:
        return disable(fn, self.recursive)

    def __enter__(self) -> None:
        block = ember_runtime.eagerly()
        block.__enter__()
        self._blocks.append(block)

    def __exit__(self, *exc: object) -> None:
        self._blocks.pop().__exit__(*exc)


def allow_in_graph(fn: F) -> F:
    """Capture puts each call of ``fn`` in the graph as one call instead of
    tracing its Python (aotgrad then traces the torch ops it runs). ``fn`` must
    take and return tensors and plain values, have no side effects, and run on
    meta tensors. Returns ``fn`` (marked)."""
    return ember_capture.call_in_graph(fn)


class set_stance(ContextDecorator):  # torch's name: it is called as a function
    """``set_stance("force_eager")``: every compiled function runs as Python;
    ``"eager_on_recompile"``: a call that would compile again runs eagerly
    (entries that match still run); ``"fail_on_recompile"``: it raises
    ``ember_runtime.RecompileError`` naming the guard; ``"default"``.

    Takes effect when called, for every thread; as a context manager, the
    stance before the call comes back at the end of the block. As a
    decorator it changes nothing until the function runs; each call then
    sets the stance and puts back the one it found."""

    def __init__(self, stance: str = "default") -> None:
        self._previous = ember_runtime.set_stance(stance)
        self._stance = ember_runtime.get_stance()

    def __call__(self, fn: F) -> F:
        ember_runtime.set_stance(self._previous)
        return super().__call__(fn)

    def _recreate_cm(self) -> _StanceBlock:
        return _StanceBlock(self._stance)  # one per call of a decorated function

    def __enter__(self) -> None:
        ember_runtime.set_stance(self._stance)

    def __exit__(self, *exc: object) -> None:
        ember_runtime.set_stance(self._previous)


class _StanceBlock:
    """One call of a function decorated with set_stance."""

    def __init__(self, stance: ember_runtime.Stance) -> None:
        self.stance = stance

    def __enter__(self) -> None:
        self._found = ember_runtime.set_stance(self.stance)

    def __exit__(self, *exc: object) -> None:
        ember_runtime.set_stance(self._found)


def is_compiling() -> bool:
    """True while ember (or torch.compile) captures the calling code, False when
    it runs as Python. Capture reads torch.compiler.is_compiling as True."""
    return torch.compiler.is_compiling()


def list_backends() -> list[str]:
    """The names ``ember.compile(backend=...)`` accepts."""
    return sorted(BACKENDS)


def compile_module_(module: torch.nn.Module, **compile_options: Any) -> None:
    """Compile ``module`` in place, as ``module.compile()`` does for
    torch.compile: calling it runs its compiled call (hooks and forward, as one
    capture), and the module stays itself (its class, ``state_dict`` keys,
    ``parameters()``). ``compile_options`` are ``ember.compile``'s."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"compile_module_ takes an nn.Module, not {type(module)}")
    # nn.Module.__call__ runs _compiled_call_impl when it is set, as for
    # torch.compile's Module.compile(); _call_impl itself never reads it.
    module._compiled_call_impl = compile(module._call_impl, **compile_options)

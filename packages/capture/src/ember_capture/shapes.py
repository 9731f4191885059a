"""Sizes in capture: what capture needs from a provider of symbolic shapes and
from one of meta kernels, and the policy that says which input dims are symbols.

Capture does not implement shape rules itself: the umbrella passes
``ember_aotgrad.symbolic`` as ``SymbolicShapes`` (stages share data, not code;
docs/dynamic.md). Without one, every size is a constant, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import torch

from .source import Source

# Which dims of the tensor read from ``source`` are symbols (none: all fixed).
# Called with an int argument too (a local, or an entry of a list or dict
# argument) and with an int attribute of a plain object (not an nn.Module):
# any dims at all make the int itself a symbol.
DynamicDims = Callable[[Source, torch.Tensor | int], Sequence[int]]


# Makes the context capture enters around each op's run on meta tensors: one
# whose results are torch's meta kernels' results, made faster (the umbrella
# passes ember_aotgrad's MetaRulesMode).
MetaMode = Callable[[], AbstractContextManager]


class SymbolicShapes(Protocol):
    """The provider's surface (``ember_aotgrad.symbolic`` has it)."""

    NoShapeRule: type[Exception]

    def ShapeEnv(self) -> Any: ...  # a class of the provider

    def SymbolicMode(self, env: Any) -> AbstractContextManager: ...

    def symbolic_tensor(
        self, env: Any, value: torch.Tensor, dims: dict[int, str]
    ) -> torch.Tensor: ...

    def has_symbols(self, args: object) -> bool: ...

    def to_python(self, expr: Any) -> str: ...

    def expr_of(self, value: object) -> Any: ...


class SpecializeShapes(Exception):
    """A symbolic size met something that has no symbolic form (an op with
    no shape rule): the caller captures again with every size fixed."""

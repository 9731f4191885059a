"""Which input dims get symbolic sizes (docs/dynamic.md).

``dynamic=None`` (the default) specializes each size first and makes a dim
symbolic after the first recompile its size caused; ``dynamic=True`` makes
every dim of the inputs symbolic from the first call (parameters and buffers
keep theirs); ``dynamic=False`` never. ``mark_dynamic`` and ``mark_static``
say it per tensor, as torch.compile's functions of the same names do.
"""

from __future__ import annotations

import importlib
import logging
import types
from collections.abc import Iterable

import torch

import ember_capture

from .cache import DynamicDimsCache

log = logging.getLogger("ember.dynamic")

# An integer argument's entry among the automatic dims: the int itself.
_INT = -1

# Attributes the marks leave on a tensor: {dim: (min, max)} and {dim}.
_DYNAMIC_ATTR = "_ember_dynamic_dims"
_STATIC_ATTR = "_ember_static_dims"


def mark_dynamic(
    t: torch.Tensor,
    dim: int | Iterable[int],
    *,
    min: int | None = None,
    max: int | None = None,
) -> None:
    """Makes ``t``'s size at ``dim`` symbolic from the first compile that sees
    ``t`` (sizes 0 and 1 still specialize). ``min`` and ``max`` are recorded;
    ember does not guard on them yet."""
    marks = dict(getattr(t, _DYNAMIC_ATTR, {}))
    for d in [dim] if isinstance(dim, int) else dim:
        marks[d % t.dim()] = (min, max)
    setattr(t, _DYNAMIC_ATTR, marks)


def mark_static(t: torch.Tensor, dim: int | Iterable[int]) -> None:
    """Keeps ``t``'s size at ``dim`` fixed, whatever the policy says."""
    marks = set(getattr(t, _STATIC_ATTR, ()))
    marks.update(d % t.dim() for d in ([dim] if isinstance(dim, int) else dim))
    setattr(t, _STATIC_ATTR, marks)


def has_size_marks(values: object) -> bool:
    """Whether a tensor among ``values`` (in tuples, lists and dict values)
    carries a ``mark_dynamic`` or ``mark_static`` mark."""
    if isinstance(values, torch.Tensor):
        return hasattr(values, _DYNAMIC_ATTR) or hasattr(values, _STATIC_ATTR)
    if isinstance(values, (tuple, list)):
        return any(has_size_marks(v) for v in values)
    if isinstance(values, dict):
        return any(has_size_marks(v) for v in values.values())
    return False


class DynamicPolicy:
    """The policy of one compiled function (``dims`` is capture's DynamicDims).

    ``reasons`` says, in the user's names, which dims became symbolic and why;
    ``disabled`` why this function's sizes stay fixed from now on.
    """

    def __init__(
        self,
        mode: bool | None,
        reasons: list[str] | None = None,
        remembered: Remembered | None = None,
    ) -> None:
        self.mode = mode
        self.disabled: str | None = None
        self.reasons: list[str] = [] if reasons is None else reasons
        # each input's shape (an int argument's value) at the last capture
        self._shapes: dict[str, tuple[int, ...] | int] = {}
        self._automatic: dict[str, set[int]] | None = None  # read on first use
        # dims a compiled graph needed as numbers (``fix``), per input name
        self._fixed: dict[str, set[int]] = {}
        self._remembered = remembered

    @property
    def active(self) -> bool:
        return self.mode is not False and self.disabled is None

    def dims(self, source: ember_capture.Source, t: torch.Tensor | int) -> list[int]:
        """The dims of the tensor read from ``source`` that are symbols; for an
        int (an argument, or a plain object's attribute), ``[0]`` when the int
        is a symbol."""
        name = source.name()
        if not isinstance(t, torch.Tensor):
            return self._int_dims(name, t, _is_attribute(source))
        marked = set(getattr(t, _DYNAMIC_ATTR, {}))
        dims = set(marked)
        if name not in self._shapes:
            for d in sorted(marked):
                self._note(f"{name}.size({d}) is dynamic: marked with mark_dynamic")
        state = isinstance(t, torch.nn.Parameter) or _reads_state(source)
        if self.mode is True and not state:
            dims.update(range(t.dim()))
        before = self._shapes.get(name)
        self._shapes[name] = tuple(t.shape)
        if self.mode is None:
            automatic = self._automatic_dims().setdefault(name, set())
            # (a source that held an int before is new as a tensor)
            if isinstance(before, tuple) and len(before) == t.dim():
                new = (
                    {d for d, (a, b) in enumerate(zip(before, t.shape)) if a != b}
                    - automatic
                    - marked
                )
                for d in sorted(new):
                    self._note(
                        f"{name}.size({d}) is dynamic: it was {before[d]}, "
                        f"now {t.shape[d]}"
                    )
                if new:
                    automatic |= new
                    if self._remembered is not None:
                        self._remembered.save(self._automatic)
            dims |= automatic
        # (a source read before with another rank may name dims it has not)
        dims = {d for d in dims if 0 <= d < t.dim()} - self._fixed.get(name, set())
        return sorted(dims - set(getattr(t, _STATIC_ATTR, ())))

    def _int_dims(self, name: str, value: int, attribute: bool) -> list[int]:
        """An integer argument: a symbol under ``dynamic=True``, or after its
        value changed once (automatic). An int attribute of an object (a KV
        cache's token count) only ever becomes one automatically: under
        ``dynamic=True`` too, the ints of a config object stay constants."""
        if self.mode is False or _INT in self._fixed.get(name, ()):
            return []
        if self.mode is True and not attribute:
            return [0]
        before = self._shapes.get(name)
        self._shapes[name] = value
        automatic = self._automatic_dims().setdefault(name, set())
        if not automatic and isinstance(before, int) and before != value:
            self._note(f"{name} is dynamic: it was {before}, now {value}")
            automatic.add(_INT)
            if self._remembered is not None:
                self._remembered.save(self._automatic)
        return [0] if automatic else []

    def recall(self) -> None:
        """Reads the dims an earlier run found dynamic, noting why, as the
        first capture would (a saved entry served the call instead)."""
        if self.mode is None:
            self._automatic_dims()

    def _automatic_dims(self) -> dict[str, set[int]]:
        if self._automatic is None:
            stored = self._remembered.load() if self._remembered else {}
            for name, dims in sorted(stored.items()):
                for d in sorted(dims):
                    what = name if d == _INT else f"{name}.size({d})"
                    self._note(
                        f"{what} is dynamic: it changed in an earlier run "
                        "(remembered in the cache)"
                    )
            self._automatic = stored
        return self._automatic

    def _note(self, reason: str) -> None:
        self.reasons.append(reason)
        log.info("%s", reason)

    def disable(self, reason: str) -> None:
        self.disabled = reason
        self._note(f"sizes stay fixed: {reason}")

    def fix(self, name: str, dim: int | None, reason: str) -> None:
        """Keep one size fixed from now on: the dim ``dim`` of the input read
        as ``name`` (None: the integer ``name`` itself)."""
        self._fixed.setdefault(name, set()).add(_INT if dim is None else dim)
        what = name if dim is None else f"{name}.size({dim})"
        self._note(f"{what} stays fixed: {reason}")


def _is_attribute(source: ember_capture.Source) -> bool:
    """Whether ``source`` reads an attribute (capture offers an int attribute
    only of a plain object), not an argument or an item of one."""
    return isinstance(source, ember_capture.AttrSource)


def _reads_state(source: ember_capture.Source) -> bool:
    """Whether ``source`` reads a module's state: through ``_buffers`` or
    ``_parameters`` (``L['self']._buffers['running_mean']``), or an attribute
    of ``self`` (a method's module). ``dynamic=True`` keeps its sizes; a tensor
    in an argument's attribute (``batch.xs[0]``) is data, and gets symbols."""
    through_attr = False
    while source is not None:
        if isinstance(source, ember_capture.AttrSource):
            if source.attr in ("_buffers", "_parameters"):
                return True
            through_attr = True
        if isinstance(source, ember_capture.LocalSource):
            return through_attr and source.local == "self"
        source = getattr(source, "base", None)
    return False


class Remembered:
    """A function's automatic dynamic dims as the disk cache keeps them."""

    def __init__(self, cache: DynamicDimsCache, fn: types.FunctionType) -> None:
        self.cache, self.fn = cache, fn

    def load(self) -> dict[str, set[int]]:
        return self.cache.load(self.fn)

    def save(self, dims: dict[str, set[int]]) -> None:
        self.cache.save(self.fn, dims)


class LazyProvider(types.ModuleType):
    """``ember_aotgrad.symbolic``, imported when capture first makes a symbol
    (it imports sympy: a program with fixed sizes does not pay for it)."""

    def __init__(self) -> None:
        super().__init__("ember_aotgrad.symbolic (lazy)")

    def __getattr__(self, name: str) -> object:
        module = importlib.import_module("ember_aotgrad.symbolic")
        return getattr(module, name)


SHAPES = LazyProvider()

"""Sources: where a value captured from the user's frame lives.

A source is a small frozen tree (local, global, closure cell, attribute, item) that
prints itself as the user would write it (``L['self'].layers[0].weight``) for guards
and messages, and as a plain Python expression for the transformed code.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from .checks import MODULES_NAME

# The closure cell through which transformed code reads the function's globals.
GLOBALS_CELL = "__ember_G"
# The closure cell holding the function that turns a float into a graph input.
FLOAT_TENSOR_CELL = "__ember_float_tensor"
# The closure cell holding sys.modules, where an import inside the code looks.
MODULES_CELL = "__ember_modules"


# ``L['x']``, ``G['x']``, ``C['x']`` in the guard form: the user wrote ``x``.
_FRAME_NAME = re.compile(r"\b([LGC])\['([A-Za-z_]\w*)'\]")
# What a resume function receives in place of the values on the stack at a break.
_RESUME_ARG = re.compile(r"\b___(stack\d+|call_result)\b")


def _describe_resume_arg(match: re.Match) -> str:
    if match.group(1) == "call_result":
        return "(the result of the call that broke the graph)"
    return "(a value computed before the graph break)"


class Source:
    """Base of the source tree. Subclasses are frozen dataclasses; the fields
    that are sources are its children, which its ``expr`` reads first."""

    # False where ``expr`` puts the children inside a comprehension, where
    # Python forbids an assignment expression (see SharedReads).
    binds_inside = True

    def name(self) -> str:
        """The guard form: ``L['x']``, ``G['w']``, ``L['self'].weight``."""
        raise NotImplementedError

    def code(self) -> str:
        """The expression that reads the value inside the transformed function."""
        raise NotImplementedError

    def expr(self) -> str:
        """What guard checks evaluate (over L, G, C): the guard form, except that
        nn.Module entries are read from the module's own tables, which is faster."""
        return self.name()

    def user_name(self) -> str:
        """The form for messages, in the user's own names: ``self.layers[0]``,
        ``w``; a value a resume function received is named for what it is."""
        text = _FRAME_NAME.sub(lambda m: m.group(2), self.name())
        return _RESUME_ARG.sub(_describe_resume_arg, text)

    def __str__(self) -> str:
        return self.name()


@dataclass(frozen=True, slots=True)
class LocalSource(Source):
    local: str

    def name(self) -> str:
        return f"L[{self.local!r}]"

    def code(self) -> str:
        return self.local


@dataclass(frozen=True, slots=True)
class GlobalSource(Source):
    global_name: str

    def name(self) -> str:
        return f"G[{self.global_name!r}]"

    def code(self) -> str:
        # Through the globals dict: a parameter of the same name may shadow it.
        return f"{GLOBALS_CELL}[{self.global_name!r}]"


@dataclass(frozen=True, slots=True)
class GlobalsSource(Source):
    """The globals dict of the compiled function itself."""

    def name(self) -> str:
        return "G"

    def code(self) -> str:
        return GLOBALS_CELL


@dataclass(frozen=True, slots=True)
class ImportSource(Source):
    """A module as an import statement in the code finds it: ``sys.modules``'
    entry (capture follows only imports of modules already imported)."""

    module: str

    def name(self) -> str:
        return f"sys.modules[{self.module!r}]"

    def code(self) -> str:
        return f"{MODULES_CELL}[{self.module!r}]"

    def expr(self) -> str:
        return f"{MODULES_NAME}[{self.module!r}]"


@dataclass(frozen=True, slots=True)
class EnvironSource(Source):
    """An environment variable as ``os.environ.get`` reads it (None if unset)."""

    variable: str

    def name(self) -> str:
        return f"os.environ.get({self.variable!r})"

    def code(self) -> str:
        return f"{MODULES_CELL}['os'].environ.get({self.variable!r})"

    def expr(self) -> str:
        return f"{MODULES_NAME}['os'].environ.get({self.variable!r})"


@dataclass(frozen=True, slots=True)
class FloatTensorSource(Source):
    """A float argument, passed to a graph as a 0-d float64 tensor (read only
    by the transformed function; its guards are on ``base``)."""

    base: Source

    def name(self) -> str:
        return f"{self.base.name()} as a tensor"

    def code(self) -> str:
        return f"{FLOAT_TENSOR_CELL}({self.base.code()})"


@dataclass(frozen=True, slots=True)
class ClosureSource(Source):
    """A free variable of the function: read through its cell."""

    cell_name: str

    def name(self) -> str:
        return f"C[{self.cell_name!r}]"

    def code(self) -> str:
        return self.cell_name


@dataclass(frozen=True, slots=True)
class AttrSource(Source):
    base: Source
    attr: str

    def name(self) -> str:
        return f"{self.base.name()}.{self.attr}"

    def code(self) -> str:
        return f"{self.base.code()}.{self.attr}"

    def expr(self) -> str:
        return f"{self.base.expr()}.{self.attr}"


@dataclass(frozen=True, slots=True)
class ItemSource(Source):
    """``base[index]`` for a constant index: a literal, or a class (a dict keyed
    by types); ``index_text`` says which indices can be written."""

    base: Source
    index: object

    def name(self) -> str:
        index = self.index
        shown = index.__qualname__ if isinstance(index, type) else repr(index)
        return f"{self.base.name()}[{shown}]"

    def code(self) -> str:
        return f"{self.base.code()}[{index_text(self.index, MODULES_CELL)}]"

    def expr(self) -> str:
        return f"{self.base.expr()}[{index_text(self.index, MODULES_NAME)}]"


def key_text(key: object) -> str:
    """How a message names a dict key no literal names: a tensor by its type
    and size (its repr would print its data)."""
    if isinstance(key, torch.Tensor):
        return f"<{type(key).__name__} of size {list(key.shape)}>"
    return repr(key)


def index_text(index: object, modules: str) -> str | None:
    """Python for a constant index: its literal, or a class read from the module
    that defines it (``modules`` names sys.modules there); None when neither
    reads back as the same object."""
    if isinstance(index, tuple):
        items = [index_text(i, modules) for i in index]
        if None in items:
            return None
        return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
    if type(index) in (str, int, bool, bytes, type(None)) or (
        type(index) is float and math.isfinite(index)
    ):
        return repr(index)
    if isinstance(index, type) and "<" not in index.__qualname__:
        found = sys.modules.get(index.__module__)
        for part in index.__qualname__.split("."):
            found = getattr(found, part, None)
        if found is index:
            return f"{modules}[{index.__module__!r}].{index.__qualname__}"
    return None


@dataclass(frozen=True, slots=True)
class LenSource(Source):
    """``len(base)``: the length of a list or tuple read from the frame."""

    base: Source

    def name(self) -> str:
        return f"len({self.base.name()})"

    def code(self) -> str:
        return f"len({self.base.code()})"

    def expr(self) -> str:
        return f"len({self.base.expr()})"


@dataclass(frozen=True, slots=True)
class KeysSource(Source):
    """``list(base)``: the keys of a dict read from the frame, in order."""

    base: Source

    def name(self) -> str:
        return f"list({self.base.name()})"

    def code(self) -> str:
        return f"list({self.base.code()})"

    def expr(self) -> str:
        return f"list({self.base.expr()})"


@dataclass(frozen=True, slots=True)
class KeyedSource(Source):
    """``base[key]`` for a key read from another source: a dict keyed by
    tensors (an optimizer's state), looked up by the parameter itself."""

    base: Source
    key: Source

    def name(self) -> str:
        return f"{self.base.name()}[{self.key.name()}]"

    def code(self) -> str:
        return f"{self.base.code()}[{self.key.code()}]"

    def expr(self) -> str:
        return f"{self.base.expr()}[{self.key.expr()}]"


@dataclass(frozen=True, slots=True)
class ReferentSource(Source):
    """``base()``: the object a weak reference read from ``base`` refers to."""

    base: Source

    def name(self) -> str:
        return f"{self.base.name()}()"

    def code(self) -> str:
        return f"{self.base.code()}()"

    def expr(self) -> str:
        return f"{self.base.expr()}()"


@dataclass(frozen=True, slots=True)
class KeySource(Source):
    """``list(base)[position]``: a key of a dict read from the frame (a tensor
    key, which no literal names)."""

    base: Source
    position: int

    def name(self) -> str:
        return f"list({self.base.name()})[{self.position}]"

    def code(self) -> str:
        return f"list({self.base.code()})[{self.position}]"

    def expr(self) -> str:
        return f"list({self.base.expr()})[{self.position}]"


@dataclass(frozen=True, slots=True)
class ContextVarSource(Source):
    """``base.get()`` (or ``base.get(default)``): a ContextVar's value now."""

    base: Source
    default: object = None
    has_default: bool = False

    def _call(self) -> str:
        return f"get({self.default!r})" if self.has_default else "get()"

    def name(self) -> str:
        return f"{self.base.name()}.{self._call()}"

    def code(self) -> str:
        return f"{self.base.code()}.{self._call()}"

    def expr(self) -> str:
        return f"{self.base.expr()}.{self._call()}"


@dataclass(frozen=True, slots=True)
class EntrySource(Source):
    """The value at ``position`` of a dict read from the frame whose keys are
    guarded in order: for a key no Python literal names (``typing.Union``)."""

    base: Source
    position: int
    key: object

    def name(self) -> str:
        return f"{self.base.name()}[{key_text(self.key)}]"

    def code(self) -> str:
        return f"list({self.base.code()}.values())[{self.position}]"

    def expr(self) -> str:
        return f"list({self.base.expr()}.values())[{self.position}]"


@dataclass(frozen=True, slots=True)
class BuiltinDictSource(Source):
    """What ``dict``'s own methods see of a dict subclass: its keys (``key`` is
    None) or the entry under ``key``, read past the subclass's overrides."""

    base: Source
    key: object = None

    def _read(self, base: str) -> str:
        if self.key is None:
            return f"list(dict.keys({base}))"
        return f"dict.__getitem__({base}, {self.key!r})"

    def name(self) -> str:
        return self._read(self.base.name())

    def code(self) -> str:
        return self._read(self.base.code())

    def expr(self) -> str:
        return self._read(self.base.expr())


@dataclass(frozen=True, slots=True)
class ModuleEntrySource(Source):
    """A parameter, buffer or submodule registered on an nn.Module: prints as the
    attribute (``L['self'].fc``) but is read from ``_modules['fc']`` and friends,
    skipping nn.Module.__getattr__. nn.Module keeps these names out of __dict__."""

    base: Source
    table: str  # "_parameters", "_buffers" or "_modules"
    key: str

    def name(self) -> str:
        if self.key.isidentifier():
            return f"{self.base.name()}.{self.key}"
        return f"{self.base.name()}[{self.key!r}]"

    def code(self) -> str:
        return f"{self.base.code()}.{self.table}[{self.key!r}]"

    def expr(self) -> str:
        return f"{self.base.expr()}.{self.table}[{self.key!r}]"


@dataclass(frozen=True, slots=True)
class HasAttrSource(Source):
    """``hasattr(base, attr)``: guards that an attribute found missing stays so."""

    base: Source
    attr: str

    def name(self) -> str:
        return f"hasattr({self.base.name()}, {self.attr!r})"

    def code(self) -> str:
        return f"hasattr({self.base.code()}, {self.attr!r})"

    def expr(self) -> str:
        return f"hasattr({self.base.expr()}, {self.attr!r})"


@dataclass(frozen=True, slots=True)
class NamedMembersSource(Source):
    """The member names an nn.Module iteration method yields, in order."""

    base: Source
    method: str  # "named_parameters", "named_buffers", ...
    args: tuple = ()

    binds_inside = False

    def _call(self, base: str) -> str:
        args = ", ".join(repr(a) for a in self.args)
        return f"[n for n, _ in {base}.{self.method}({args})]"

    def name(self) -> str:
        return self._call(self.base.name())

    def code(self) -> str:
        return self._call(self.base.code())

    def expr(self) -> str:
        return self._call(self.base.expr())


@dataclass(frozen=True, slots=True)
class _Written(Source):
    """An expression already written, standing for a child source while its
    parent writes its own expression around it."""

    text: str

    def name(self) -> str:
        return self.text

    def expr(self) -> str:
        return self.text


def _children(source: Source) -> list[tuple[str, Source]]:
    return [
        (f.name, value)
        for f in dataclasses.fields(source)
        if isinstance(value := getattr(source, f.name), Source)
    ]


class SharedReads:
    """Guard expressions for reads made in one function body, left to right,
    that read each shared part once: ``L['self'].layers[0].weight`` and
    ``L['self'].layers[0].bias`` read ``L['self'].layers[0]`` into a local at the
    first (``(___s0 := ...)``) and from it at the second.

    ``reads`` lists every read in the order the body evaluates them, as many
    times as it evaluates each; ``expr`` must then be called in that same order.
    That order is the evaluation order only where every read before a read is
    evaluated whenever it is: true of an ``and`` chain (a false term ends it),
    a tuple display and a call's arguments, not of ``or`` or ``if``."""

    def __init__(self, reads: Iterable[Source]) -> None:
        counts: Counter[Source] = Counter()
        for source in reads:
            self._count(source, counts)
        self._shared = {s for s, n in counts.items() if n > 1}
        self._names: dict[Source, str] = {}

    def _count(self, source: Source, counts: Counter) -> None:
        if not _hashable(source):
            return
        counts[source] += 1
        for _, child in _children(source):
            self._count(child, counts)

    def expr(self, source: Source, bind: bool = True) -> str:
        """``source.expr()``, reading its shared parts from locals once stored."""
        if not _hashable(source):
            return source.expr()
        if source in self._names:
            return self._names[source]
        children = {
            field: _Written(self.expr(child, bind and source.binds_inside))
            for field, child in _children(source)
        }
        text = dataclasses.replace(source, **children).expr() if children else None
        text = source.expr() if text is None else text
        if not bind or source not in self._shared:
            return text
        name = self._names[source] = f"___s{len(self._names)}"
        return f"({name} := {text})"


def _hashable(source: Source) -> bool:
    """Whether ``source`` can be counted (a key it holds may be unhashable)."""
    try:
        hash(source)
    except TypeError:
        return False
    return True

"""One C++ library for many sizes of a graph: the number literals that differ
between two sizes' kernels become run-time values.

A graph with symbolic sizes is compiled again for each set of sizes
(``specialize.PerSizeGraph``), and its kernels come out the same but for the
numbers the sizes decide (loop bounds, strides, a mean's divisor). When two
sizes' sources differ only there, the kernels are built once as a *template*:
each such literal reads ``ember_k[j]`` (integers) or ``ember_f[j]`` (floating
point), two arrays every kernel of the template takes first, and each size runs
that one library with its own values. The template with a size's values is
exactly that size's source, so results are the same to the bit; a literal the
C++ needs at compile time (an array's length, a pragma's argument) is never
lifted, and sizes that differ there build their own library; numbers in
comments are not literals at all.
"""

from __future__ import annotations

import ctypes
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .. import KERNEL_BREAKS

# A number literal with its suffix, not a digit inside a name (``i0``,
# ``int64_t``); hexadecimal constants only occur in the preamble, which every
# size shares.
_NUMBER = re.compile(
    r"(?<![\w.])(?:\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+)(?:LL|f)?"
)
# A line whose numbers the compiler needs as written: a pragma, or a
# declaration whose brackets hold an array's length.
_FIXED_LINE = re.compile(r"\s*(?:#|(?:const\s+)?[\w:]+\s+\w+\[)")
TEMPLATE_PARAMS = (
    "const int64_t* __restrict__ ember_k, const double* __restrict__ ember_f, "
)
# A comment to the end of its line, but the line the build splits units at.
_COMMENT = re.compile(r"//(?!" + re.escape(KERNEL_BREAKS["cpp"][2:]) + r"$).*$", re.M)
# A float32 constant is written ``0.03125f`` when exact and
# ``static_cast<float>(0.1)`` when not: the same kind of literal either way.
_FLOAT_CAST = re.compile(r"static_cast<float>\(#\)")
_CAST_LIFTED = re.compile(r"static_cast<float>\(double\((ember_lf\d+)\)\)")


@dataclass(frozen=True)
class Literals:
    """The number literals of a C++ source: their spans, and the indices of
    those the compiler needs as written (``fixed``)."""

    source: str
    spans: tuple[tuple[int, int], ...]
    fixed: frozenset[int]

    @functools.cached_property
    def skeleton(self) -> tuple[str, tuple[str, ...]]:
        """The source without comments and with every number blanked, and the
        numbers the compiler needs as written: sources with the same skeleton
        differ only in literals a template can lift. (Comments name the
        user's lines, which change when the code moves.)"""
        code = _FLOAT_CAST.sub("#", _NUMBER.sub("#", _COMMENT.sub("", self.source)))
        return code, tuple(self.text(i) for i in sorted(self.fixed))

    def text(self, i: int) -> str:
        start, end = self.spans[i]
        return self.source[start:end]


def find_literals(source: str) -> Literals:
    """The number literals of ``source`` outside comments (a comment names
    the user's lines, and a moved program's comments change)."""
    spans, fixed = [], set()
    line_end, free, comment = -1, (0, 0), 0
    for match in _NUMBER.finditer(source):
        start = match.start()
        if start > line_end:  # a new line
            line_start = source.rfind("\n", 0, start) + 1
            line_end = source.find("\n", start)
            line_end = len(source) if line_end < 0 else line_end
            line = source[line_start:line_end]
            found = line.find("//")
            comment = line_start + found if found >= 0 else line_end
            free = _free_span(line, line_start, comment)
        if start >= comment:
            continue
        if not free[0] <= start < free[1]:
            fixed.add(len(spans))
        spans.append(match.span())
    return Literals(source, tuple(spans), frozenset(fixed))


def _free_span(line: str, at: int, comment: int) -> tuple[int, int]:
    """Where on ``line`` (starting at offset ``at``) numbers may be lifted: the
    code before ``comment``; in a pragma only its ``if(...)`` clause (a run-time
    condition); nowhere in an array declaration."""
    if line.lstrip().startswith("#pragma") and " if(" in line:
        return at + line.index(" if("), at + len(line)
    if _FIXED_LINE.match(line):
        return at, at
    return at, comment


def template(literals: Literals, lifted: Sequence[int]) -> str:
    """The source with the literals at ``lifted`` read at run time, in that
    order, from ``ember_k`` (integers) and ``ember_f`` (floating point), two
    arrays every kernel takes first. Each kernel copies the values it uses into
    local constants on entry (``ember_lk3``): the compiler then knows no store
    of the kernel changes them, and keeps them out of its loops. Comments are
    left out: every size of a skeleton writes the same template."""
    parts, at, ints, floats = [], 0, 0, 0
    source = literals.source
    for i in sorted(lifted):
        start, end = literals.spans[i]
        token = source[start:end]
        if _is_float(token):
            cast = "float" if token.endswith("f") else "double"
            read = f"{cast}(ember_lf{floats})"
            floats += 1
        else:
            read = f"ember_lk{ints}"
            ints += 1
        parts += [source[at:start], read]
        at = end
    parts.append(source[at:])
    code = _CAST_LIFTED.sub(r"float(\1)", _COMMENT.sub("", "".join(parts)))
    return _KERNEL_BODY.sub(_with_locals, code)


# A kernel's definition: its signature's opening, and its body up to the
# closing brace at the start of a line.
_KERNEL_BODY = re.compile(r'(extern "C" \w+ \w+\()(.*?\) \{\n)(.*?\n\}\n)', re.DOTALL)
_LIFTED_NAME = re.compile(r"\bember_l([kf])(\d+)\b")


def _with_locals(match: re.Match) -> str:
    head, signature, body = match.groups()
    used = sorted(set(_LIFTED_NAME.findall(body)), key=lambda n: (n[0], int(n[1])))
    local = [
        f"  const {'int64_t' if kind == 'k' else 'double'} ember_l{kind}{j} = "
        f"ember_{kind}[{j}];\n"
        for kind, j in used
    ]
    return head + TEMPLATE_PARAMS + signature + "".join(local) + body


def values(literals: Literals, lifted: Sequence[int]) -> tuple[list[int], list[float]]:
    """This source's values of the lifted literals, as ``template`` reads them."""
    ints, floats = [], []
    for i in sorted(lifted):
        token = literals.text(i)
        if _is_float(token):
            floats.append(float(token.rstrip("f")))
        else:
            ints.append(int(token.removesuffix("LL")))
    return ints, floats


def _is_float(token: str) -> bool:
    return "." in token or "e" in token or "E" in token or token.endswith("f")


def bind(fn: Callable, ints: list[int], floats: list[float]) -> Callable:
    """A template kernel with this size's values bound as its first two
    arguments (the arrays live as long as the returned callable)."""
    k = (ctypes.c_int64 * max(len(ints), 1))(*ints)
    f = (ctypes.c_double * max(len(floats), 1))(*floats)
    bound = functools.partial(fn, ctypes.addressof(k), ctypes.addressof(f))
    bound.arrays = (k, f)
    return bound


@dataclass
class Templates:
    """For one graph's sizes: per skeleton, the first source seen and the
    literals lifted so far. ``choose`` picks a new size's lifted literals: those
    that differ from the first source, together with every one lifted before,
    so the sizes of one skeleton share one template (and one library)."""

    seen: dict[tuple, tuple[Literals, frozenset[int]]] = field(default_factory=dict)
    # Skeletons whose template did not build: their sizes build as they are.
    refused: set[tuple] = field(default_factory=set)

    def choose(self, source: str) -> tuple[int, ...]:
        """The literals of ``source`` to lift (none: build it as it is)."""
        literals = find_literals(source)
        known = self.seen.get(literals.skeleton)
        if known is None:
            self.seen[literals.skeleton] = (literals, frozenset())
            return ()
        if literals.skeleton in self.refused:
            return ()
        first, lifted = known
        differ = {
            i for i in range(len(literals.spans)) if literals.text(i) != first.text(i)
        }
        if not differ:
            return tuple(sorted(lifted))  # the first source's own values
        lifted = lifted | differ
        self.seen[literals.skeleton] = (first, lifted)
        return tuple(sorted(lifted))

    def refuse(self, source: str) -> None:
        """The template of ``source``'s skeleton failed to build: build its
        sizes as they are from now on."""
        self.refused.add(find_literals(source).skeleton)

    def remember(self, source: str, lifted: Sequence[int]) -> None:
        """Take in a compile made elsewhere (loaded from bytes)."""
        literals = find_literals(source)
        first, known = self.seen.get(literals.skeleton, (literals, frozenset()))
        self.seen[literals.skeleton] = (first, known | frozenset(lifted))

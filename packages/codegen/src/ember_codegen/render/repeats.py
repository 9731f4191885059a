"""Kernels that repeat within a graph, as a model's layers do: each loop target
writes a repeated kernel as a use of the first one, so its compiler sees the
loops once. This module holds the test for "the same kernel", shared by the
targets."""

from __future__ import annotations

import re
from collections.abc import Iterable

_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def canonical(text: str, names: Iterable[str], comment: str | None = None) -> str:
    """``text`` without its comments (lines' tails from ``comment``, if given), each of
    ``names`` (the kernel's own, its buffers' and parameters') and every
    identifier made from one (``buf3_acc``) numbered in order of first use.
    Kernels with equal forms compute the same function of their arguments in
    order: their code differs only in what their buffers are called."""
    names = set(names)
    numbers: dict[str, int] = {}

    def owner(token: str) -> str | None:
        """The longest name the token is, or starts with before an underscore."""
        if token in names:
            return token
        cut = token.rfind("_")
        while cut > 0:
            if token[:cut] in names:
                return token[:cut]
            cut = token.rfind("_", 0, cut)
        return None

    def number(match: re.Match) -> str:
        token = match.group(0)
        name = owner(token)
        if name is None:
            return token
        return f"@{numbers.setdefault(name, len(numbers))}{token[len(name) :]}"

    if comment is not None:
        text = "\n".join(line.split(comment)[0].rstrip() for line in text.split("\n"))
    return _IDENTIFIER.sub(number, text)

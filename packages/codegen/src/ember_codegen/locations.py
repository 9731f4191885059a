"""The user's source locations (``file:line``, from ``node.meta["user_loc"]``) that
generated code names in its comments, and rewriting them, so that a compiled graph
stored for code that has since moved names where the code is now.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch.fx


def graph_locations(gm: torch.fx.GraphModule) -> tuple[str, ...]:
    """The distinct ``user_loc`` values of ``gm``'s nodes, in graph order."""
    found = (node.meta.get("user_loc") for node in gm.graph.nodes)
    return tuple(dict.fromkeys(loc for loc in found if loc))


def replace_locations(text: str, new: Mapping[str, str]) -> str:
    """``text`` with each location in ``new`` replaced by its value, in one pass.

    A location is matched whole: the longer of two that share a start wins, and
    one is never matched as the start of a longer line number (``model.py:3``
    inside ``model.py:30``). Locations that stay where they were are left
    out of the pattern (a cache hit of unmoved code changes nothing)."""
    new = {old: loc for old, loc in new.items() if old != loc}
    if not new:
        return text
    names = sorted(new, key=len, reverse=True)
    pattern = "|".join(map(re.escape, names))
    return re.sub(f"(?:{pattern})(?![0-9])", lambda m: new[m.group(0)], text)


def relocate_graph(gm: torch.fx.GraphModule, new: Mapping[str, str]) -> None:
    """Rewrite each node's ``user_loc`` by ``new`` (see ``replace_locations``):
    a stored graph whose code has moved then compiles sources that name where
    the code is now."""
    for node in gm.graph.nodes:
        loc = node.meta.get("user_loc")
        if loc:
            node.meta["user_loc"] = replace_locations(loc, new)

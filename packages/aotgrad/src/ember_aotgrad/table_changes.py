"""What this process changed in the decomposition table, told without importing
the table: a cache key needs it on every compile, and loading a cached graph
must not pay for importing every rule (docs/architecture.md, "Import cost")."""

from __future__ import annotations

import sys


def decomposition_changes() -> tuple[str, ...]:
    """``op=module.qualname`` for each rule that is not aotgrad's own (registered
    by a user, or put in the table in place of ours) and ``op=removed`` for each
    built-in rule taken out, sorted; empty when the table was never imported in
    this process, as nothing can have changed it then."""
    table = sys.modules.get("ember_aotgrad.decompositions")
    if table is None:
        return ()
    rules, builtin = table.DECOMPOSITIONS, table.BUILTIN_RULES
    changes = [
        f"{op}={rule.__module__}.{rule.__qualname__}"
        for op, rule in rules.items()
        if builtin.get(op) is not rule
    ]
    changes += [f"{op}=removed" for op in builtin if op not in rules]
    return tuple(sorted(changes))

"""Running generated Python (a wrapper, a Triton module) under a file name of
its own in ``linecache``: tracebacks then show the generated lines, and
``triton.jit`` reads a kernel's source from there."""

from __future__ import annotations

import hashlib
import linecache


def run_source(source: str, namespace: dict, kind: str) -> dict:
    """Executes ``source`` in ``namespace`` (returned, filled) as the file
    ``<ember generated KIND DIGEST>``."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    filename = f"<ember generated {kind} {digest}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    return namespace

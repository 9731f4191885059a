"""Names of a package that load on first use (PEP 562), so that importing the
package imports none of its heavier modules (docs/architecture.md, "Import
cost")."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_names(
    package: str, exports: dict[str, str], namespace: dict
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: each name in ``exports``
    is imported from its module (``exports[name]``, relative to the package)
    when first read, and kept in ``namespace`` (the package's globals)."""

    def __getattr__(name: str) -> object:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(f"{package}.{exports[name]}")
        namespace[name] = value = getattr(module, name)
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__

"""ember's one configuration object: typed fields, environment overrides, options.

Precedence: ``options={...}`` passed to ember.compile, then environment variables,
then the defaults below. docs/configuration.md lists every field and variable.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ember"


@dataclass(frozen=True)
class Config:
    """Settings for one ``ember.compile`` call."""

    # Compiled entries kept per function before further misses run eagerly.
    recompile_limit: int = 8
    # Where on-disk artifacts (compiled kernels, cached graphs) are kept.
    cache_dir: Path = dataclasses.field(default_factory=_default_cache_dir)
    # codegen target for the "ember" backend: "auto" or one ember_codegen.TARGETS key.
    codegen_target: str = "auto"

    @classmethod
    def from_options(cls, options: dict[str, Any] | None = None) -> Config:
        """Defaults, then environment variables, then ``options``; validates keys."""
        values: dict[str, Any] = {}
        for name, (variable, parse) in ENVIRONMENT.items():
            if variable in os.environ:
                values[name] = parse(os.environ[variable])
        known = {f.name for f in dataclasses.fields(cls)}
        for key, value in (options or {}).items():
            if key not in known:
                valid = ", ".join(sorted(known))
                raise ValueError(
                    f"unknown ember option {key!r}; valid options: {valid}"
                )
            values[key] = Path(value) if key == "cache_dir" else value
        config = cls(**values)
        limit = config.recompile_limit
        if not isinstance(limit, int) or limit < 1:
            raise ValueError(f"recompile_limit must be a positive int, not {limit!r}")
        return config


# field -> (environment variable, parser)
ENVIRONMENT = {
    "recompile_limit": ("EMBER_RECOMPILE_LIMIT", int),
    "cache_dir": ("EMBER_CACHE_DIR", Path),
    "codegen_target": ("EMBER_CODEGEN_TARGET", str),
}

"""ember's one configuration object: typed fields, environment overrides, options.

Precedence: ``options={...}`` passed to ember.compile, then environment variables,
then the defaults below. docs/configuration.md lists every field and variable.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/ember, else ~/.cache/ember: the user's own cache, and
    where ember goes when the configured folder is not safe to use."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ember"


@dataclass(frozen=True)
class Config:
    """Settings for one ``ember.compile`` call."""

    # Compiled entries kept per function before further misses run eagerly.
    recompile_limit: int = 8
    # Where on-disk artifacts (compiled kernels, cached graphs) are kept.
    cache_dir: Path = dataclasses.field(default_factory=default_cache_dir)
    # A team's shared secret (at least 16 characters), or a file holding it:
    # with one, cache_dir may be a folder the team's group can write, and only
    # entries tagged with the secret are loaded (docs/security.md).
    cache_key: str | None = dataclasses.field(default=None, repr=False)
    cache_key_file: Path | None = None
    # codegen target for the "ember" backend: "auto" or one ember_codegen.TARGETS key.
    codegen_target: str = "auto"
    # Triton kernels time a few launch configurations at their first launch
    # and keep the fastest on disk (mode="max-autotune" sets it).
    autotune: bool = False
    # A graph with symbolic sizes compiles a new set of sizes at its call
    # number this; the calls before run the graph through torch (each length
    # of a generate with a growing cache is called once: docs/dynamic.md).
    compile_new_sizes_after: int = 2

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
            values[key] = Path(value) if key in _PATHS and value else value
        config = cls(**values)
        for name in ("recompile_limit", "compile_new_sizes_after"):
            value = getattr(config, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, not {value!r}")
        config.shared_key()  # a key that cannot be used fails here, not mid-call
        return config

    def shared_key(self) -> bytes | None:
        """The team's secret from ``cache_key`` or ``cache_key_file``, or None.
        Raises ValueError for one too short to resist guessing, and for a key
        file that other users could read or write."""
        if self.cache_key is not None and self.cache_key_file is not None:
            raise ValueError("set cache_key or cache_key_file, not both")
        if self.cache_key_file is not None:
            key = _read_key_file(self.cache_key_file)
            where = f"the key file {self.cache_key_file}"
        elif self.cache_key:
            key, where = self.cache_key.encode(), "EMBER_CACHE_KEY"
        else:
            return None
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(
                f"{where} holds {len(key)} bytes; a cache key needs at least "
                f"{MIN_KEY_BYTES} (for example: python -c 'import secrets; "
                f"print(secrets.token_hex(32))')"
            )
        return key


MIN_KEY_BYTES = 16


def _read_key_file(path: Path) -> bytes:
    try:
        mode = path.stat().st_mode
        key = path.read_bytes().strip()
    except OSError as e:
        raise ValueError(f"the cache key file {path} cannot be read: {e}") from e
    if mode & (stat.S_IROTH | stat.S_IWOTH):
        raise ValueError(
            f"the cache key file {path} can be read or written by every user; "
            f"make it private to its owner and group (chmod o-rw {path})"
        )
    return key


_PATHS = ("cache_dir", "cache_key_file")

# field -> (environment variable, parser)
ENVIRONMENT = {
    "recompile_limit": ("EMBER_RECOMPILE_LIMIT", int),
    "cache_dir": ("EMBER_CACHE_DIR", Path),
    "cache_key": ("EMBER_CACHE_KEY", str),
    "cache_key_file": ("EMBER_CACHE_KEY_FILE", Path),
    "codegen_target": ("EMBER_CODEGEN_TARGET", str),
    "compile_new_sizes_after": ("EMBER_COMPILE_NEW_SIZES_AFTER", int),
}

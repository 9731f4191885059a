"""ember-runtime: what every compiled call goes through.

``Dispatcher(fn, convert)`` checks guards, runs the matching entry, converts on a
miss and keeps counters and recompile reasons; ``compile_guards`` turns a GuardSpec
into a fast check (C++ when built); ``ArtifactStore`` keeps compiled artifacts on
disk across processes, in a folder ``open_cache`` vetted (``CacheTrust``: the
trust rules and the entries' tags). See docs/runtime.md and docs/security.md.
"""

from .counters import Counters
from .dispatcher import (
    Dispatcher,
    Entry,
    Fallback,
    GuardedEntry,
    binder,
    user_stacklevel,
)
from .guards import (
    GuardCheck,
    GuardSpec,
    TensorCheck,
    compile_guards,
    native_available,
)
from .stance import RecompileError, Stance, eagerly, get_stance, set_stance
from .store import ArtifactStore, cache_key, compiler_version, environment_versions
from .trust import CacheTrust, UnsafeFolder, open_cache

__version__ = "0.2.0"

__all__ = [
    "ArtifactStore",
    "CacheTrust",
    "Counters",
    "Dispatcher",
    "Entry",
    "Fallback",
    "GuardCheck",
    "GuardSpec",
    "GuardedEntry",
    "RecompileError",
    "Stance",
    "TensorCheck",
    "UnsafeFolder",
    "binder",
    "cache_key",
    "compile_guards",
    "compiler_version",
    "eagerly",
    "environment_versions",
    "get_stance",
    "native_available",
    "open_cache",
    "set_stance",
    "user_stacklevel",
]

"""ember-runtime: what every compiled call goes through.

``Dispatcher(fn, convert)`` checks guards, runs the matching entry, converts on a
miss and keeps counters and recompile reasons; ``compile_guards`` turns a GuardSpec
into a fast check (C++ when built); ``ArtifactStore`` keeps compiled artifacts on
disk across processes. See docs/runtime.md.
"""

from .counters import Counters
from .dispatcher import Dispatcher, Entry, Fallback, GuardedEntry, user_stacklevel
from .guards import (
    GuardCheck,
    GuardSpec,
    TensorCheck,
    compile_guards,
    native_available,
)
from .store import ArtifactStore, cache_key, compiler_version, environment_versions

__version__ = "0.2.0"

__all__ = [
    "ArtifactStore",
    "Counters",
    "Dispatcher",
    "Entry",
    "Fallback",
    "GuardCheck",
    "GuardSpec",
    "GuardedEntry",
    "TensorCheck",
    "cache_key",
    "compile_guards",
    "compiler_version",
    "environment_versions",
    "native_available",
    "user_stacklevel",
]

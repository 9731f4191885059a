"""ember-runtime: what every compiled call goes through.

``Dispatcher(fn, convert)`` checks guards, runs the matching entry, converts on a
miss and keeps counters and recompile reasons. See docs/runtime.md.
"""

from .dispatcher import Counters, Dispatcher, Entry, GuardedEntry, user_stacklevel

__version__ = "0.1.0"

__all__ = ["Counters", "Dispatcher", "Entry", "GuardedEntry", "user_stacklevel"]

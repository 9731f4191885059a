"""What ember tells the user: its log channels and the warnings it raises.

``ember.set_logs(graph_breaks=True, recompiles=True)`` or
``EMBER_LOGS="graph_breaks,recompiles"`` prints the named channels to stderr
(``+name`` for their DEBUG detail too, ``all`` for every channel). Each channel
is a logger of the stage that knows the thing it prints (docs/configuration.md).
"""

from __future__ import annotations

import logging
import os
import warnings

from ember_runtime import user_stacklevel

# channel -> logger. Names are torch's where the meaning is the same.
LOGGERS = {
    "graph": "ember.capture",  # each captured torch-level fx graph
    "graph_breaks": "ember.graph_breaks",  # each break: reason, user's file:line
    "recompiles": "ember.recompiles",  # each recompile, with the guard that failed
    "guards": "ember.guards",  # the guards of each new entry, as user expressions
    "aot_graphs": "ember.aotgrad",  # the forward and backward aten graphs
    "output_code": "ember.output_code",  # the wrapper and kernels codegen wrote
    "perf": "ember.perf",  # seconds per compile stage, cache hits and misses
    "dynamic": "ember.dynamic",  # which sizes became symbolic, and why
    "codegen": "ember.codegen",  # why a graph runs through torch, per-size compiles
    "kernel_cache": "ember.kernel_cache",  # C++ builds and kernel-cache reads
}
# Earlier names, still accepted.
ALIASES = {"aten": "aot_graphs"}

# Says how long a compile is taking (WARNING, so Python's last-resort handler
# prints it when nothing is configured); quiet it with
# logging.getLogger("ember").setLevel(logging.ERROR).
progress = logging.getLogger("ember.progress")


def set_logs(**enabled: bool | int) -> None:
    """Turn each named channel on (True: INFO, or a logging level such as
    ``logging.DEBUG``) or off (False). ``all=`` applies to every channel."""
    if "all" in enabled:
        value = enabled.pop("all")
        enabled = {name: value for name in LOGGERS} | enabled
    for name, on in enabled.items():
        name = ALIASES.get(name, name)
        if name not in LOGGERS:
            raise ValueError(f"unknown log {name!r}; valid logs: {_valid()}")
        logger = logging.getLogger(LOGGERS[name])
        if on is True:
            on = logging.INFO
        logger.setLevel(on if on else logging.WARNING)
        ours = [h for h in logger.handlers if isinstance(h, _Handler)]
        if on and not logger.handlers:
            handler = _Handler()
            handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
            logger.addHandler(handler)
            logger.propagate = False  # printed once, by this handler
        elif not on and ours:  # as it was before set_logs turned it on
            for handler in ours:
                logger.removeHandler(handler)
            logger.propagate = True


class _Handler(logging.StreamHandler):
    """The stderr handler set_logs adds (and removes when it turns a log off)."""


def apply_environment() -> None:
    """Turn on what EMBER_LOGS names (``+name``: with DEBUG detail); an
    unknown name warns instead of failing."""
    for item in os.environ.get("EMBER_LOGS", "").split(","):
        item = item.strip()
        name = item.lstrip("+")
        level = logging.DEBUG if item.startswith("+") else logging.INFO
        if name == "all" or ALIASES.get(name, name) in LOGGERS:
            set_logs(**{name: level})
        elif name:
            warnings.warn(
                f"EMBER_LOGS names unknown log {name!r}; valid logs: {_valid()}",
                stacklevel=2,
            )


def _valid() -> str:
    return ", ".join([*LOGGERS, "all"])


def warn_user(message: str) -> None:
    """A warning attributed to the user's code, not to ember's own frames."""
    warnings.warn(message, stacklevel=user_stacklevel())

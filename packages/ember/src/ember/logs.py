"""What ember tells the user: the stages' logs and the warnings it raises.

``ember.set_logs(graph=True, output_code=True)`` or EMBER_LOGS="graph,output_code"
prints them to stderr. Each stage logs to its own logger at DEBUG.
"""

from __future__ import annotations

import logging
import os
import warnings

from ember_runtime import user_stacklevel

LOGGERS = {
    "graph": "ember.capture",  # the torch-level fx graph of each capture
    "aten": "ember.aotgrad",  # the aten graph handed to the backend compiler
    "output_code": "ember.output_code",  # the code codegen generated
    "dynamic": "ember.dynamic",  # which sizes became symbolic, and why (INFO)
}


def set_logs(**enabled: bool) -> None:
    """Enable or disable each named log (keys of LOGGERS)."""
    for name, on in enabled.items():
        if name not in LOGGERS:
            raise ValueError(f"unknown log {name!r}; valid logs: {', '.join(LOGGERS)}")
        logger = logging.getLogger(LOGGERS[name])
        logger.setLevel(logging.DEBUG if on else logging.WARNING)
        if on and not logger.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
            logger.addHandler(handler)


def apply_environment() -> None:
    """Enable the logs EMBER_LOGS names; an unknown name warns instead of failing."""
    for name in os.environ.get("EMBER_LOGS", "").split(","):
        name = name.strip()
        if name in LOGGERS:
            set_logs(**{name: True})
        elif name:
            warnings.warn(
                f"EMBER_LOGS names unknown log {name!r}; valid logs: "
                f"{', '.join(LOGGERS)}",
                stacklevel=2,
            )


def warn_user(message: str) -> None:
    """A warning attributed to the user's code, not to ember's own frames."""
    warnings.warn(message, stacklevel=user_stacklevel())

"""The kinds of values capture tracks, each with its answers to the operations
in behaviour.py (attribute reads, calls, truth, iteration, items, rebuilding).

One module per family of kinds; importing this package registers them all. A new
kind is a class in variables.py and its answers here, next to each other.
"""

from . import (  # noqa: F401 - each module registers its kinds
    autograd_functions,
    backward,
    callables,
    checkpoints,
    containers,
    context_vars,
    contexts,
    environ,
    instances,
    loggers,
    mixins,
    model_output,
    new_objects,
    objects,
    protocols,
    sizes,
    tensors,
)

"""ember's own meta kernels for common aten ops at fixed sizes.

Most of torch's meta kernels are Python (refs and decompositions): slow per call,
and the first one to run imports torch's compiler frontend and sympy (0.7 s of a
process's first compile). These rules give the result eager gives
(sizes, strides, dtype) for the cases they know, and decline the rest, which run
torch's kernel as before. A result's dtype comes from running the op's C++ CPU
kernel on tensors of ones of the inputs' dtypes (a "probe"), so type promotion is
torch's own, op by op. One module per family; each registers its rules.
"""

from . import factories, nn, pointwise, products, reductions  # noqa: F401 (register)
from .registry import NOT_COVERED, RULES, Decline, MetaRulesMode, meta_result, meta_rule

__all__ = [
    "NOT_COVERED",
    "RULES",
    "Decline",
    "MetaRulesMode",
    "meta_result",
    "meta_rule",
]

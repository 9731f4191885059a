"""The base of aotgrad's __torch_dispatch__ modes.

torch wraps a TorchDispatchMode's ``__torch_dispatch__`` so that its own
compiler does not trace it; the wrapper imports that compiler's frontend on its
first call (0.5 s of a process's first compile). torch's compiler never runs
inside ember's tracing, so aotgrad's modes opt out of the wrapper.
"""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


class DispatchMode(TorchDispatchMode):
    """A TorchDispatchMode whose ``__torch_dispatch__`` runs as written."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

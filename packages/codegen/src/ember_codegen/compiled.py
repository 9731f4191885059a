"""CompiledGraph: the callable result of codegen, inspectable and storable.

It holds the generated source and everything needed to rebuild the callable from
bytes, so a cache can store ``to_bytes()`` and rebuild it with ``from_bytes``.
"""

from __future__ import annotations

import hashlib
import io
import linecache
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .wrapper import WRAPPER_GLOBALS

log = logging.getLogger("ember.output_code")

FORMAT_VERSION = 1


@dataclass(frozen=True, eq=False)
class CompiledGraph:
    """A compiled aten graph: ``compiled(*inputs)`` returns the flat output tuple.

    ``source`` is the generated code; ``fallback_ops`` the aten ops that run through
    torch's own kernels instead of generated code.
    """

    source: str
    target: str
    fallback_ops: tuple[str, ...]
    constants: dict[str, torch.Tensor] = field(default_factory=dict)
    _call: Callable = field(init=False, repr=False)

    def __post_init__(self) -> None:
        namespace = dict(WRAPPER_GLOBALS, **self.constants)
        digest = hashlib.sha256(self.source.encode()).hexdigest()[:12]
        filename = f"<ember generated wrapper {digest}>"
        lines = self.source.splitlines(True)
        linecache.cache[filename] = (len(self.source), None, lines, filename)
        exec(compile(self.source, filename, "exec"), namespace)
        object.__setattr__(self, "_call", namespace["call"])
        log.debug("generated code:\n%s", self.source)

    def __call__(self, *inputs: object) -> tuple:
        return self._call(*inputs)

    def to_bytes(self) -> bytes:
        """A self-contained serialized form; ``from_bytes`` rebuilds the callable."""
        buffer = io.BytesIO()
        torch.save(
            {
                "format": FORMAT_VERSION,
                "source": self.source,
                "target": self.target,
                "fallback_ops": list(self.fallback_ops),
                "constants": self.constants,
            },
            buffer,
        )
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> CompiledGraph:
        state = torch.load(io.BytesIO(data), weights_only=True)
        if state.get("format") != FORMAT_VERSION:
            raise ValueError(f"unsupported CompiledGraph format {state.get('format')}")
        return cls(
            state["source"],
            state["target"],
            tuple(state["fallback_ops"]),
            state["constants"],
        )

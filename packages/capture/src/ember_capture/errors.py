"""The error capture raises when it meets code it cannot put in a graph."""

from __future__ import annotations


class CaptureError(Exception):
    """A construct capture does not handle.

    ``reason`` names the construct, ``filename``/``lineno`` the user's code, and
    ``hint`` what the user can do. ``str()`` reads as one sentence for warnings.
    """

    def __init__(
        self,
        reason: str,
        filename: str | None = None,
        lineno: int | None = None,
        hint: str = "",
    ) -> None:
        self.reason = reason
        self.filename = filename
        self.lineno = lineno
        self.hint = hint
        # Set by the compiled frame's interpreter: its state before the failing
        # instruction, where a graph break can resume (a bytecode_interp.BreakPoint).
        self.break_point = None
        super().__init__(reason)

    @property
    def location(self) -> str:
        if self.filename is None:
            return "<unknown>"
        return f"{self.filename}:{self.lineno}"

    def __str__(self) -> str:
        text = f"{self.reason} at {self.location}"
        return f"{text}. {self.hint}" if self.hint else text

"""How messages name the functions capture writes: a resume function by the
user's function and the line it continues from. Kept apart from resume.py,
which builds them with the ``bytecode`` library, so naming costs no import."""

from __future__ import annotations

import re
import types


def original_name(name: str) -> str:
    """The user's function name, also for a resume function of a resume function."""
    match = re.fullmatch(r"__resume_(.+)_at_\d+", name)
    return (match.group(1) if match else name).replace("<", "").replace(">", "")


def user_function_name(code: types.CodeType) -> str:
    """How messages name ``code``: its own qualified name, or for a resume
    function, the user's function and the line it continues from."""
    match = re.fullmatch(r"__resume_(.+)_at_(\d+)", code.co_name)
    if match is None:
        return code.co_qualname
    return (
        f"{original_name(code.co_name)} (from line {match.group(2)}, "
        "after a graph break)"
    )

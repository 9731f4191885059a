"""The profile reports being filled: every CompiledGraph call reads this list
(empty when nothing profiles), so it lives apart from profile.py, which a
process that never profiles does not import."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .profile import ProfileReport

# The report the running ``profiling()`` block fills last (read by every
# CompiledGraph call: one global lookup when not profiling).
ACTIVE: list[ProfileReport] = []

"""Facts about the CPython bytecode capture reads: the versions it covers, the
conditional and backward jumps, and what the user wrote for the opcodes capture
does not handle. The opcode handlers themselves are in opcodes.py.
"""

from __future__ import annotations

import dis
import sys

# Python versions whose bytecode opcodes.py covers completely.
SUPPORTED_VERSIONS = ((3, 11),)


def supported() -> bool:
    """Whether this Python's bytecode is one capture reads."""
    return sys.version_info[:2] in SUPPORTED_VERSIONS


# Conditional jumps: (Python test on the value, pops the value when jumping).
CONDITIONAL_JUMPS = {
    "POP_JUMP_FORWARD_IF_TRUE": ("{}", True),
    "POP_JUMP_BACKWARD_IF_TRUE": ("{}", True),
    "POP_JUMP_FORWARD_IF_FALSE": ("not {}", True),
    "POP_JUMP_BACKWARD_IF_FALSE": ("not {}", True),
    "POP_JUMP_FORWARD_IF_NONE": ("{} is None", True),
    "POP_JUMP_BACKWARD_IF_NONE": ("{} is None", True),
    "POP_JUMP_FORWARD_IF_NOT_NONE": ("{} is not None", True),
    "POP_JUMP_BACKWARD_IF_NOT_NONE": ("{} is not None", True),
    "JUMP_IF_TRUE_OR_POP": ("{}", False),
    "JUMP_IF_FALSE_OR_POP": ("not {}", False),
}


def jumps_backward(inst: dis.Instruction) -> bool:
    """A loop's jump back (3.11 names them; a while loop tests its condition
    again at its bottom with a conditional one)."""
    return inst.opname.startswith(("JUMP_BACKWARD", "POP_JUMP_BACKWARD"))


# What the user wrote, for opcodes capture does not handle yet (by opname prefix).
_CONSTRUCTS = {
    "PUSH_EXC_INFO": "exception handling",
    "SEND": "yield from or await",
    "DELETE_DEREF": "deleting a variable",
    "DELETE_GLOBAL": "deleting a global variable",
    "RAISE_VARARGS": "raising an exception",
    "RERAISE": "raising an exception",
    "IMPORT_STAR": "import *",
    "LOAD_BUILD_CLASS": "defining a class",
    "GET_AWAITABLE": "async code",
    "BEFORE_ASYNC_WITH": "async code",
}


def describe_opcode(inst: dis.Instruction) -> str:
    """The construct an unhandled instruction belongs to, as the user wrote it."""
    arg = f" {inst.argrepr}" if inst.argrepr else ""
    for prefix, construct in _CONSTRUCTS.items():
        if inst.opname.startswith(prefix):
            return f"{construct} (bytecode {inst.opname})"
    return f"bytecode {inst.opname}{arg}"

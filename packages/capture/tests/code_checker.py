"""A structural checker for generated code objects: every reachable instruction is
entered with one stack depth, never below zero or above co_stacksize, and every
exception-table entry covers real instructions and targets one."""

import dis
import types

_UNCONDITIONAL = {
    "JUMP_FORWARD",
    "JUMP_BACKWARD",
    "JUMP_BACKWARD_NO_INTERRUPT",
}
_TERMINAL = {"RETURN_VALUE", "RAISE_VARARGS", "RERAISE"}


def check_code(code: types.CodeType) -> None:
    instructions = [i for i in dis.get_instructions(code)]
    by_offset = {i.offset: n for n, i in enumerate(instructions)}
    entries = dis.Bytecode(code).exception_entries
    for entry in entries:
        assert entry.start in by_offset, f"table start {entry.start} not an instruction"
        assert entry.target in by_offset, f"table target {entry.target} not one"
        assert entry.start < entry.end
    depth_at: dict[int, int] = {0: 0}
    work = [0]
    while work:
        n = work.pop()
        depth = depth_at[n]
        inst = instructions[n]
        for entry in entries:  # an exception here lands at the handler
            if entry.start <= inst.offset < entry.end:
                handler_depth = entry.depth + 1 + int(entry.lasti)
                _enter(depth_at, work, by_offset[entry.target], handler_depth)
        if inst.opname in _TERMINAL:
            continue
        successors = []
        if inst.opcode in dis.hasjrel or inst.opcode in dis.hasjabs:
            jumped = depth + dis.stack_effect(inst.opcode, inst.arg, jump=True)
            successors.append((by_offset[inst.argval], jumped))
            if inst.opname in _UNCONDITIONAL:
                _check_depth(code, inst, jumped)
                for target, d in successors:
                    _enter(depth_at, work, target, d)
                continue
        arg = inst.arg if inst.opcode >= dis.HAVE_ARGUMENT else None
        after = depth + dis.stack_effect(inst.opcode, arg, jump=False)
        successors.append((n + 1, after))
        for target, d in successors:
            _check_depth(code, inst, d)
            _enter(depth_at, work, target, d)


def _check_depth(code, inst, depth):
    assert 0 <= depth <= code.co_stacksize, (
        f"{code.co_name}: depth {depth} after {inst.opname} at {inst.offset} "
        f"(co_stacksize {code.co_stacksize})"
    )


def _enter(depth_at, work, target, depth):
    if target in depth_at:
        assert depth_at[target] == depth, (
            f"instruction {target} entered with depths {depth_at[target]} and {depth}"
        )
        return
    depth_at[target] = depth
    work.append(target)

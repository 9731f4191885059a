"""Triton source for the loop IR: one ``@triton.jit`` function per kernel.

A kernel runs one program per element of its outer loops (``Kernel.outer``;
one program when it has none). In a program each stage walks its inner
elements in blocks of at most ``BLOCK`` lanes, masked at the tail: a pointwise
stage stores its block, a reduction folds its blocks into one accumulator of
``BLOCK`` lanes and then into the program's value (the looped form; a
reduction that fits one block runs its loop once, the persistent form).
A scan gets one program per row, a scatter one program walking its source
in order (one that adds: atomic.py). Scalar ops map onto ``triton.language``;
those without a core function are helpers in ``preamble.py``, as libdevice is
not there under Triton's interpreter. What this target does not render yet (a
16-bit scatter's mean, ``pow`` of float64 values) raises ``Unsupported``, and
the graph then runs through torch.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import torch

from ...ir.indexing import Div, Index, Indirect, Mod, Var, render, var
from ...ir.nodes import (
    HALF_TYPES,
    Call,
    Const,
    Expr,
    IndexValue,
    Load,
    Pointwise,
    ReduceKind,
    Reduction,
    Scan,
    Scatter,
    describe_origin,
    exprs,
    loads,
    walk,
)
from ...scheduling.fusion import Kernel
from .. import Unsupported

# Lanes of one block: a stage's inner elements are walked this many at a time.
BLOCK = 1024


TL_TYPES: dict[torch.dtype, str] = {
    torch.float32: "tl.float32",
    torch.float64: "tl.float64",
    torch.int64: "tl.int64",
    torch.int32: "tl.int32",
    torch.bool: "tl.int1",
    torch.bfloat16: "tl.bfloat16",
    torch.float16: "tl.float16",
}

# Scalar ops as Python/Triton templates over the argument code {0}, {1}, ...
# and the result type {T}; "select" is rendered with masked branches.
SCALAR_OPS: dict[str, str] = {
    "add": "({0} + {1})",
    "sub": "({0} - {1})",
    "mul": "({0} * {1})",
    "div": "({0} / {1})",
    "neg": "(-{0})",
    "abs": "tl.abs({0})",
    "relu": "tl.where({0} < 0, 0, {0})",
    "exp": "tl.exp({0})",
    "log": "tl.log({0})",
    "sqrt": "tl.sqrt({0})",
    "rsqrt": "(1.0 / tl.sqrt({0}))",
    "reciprocal": "(1.0 / {0})",
    "sigmoid": "tl.sigmoid({0})",
    "tanh": "ember_tanh({0})",
    "sin": "tl.sin({0})",
    "cos": "tl.cos({0})",
    "tan": "ember_tan({0})",
    "asin": "ember_asin({0})",
    "acos": "ember_acos({0})",
    "atan": "ember_atan({0})",
    "sinh": "ember_sinh({0})",
    "cosh": "ember_cosh({0})",
    "asinh": "ember_asinh({0})",
    "acosh": "ember_acosh({0})",
    "atanh": "ember_atanh({0})",
    "log1p": "ember_log1p({0})",
    "expm1": "ember_expm1({0})",
    "atan2": "ember_atan2({0}, {1})",
    "pow": "ember_pow({0}, {1})",
    "erf": "tl.erf({0})",
    "floor": "tl.floor({0})",
    # torch's sign: 1, -1 or 0 (0 for NaN, and True for a true bool)
    "sign": "tl.where({0} > 0, 1, tl.where({0} < 0, -1, 0)).to({T})",
    "ceil": "tl.ceil({0})",
    "trunc": "tl.where({0} < 0, tl.ceil({0}), tl.floor({0}))",
    # one rounding, as the multiply-adds of torch's CPU kernels
    "fma": "tl.fma({0}, {1}, {2})",
    "maximum": "tl.maximum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)",
    "minimum": "tl.minimum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)",
    "clamp_min": "tl.where({0} < {1}, {1}, {0})",
    "clamp_max": "tl.where({0} > {1}, {1}, {0})",
    "eq": "({0} == {1})",
    "ne": "({0} != {1})",
    "lt": "({0} < {1})",
    "le": "({0} <= {1})",
    "gt": "({0} > {1})",
    "ge": "({0} >= {1})",
    "not": "({0} == 0)",
    "and": "(({0} != 0) & ({1} != 0))",
    "or": "(({0} != 0) | ({1} != 0))",
    "bitwise_not": "(~{0})",
    "bitwise_and": "({0} & {1})",
    "bitwise_or": "({0} | {1})",
    "bitwise_xor": "({0} ^ {1})",
    "where": "tl.where(({0}) != 0, {1}, {2})",
    "cast": "({0}).to({T})",
    # Triton's % of floats is C's fmod (exact), as torch's
    "fmod": "({0} % {1})",
    "remainder": "ember_remainder({0}, {1})",
    "int_fmod": "({0} % {1})",
    # Python's modulo from C's: move the remainder by one divisor when signs differ.
    "int_remainder": "((({0} % {1}) + {1}) % {1})",
    # A position from an index tensor: negative counts from the end, then
    # clamped in range, so no value reads outside the tensor ("index_check"
    # reports the ones torch would refuse).
    "index_clamp": "tl.minimum(tl.maximum(tl.where({0} < 0, {0} + {1}, {0}), 0), "
    "{1} - 1)",
}


def identity_of(kind: ReduceKind, dtype: torch.dtype) -> str | None:
    """The value a ``kind`` fold of ``dtype`` starts from (None: no such fold
    here); integer max and min start from the type's ends, bools' from 0/1."""
    if kind is ReduceKind.SUM:
        return "0"
    if kind is ReduceKind.PROD:
        return "1"
    if kind not in (ReduceKind.MAX, ReduceKind.MIN):
        return None
    low = kind is ReduceKind.MAX
    if dtype.is_floating_point:
        return 'float("-inf")' if low else 'float("inf")'
    if dtype == torch.bool:
        return "0" if low else "1"
    info = torch.iinfo(dtype)
    return str(info.min if low else info.max)


@dataclass
class Scope:
    """One kernel's names: buffer strides, the program's reduction values."""

    strides: dict[str, tuple[int, ...]]
    locals_: dict[str, str] = field(default_factory=dict)


@dataclass
class Body:
    """The statements of one stage's block, each subexpression named once per
    mask (the same load under another mask is another statement)."""

    scope: Scope
    indent: str
    lanes: int  # the block's width
    vectors: frozenset[str]  # the loop variables that differ lane by lane
    lines: list[str] = field(default_factory=list)
    names: dict[tuple[Expr, str], str] = field(default_factory=dict)
    masks: int = 0

    def value(self, e: Expr, mask: str) -> str:
        key = (e, mask)
        if key not in self.names:
            code = self._code(e, mask)
            if isinstance(e, Const):
                return code
            name = f"t{len(self.names)}"
            self.lines.append(f"{self.indent}{name} = {code}")
            self.names[key] = name
        return self.names[key]

    def _code(self, e: Expr, mask: str) -> str:
        if isinstance(e, Const):
            if e.dtype.is_floating_point:
                # a block of one in its type: Triton folds arithmetic between
                # Python floats in double, where torch rounds a float32
                # scalar first, and takes a Python float passed to a
                # function (tl.abs(0.3)) as float32, where a float64 one
                # must stay double
                return f"tl.full([1], {_literal(e)}, {carried(e.dtype)})"
            return _literal(e)
        if isinstance(e, IndexValue):
            code = self.index(e.index, mask)
            if _is_number(code):  # a Python number has no .to()
                return f"tl.full([1], {code}, tl.int64)"
            return f"({code}).to(tl.int64)"
        if isinstance(e, Load):
            if e.name in self.scope.locals_:
                return self.scope.locals_[e.name]
            offset = self.offset(e.name, e.index, mask)
            if not any(self._varies(i, through_indirect=False) for i in e.index):
                # maybe the same element in every lane (an index read from a
                # tensor at a position that does not vary either): a block of
                # its address, as the mask is one
                offset = f"{offset} + tl.zeros([{self.lanes}], tl.int32)"
            code = f"tl.load(p_{e.name} + {group(offset)}, mask={mask}, other=0)"
            return f"{code}.to(tl.float32)" if e.dtype in HALF_TYPES else code
        if e.op == "index_check":
            return self._check(e, mask)
        if e.op == "select":
            cond = self.value(e.args[0], mask)
            # (compared again: a condition that is the same for every lane is
            # a scalar, and the interpreter's `&` of a block and a scalar
            # gives int32 lanes, which a load's mask may not be)
            taken = self._mask(f"({mask} & ({cond} != 0)) != 0")
            other = self._mask(f"({mask} & ({cond} == 0)) != 0")
            a, b = self.value(e.args[1], taken), self.value(e.args[2], other)
            return f"tl.where({cond} != 0, {a}, {b})"
        if e.op in ("signbit", "round"):
            return self._by_operand_dtype(e, mask)
        if e.op == "pow" and e.dtype == torch.float64:
            # exp(b log a) in float64 is hundreds of ulps off for large powers
            raise Unsupported("pow of float64 values has no Triton form yet")
        template = SCALAR_OPS.get(e.op)
        if template is None:
            raise Unsupported(f"the scalar op {e.op.value!r} has no Triton form yet")
        args = [self.value(a, mask) for a in e.args]
        if e.op == "cast":
            (source,) = e.args
            if isinstance(source, Const):  # a block of the lanes, in its type
                made = carried(source.dtype)
                args = [f"tl.full([{self.lanes}], {_literal(source)}, {made})"]
            if source.dtype in HALF_TYPES and not isinstance(source, Load):
                # an arithmetic result of a 16-bit type is rounded to it first
                args = [f"{narrow(args[0], source.dtype)}.to(tl.float32)"]
            if e.dtype in HALF_TYPES:
                # rounded to the 16-bit type, computed on in float32 (as loaded)
                return f"{narrow(args[0], e.dtype)}.to(tl.float32)"
        return template.format(*args, T=carried(e.dtype))

    def _by_operand_dtype(self, e: Call, mask: str) -> str:
        """Ops whose Triton form depends on their operand's dtype."""
        (x,) = e.args
        code = self.value(x, mask)
        floating = x.dtype.is_floating_point
        if e.op == "signbit":  # the sign bit: -0.0 and negative NaNs too
            if not floating:
                return f"({code} < 0)"
            bits = "tl.int64" if x.dtype == torch.float64 else "tl.int32"
            return f"({code}.to({bits}, bitcast=True) < 0)"
        if not floating:
            return code  # round of an integer
        big = 2.0**52 if x.dtype == torch.float64 else 2.0**23
        return f"ember_round({code}, {big!r})"

    def _check(self, e: Call, mask: str) -> str:
        """``index_check(value, v, low, size)``: ``value``, and a 1 stored in the
        kernel's out-of-range flag when a lane's ``v`` is outside [low, size)."""
        value, v, low, size = (self.value(a, mask) for a in e.args)
        bad = self._mask(
            f"(({v} < {low}) | ({v} >= {size})) & {mask} "
            f"& (tl.zeros([{self.lanes}], tl.int1) == 0)"
        )
        self.lines.append(
            f"{self.indent}tl.store(oob, 1, mask=tl.sum({bad}.to(tl.int32), 0) > 0)"
        )
        return value

    def _mask(self, code: str) -> str:
        name = f"m{self.masks}"
        self.masks += 1
        self.lines.append(f"{self.indent}{name} = {code}")
        return name

    def _varies(self, i: Index, through_indirect: bool = True) -> bool:
        """Whether index ``i`` differs between the lanes of a block (an
        ``Indirect`` term counts as differing unless ``through_indirect`` is
        False)."""
        for term, _ in i.terms:
            if isinstance(term, Var) and term.name in self.vectors:
                return True
            if isinstance(term, (Div, Mod)) and self._varies(
                term.num, through_indirect
            ):
                return True
            if isinstance(term, Indirect) and through_indirect:
                return True  # its value is a block (loaded with the mask)
        return False

    def index(self, i: Index, mask: str) -> str:
        return render(i, lambda term: self._indirect(term, mask), floor_div="//")

    def _indirect(self, term: Indirect, mask: str) -> str:
        return self.value(term.value, mask)

    def offset(self, name: str, index: tuple[Index, ...], mask: str) -> str:
        strides = self.scope.strides[name]
        parts = []
        for i, stride in zip(index, strides, strict=True):
            code = self.index(i, mask)
            if stride != 0 and code != "0":
                code = code if code.isidentifier() else f"({code})"
                parts.append(code if stride == 1 else f"{code} * {stride}")
        return " + ".join(parts) or "0"


def carried(dtype: torch.dtype) -> str:
    """The Triton type a value of ``dtype`` is computed in: its own, float32
    for the 16-bit floats (rounded to them only when stored or cast)."""
    return "tl.float32" if dtype in HALF_TYPES else TL_TYPES[dtype]


def narrow(code: str, dtype: torch.dtype) -> str:
    """``code`` converted to ``dtype`` for a store (or a cast)."""
    if _is_number(code):  # a Python number has no .to(): a block of one,
        # made in the stored type (16-bit ones are rounded from float32)
        made = "tl.float32" if dtype in HALF_TYPES else TL_TYPES[dtype]
        code = f"tl.full([1], {code}, {made})"
    if dtype == torch.bfloat16:
        return f"ember_to_bf16({code})"
    return f"({code}).to({TL_TYPES[dtype]})"


def _is_number(code: str) -> bool:
    """Whether ``code`` is a literal ``_literal`` wrote."""
    try:
        float(code.removeprefix("float(").removesuffix(")").strip('"'))
    except ValueError:
        return False
    return True


def group(code: str) -> str:
    """``code`` as one operand of ``+``."""
    return code if code.isidentifier() or code.isdigit() else f"({code})"


def _literal(c: Const) -> str:
    if isinstance(c.value, bool):
        return "1" if c.value else "0"
    if isinstance(c.value, float):
        if math.isnan(c.value):
            return 'float("nan")'
        if math.isinf(c.value):
            return f'float("{"-" if c.value < 0 else ""}inf")'
        return repr(c.value)
    return str(c.value)


def split_vars(var_prefix: str, start: int, sizes: tuple[int, ...], flat: str) -> list:
    """Statements naming each dim's variable from a flat position below the
    product of ``sizes``."""
    lines = []
    for k, size in enumerate(sizes):
        inner = math.prod(sizes[k + 1 :])
        code = flat if inner == 1 else f"{flat} // {inner}"
        code = code if k == 0 else f"({code}) % {size}"
        lines.append(f"{var_prefix}{start + k} = {code}")
    return lines


def buffer_dtypes(kernel: Kernel) -> dict[str, torch.dtype]:
    """The dtype of each buffer the kernel reads or stores."""
    dtypes = {
        ld.name: ld.dtype for st in kernel.stages for e in exprs(st) for ld in loads(e)
    }
    dtypes.update({st.name: st.dtype for st in kernel.stages})
    return dtypes


def typed(params: list[str], kernel: Kernel, **more: torch.dtype) -> str:
    """The comment naming each pointer parameter's element type (a reader's
    help, and what a check compiling the module for a GPU reads)."""
    dtypes = {f"p_{name}": d for name, d in buffer_dtypes(kernel).items()}
    dtypes.update({"oob": torch.int32, **more})
    return ", ".join(f"{p}: {str(dtypes[p]).removeprefix('torch.')}" for p in params)


def emit_kernel(kernel: Kernel, strides: dict[str, tuple[int, ...]]) -> str:
    """The ``@triton.jit`` function of one kernel; Unsupported if it has a
    stage or op this renderer does not handle."""
    outer = kernel.outer
    scope = Scope(dict(strides))
    # A pointer parameter is its buffer's name behind a prefix, so that no
    # buffer name (an input called "mask", "tl", ...) meets a name of the body.
    params = [f"p_{n}" for n in kernel.reads if n not in kernel.stored]
    params += [f"p_{s.name}" for s in kernel.stages if s.name in kernel.stored]
    if checks_indices(kernel):
        # set to 1 when an index is out of range; without the prefix of the
        # buffers' parameters, so no buffer (an input named "oob") meets it
        params.append("oob")
    lines = [
        "@triton.jit",
        f"def {kernel.name}({', '.join(params)}):",
        f"    # {describe_origin(kernel.origin)}",
        f"    # {typed(params, kernel)}",
        # int64 index math: offsets of large buffers overflow int32
        "    pid = tl.program_id(0).to(tl.int64)",
    ]
    if not _spread(kernel):  # a spread kernel's block names every dim
        lines += ["    " + s for s in split_vars("i", 0, outer, "pid")]
    written: set[str] = set()
    read: set[str] = set()
    for stage in kernel.stages:
        reads = {ld.name for e in exprs(stage) for ld in loads(e)}
        if reads & written:
            lines.append("    tl.debug_barrier()  # reads what this program stored")
        elif stage.name in read and stage.name in kernel.stored:
            # (a buffer this kernel writes into, read last here: memory.takes)
            lines.append("    tl.debug_barrier()  # overwrites what it read")
        read |= reads
        if isinstance(stage, Pointwise):
            lines += pointwise_stage(stage, kernel, scope)
        elif isinstance(stage, Reduction):
            lines += _reduction(stage, kernel, scope)
        elif isinstance(stage, Scan) and len(kernel.stages) == 1:
            lines += _scan(stage, scope)
        elif isinstance(stage, Scatter) and len(kernel.stages) == 1:
            lines += _scatter(stage, kernel, scope)
        else:
            raise Unsupported(f"{type(stage).__name__} stages have no Triton form yet")
        if stage.name in kernel.stored:
            written.add(stage.name)
    return "\n".join(lines) + "\n"


def pointwise_stage(stage: Pointwise, kernel: Kernel, scope: Scope) -> list[str]:
    """A pointwise stage's loop over the dims its kernel's program walks."""
    if stage.name not in kernel.stored:
        raise Unsupported("a pointwise stage kept in registers")
    if stage.sizes[: len(kernel.outer)] != kernel.outer:
        raise Unsupported("a pointwise stage outside its kernel's outer loops")
    spread = _spread(kernel)
    first = 0 if spread else len(kernel.outer)  # the dims a block walks
    inner = stage.sizes[first:]
    n = math.prod(inner)
    block = min(BLOCK, pow2(n))
    lanes = frozenset(f"i{d}" for d in range(first, len(stage.sizes)))
    body = Body(scope, "        ", block, lanes)
    body.lines += [
        f"        flat = start + tl.arange(0, {block}).to(tl.int64)",
        f"        mask = flat < {n}",
    ]
    body.lines += ["        " + s for s in split_vars("i", first, inner, "flat")]
    value = body.value(stage.expr, "mask")
    out = Load(stage.name, _vars(stage.sizes, "i"), stage.dtype)
    offset = body.offset(stage.name, out.index, "mask")
    if not any(re.search(rf"\b{v}\b", offset) for v in lanes):
        # one address for the whole block (one element per program, or an
        # output expanded along the dims the block walks: stride 0): a block
        # of it, as the mask is one
        offset = f"{offset} + tl.zeros([{block}], tl.int32)"
    body.lines.append(
        f"        tl.store(p_{stage.name} + {group(offset)}, "
        f"{narrow(value, stage.dtype)}, mask=mask)"
    )
    head = f"    # {stage.name} = {describe_origin(stage.origin)}"
    if spread:
        # one block per program (see ``grid``)
        return [head, f"    start = pid * {block}", *(ln[4:] for ln in body.lines)]
    return [head, f"    for start in range(0, {n}, {block}):", *body.lines]


def _spread(kernel: Kernel) -> bool:
    """Whether the kernel is one pointwise stage, whose elements then go in
    blocks over all its dims, one block to a program: rows shorter than a
    block share one (rows of 64 would leave most of a program's lanes idle),
    and a long row is walked by many programs instead of one. It reads only
    what other kernels wrote, so any split of its elements is safe; a kernel
    of several stages keeps one program per outer element, as a stage reads
    what an earlier one stored for the same outer element."""
    return len(kernel.stages) == 1 and isinstance(kernel.stages[0], Pointwise)


_ARG_KINDS = (ReduceKind.ARGMAX, ReduceKind.ARGMIN, ReduceKind.ARGMAX_LAST_NAN)


def _reduction(stage: Reduction, kernel: Kernel, scope: Scope) -> list[str]:
    if stage.kind in _ARG_KINDS:
        return _arg_reduction(stage, kernel, scope)
    if stage.sizes != kernel.outer or identity_of(stage.kind, stage.acc_dtype) is None:
        raise Unsupported(f"a {stage.kind.value} reduction of this shape or dtype")
    n = math.prod(stage.reduce_sizes)
    block = min(BLOCK, pow2(n))
    loop = [f"    for start in range(0, {n}, {block}):"]
    lines, acc = accumulate(stage, scope, block, loop)
    result = f"{stage.name}_val"
    what = describe_origin(stage.origin)
    return [
        f"    # {stage.name} = {stage.kind.value} of {what}",
        *lines,
        *fold(stage, acc, result),
        *rounded(stage, result),
        *store_result(stage, kernel, scope, result),
    ]


def accumulate(
    stage: Reduction, scope: Scope, block: int, loop: list[str]
) -> tuple[list[str], str]:
    """The lines that fold a sum, product, max or min reduction's blocks into
    an accumulator of ``block`` lanes, and its name; ``loop`` opens the loop
    over the blocks (its lines bind ``start``, a block's first position)."""
    identity = identity_of(stage.kind, stage.acc_dtype)
    acc, acc_type = f"{stage.name}_acc", _acc_type(stage.acc_dtype)
    body, value = _reduced_block(stage, scope, block)
    term = f"tl.where(mask, ({value}).to({acc_type}), {identity})"
    if stage.kind is ReduceKind.SUM:
        body.lines.append(f"        {acc} = {acc} + {term}")
    elif stage.kind is ReduceKind.PROD:
        body.lines.append(f"        {acc} = {acc} * {term}")
    else:
        combine = "maximum" if stage.kind is ReduceKind.MAX else "minimum"
        body.lines.append(
            f"        {acc} = tl.{combine}({acc}, {term}, "
            "propagate_nan=tl.PropagateNan.ALL)"
        )
    init = f"    {acc} = tl.full([{block}], {identity}, {acc_type})"
    return [init, *loop, *body.lines], acc


def _acc_type(dtype: torch.dtype) -> str:
    """The Triton type a reduction accumulates ``dtype`` in: bools as int32
    (a compiled loop's variable keeps its type, and tl.maximum of int1
    blocks gives int32), 16-bit floats as float32."""
    return "tl.int32" if dtype == torch.bool else carried(dtype)


def partial_dtype(dtype: torch.dtype) -> torch.dtype:
    """The torch dtype of a reduction's partial values (``_acc_type``)."""
    if dtype == torch.bool:
        return torch.int32
    return torch.float32 if dtype in HALF_TYPES else dtype


def fold(stage: Reduction, acc: str, result: str) -> list[str]:
    """``result = `` the fold of the block ``acc`` for ``stage``'s kind."""
    if stage.kind is ReduceKind.SUM:
        return [f"    {result} = tl.sum({acc}, 0)"]
    if stage.kind is ReduceKind.PROD:
        return [f"    {result} = tl.reduce({acc}, 0, ember_mul)"]
    lines = [f"    {result} = tl.{stage.kind.value}({acc}, 0)"]
    if stage.acc_dtype.is_floating_point:
        # tl.max/min skip NaN; torch's amax/amin propagate it.
        lines.append(
            f"    {result} = tl.where(tl.sum(({acc} != {acc}).to(tl.int32), 0)"
            f' > 0, float("nan"), {result})'
        )
    return lines


def rounded(stage: Reduction, result: str) -> list[str]:
    """Eager rounds a reduction's result to its dtype (a 16-bit one; float32
    from a long sum's float64 accumulator); a later stage reads that."""
    if stage.dtype in HALF_TYPES:
        return [f"    {result} = {narrow(result, stage.dtype)}.to(tl.float32)"]
    if stage.dtype == torch.float32 and stage.acc_dtype == torch.float64:
        return [f"    {result} = {result}.to(tl.float32)"]
    return []


_NEG_ZERO = 'float("-0.0")'

# Scans by kind: Triton's scan of a block, and how the fold so far combines
# with it.
_SCANS = {ReduceKind.SUM: ("tl.cumsum", "+"), ReduceKind.PROD: ("tl.cumprod", "*")}


def _scan(stage: Scan, scope: Scope) -> list[str]:
    """One program per position of the dims not scanned (see ``grid``): it
    walks the scanned dim in blocks, folds the blocks before (its ``carry``,
    the previous block's last value) into a block's first lane and scans the
    block in ``acc_dtype``, so the fold runs in torch's order across blocks
    (an inf carried into a block of products that underflow stays inf). A
    GPU's scan of a block associates differently from torch's loop, far below
    float32's rounding in float64 (float32's cumsum accumulates there, as in
    torch)."""
    if stage.kind not in _SCANS or stage.dtype in HALF_TYPES:
        raise Unsupported(f"a cum{stage.kind.value} of this kind or dtype")
    scan, combine = _SCANS[stage.kind]
    sizes, dim = stage.sizes, stage.dim
    others = [d for d in range(len(sizes)) if d != dim]
    n = sizes[dim]
    block = min(BLOCK, pow2(n))
    acc_type = TL_TYPES[stage.acc_dtype]
    lines = [
        f"    # {stage.name} = cum{stage.kind.value} of {describe_origin(stage.origin)}"
    ]
    for k, d in enumerate(others):
        inner = math.prod(sizes[o] for o in others[k + 1 :])
        code = "pid" if inner == 1 else f"pid // {inner}"
        lines.append(f"    i{d} = {code if k == 0 else f'({code}) % {sizes[d]}'}")
    carry, identity = f"{stage.name}_carry", identity_of(stage.kind, stage.acc_dtype)
    # the next block's carry is the last lane's value, exactly, in a block of
    # one of the accumulation type (a loop's variable keeps its type): the
    # other lanes add -0.0, which leaves any float as it is (0 for integers)
    zero = _NEG_ZERO if stage.acc_dtype.is_floating_point else "0"
    lines.append(f"    {carry} = tl.full([1], {identity}, {acc_type})")
    body = Body(scope, "        ", block, frozenset({f"i{dim}"}))
    body.lines += [
        f"        i{dim} = start + tl.arange(0, {block}).to(tl.int64)",
        f"        mask = i{dim} < {n}",
    ]
    value = body.value(stage.expr, "mask")
    out = Load(stage.name, _vars(sizes, "i"), stage.dtype)
    offset = body.offset(stage.name, out.index, "mask")
    body.lines += [
        f"        v = tl.where(mask, ({value}).to({acc_type}), {identity})",
        f"        v = tl.where(i{dim} == start, {carry} {combine} v, v)",
        f"        folded = {scan}(v, 0)",
        f"        tl.store(p_{stage.name} + {group(offset)}, "
        f"{narrow('folded', stage.dtype)}, mask=mask)",
        f"        last = tl.minimum({n} - start, {block}) - 1 + start",
        f"        {carry} = tl.full([1], {zero}, {acc_type}) + "
        f"tl.sum(tl.where(i{dim} == last, folded, {zero}), 0)",
    ]
    return [*lines, f"    for start in range(0, {n}, {block}):", *body.lines]


# How a scatter combines an element with a value, by kind (None: overwrite).
_COMBINE = {
    None: "{1}",
    ReduceKind.SUM: "({0} + {1})",
    ReduceKind.PROD: "({0} * {1})",
    ReduceKind.MAX: "tl.maximum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)",
    ReduceKind.MIN: "tl.minimum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)",
}


def _scatter(stage: Scatter, kernel: Kernel, scope: Scope) -> list[str]:
    """One program: the output's ``init`` in blocks, then the source walked
    one position at a time in order, each value combined into its target
    (read, combined, stored, then a barrier), so repeated targets combine
    exactly as torch's serial loop does. Correct first: on a GPU this is one
    program walking the whole source."""
    if stage.mean or stage.kind not in _COMBINE:
        raise Unsupported("a 16-bit scatter taking the mean")
    name = stage.name
    init = Pointwise(name, stage.sizes, stage.dtype, stage.init, stage.origin)
    lines = pointwise_stage(init, kernel, scope)
    lines.append("    tl.debug_barrier()  # the source's writes follow the init")
    n = math.prod(stage.src_sizes)
    lanes = frozenset(f"r{d}" for d in range(len(stage.src_sizes)))

    def source_loop(value: bool) -> list[str]:
        body = Body(scope, "        ", 1, lanes)
        body.lines += [
            "        flat = start + tl.arange(0, 1).to(tl.int64)",
            f"        mask = flat < {n}",
        ]
        body.lines += [
            "        " + x for x in split_vars("r", 0, stage.src_sizes, "flat")
        ]
        offset = group(body.offset(name, stage.target, "mask"))
        if value:
            v = body.value(stage.value, "mask")
            old = f"tl.load(p_{name} + {offset}, mask=mask, other=0)"
            if stage.dtype in HALF_TYPES:
                old = f"{old}.to(tl.float32)"
            new = _COMBINE[stage.kind].format(old, v)
        else:  # every targeted element starts from the kind's identity
            start = identity_of(stage.kind, stage.dtype)
            new = f"tl.full([1], {start}, {carried(stage.dtype)})"
        body.lines += [
            f"        tl.store(p_{name} + {offset}, {narrow(new, stage.dtype)}, "
            "mask=mask)",
            "        tl.debug_barrier()",
        ]
        return [f"    for start in range(0, {n}):", *body.lines]

    kind = f"scatter_{stage.kind.value}" if stage.kind else "scatter"
    lines.append(f"    # {name} = {kind} of {describe_origin(stage.origin)}")
    if not stage.include_self:
        lines += source_loop(False)
    return lines + source_loop(True)


def checks_indices(kernel: Kernel) -> bool:
    """Whether the kernel reads through index tensors, so it takes a flag that
    it sets when an index is out of range."""
    return any(
        isinstance(x, Call) and x.op == "index_check"
        for stage in kernel.stages
        for e in exprs(stage)
        for x in walk(e)
    )


def _vars(sizes: tuple[int, ...], prefix: str) -> tuple[Index, ...]:
    return tuple(var(f"{prefix}{d}", size) for d, size in enumerate(sizes))


def _reduced_block(stage: Reduction, scope: Scope, block: int) -> tuple[Body, str]:
    """The statements of one block of a reduction's loop (its flat positions,
    the mask of the tail, each reduced dim's variable) and the code of the
    value each lane reduces."""
    n = math.prod(stage.reduce_sizes)
    lanes = frozenset(f"r{d}" for d in range(len(stage.reduce_sizes)))
    body = Body(scope, "        ", block, lanes)
    body.lines += [
        f"        flat = start + tl.arange(0, {block}).to(tl.int64)",
        f"        mask = flat < {n}",
    ]
    body.lines += [
        "        " + s for s in split_vars("r", 0, stage.reduce_sizes, "flat")
    ]
    return body, body.value(stage.expr, "mask")


def _arg_reduction(stage: Reduction, kernel: Kernel, scope: Scope) -> list[str]:
    """argmax/argmin: each lane keeps its best value and the flat position of
    its first occurrence (blocks come in order, so a later equal value never
    takes over), NaN beating any number as in torch; then the program takes
    the lanes holding the best value and the least position. With NaNs the
    first NaN wins, and for pooling's indices (ARGMAX_LAST_NAN) the last: a
    lane's later NaN takes over, and the program takes the greatest
    position among its NaN lanes."""
    if stage.sizes != kernel.outer:
        raise Unsupported(f"a {stage.kind.value} reduction of this shape")
    n = math.prod(stage.reduce_sizes)
    block = min(BLOCK, pow2(n))
    better = "<" if stage.kind is ReduceKind.ARGMIN else ">"
    last_nan = stage.kind is ReduceKind.ARGMAX_LAST_NAN
    # the value no element beats: a lane holding it holds no position
    fold = ReduceKind.MIN if better == "<" else ReduceKind.MAX
    worst = identity_of(fold, stage.acc_dtype)
    # bools compare as 0 and 1
    acc_type = "tl.int32" if stage.acc_dtype == torch.bool else carried(stage.acc_dtype)
    val, pos, result = f"{stage.name}_best", f"{stage.name}_at", f"{stage.name}_val"
    body, value = _reduced_block(stage, scope, block)
    nan_takes = "(v != v)" if last_nan else f"((v != v) & ({val} == {val}))"
    body.lines += [
        f"        v = tl.where(mask, ({value}).to({acc_type}), {worst})",
        f"        take = mask & ((v {better} {val}) | {nan_takes})",
        f"        {val} = tl.where(take, v, {val})",
        f"        {pos} = tl.where(take, flat, {pos})",
    ]
    held = f"({pos} < {n})"
    lines = [
        f"    # {stage.name} = {stage.kind.value} of {describe_origin(stage.origin)}",
        f"    {val} = tl.full([{block}], {worst}, {acc_type})",
        f"    {pos} = tl.full([{block}], {n}, tl.int64)",
        f"    for start in range(0, {n}, {block}):",
        *body.lines,
        f"    nan = ({val} != {val}) & {held}",
        f"    top = tl.{'max' if better == '>' else 'min'}({val}, 0)",
        f"    {result} = tl.min(tl.where(({val} == top) & {held}, {pos}, {n}), 0)",
    ]
    if last_nan:
        lines.append(f"    at_nan = tl.max(tl.where(nan, {pos}, -1), 0)")
    else:
        lines.append(f"    at_nan = tl.min(tl.where(nan, {pos}, {n}), 0)")
    return [
        *lines,
        f"    {result} = tl.where(tl.sum(nan.to(tl.int32), 0) > 0, at_nan, {result})",
        f"    {result} = tl.where({result} == {n}, 0, {result})",
        *store_result(stage, kernel, scope, result),
    ]


def store_result(
    stage: Reduction, kernel: Kernel, scope: Scope, result: str
) -> list[str]:
    """The program's value of ``stage`` made readable by later stages, and
    stored when the kernel stores it."""
    scope.locals_[stage.name] = result
    if stage.name not in kernel.stored:
        return []
    out = Body(scope, "    ", 1, frozenset())
    offset = out.offset(stage.name, _vars(stage.sizes, "i"), "True")
    return [
        *out.lines,
        f"    tl.store(p_{stage.name} + {group(offset)}, "
        f"{narrow(result, stage.dtype)})",
    ]


def pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def warps_for(lanes: int) -> int:
    """The heuristic for a kernel's warps: one warp (32 threads) per 256 lanes
    of its widest block, so each thread holds 8 lanes, from 1 to 8 warps (a
    block of 64 lanes leaves no warp idle; 1024 lanes get Triton's default
    of 4)."""
    return min(8, max(1, pow2(lanes) // 256))


def warps(kernel: Kernel) -> int:
    """``warps_for`` the widest block of the kernel's stages."""
    widest = max((_width(stage, kernel) for stage in kernel.stages), default=1)
    return warps_for(min(BLOCK, widest))


def _width(stage, kernel: Kernel) -> int:
    """The elements a stage walks in blocks (a scatter: its initial values;
    its source takes one lane at a time)."""
    if isinstance(stage, Reduction):
        return math.prod(stage.reduce_sizes)
    if isinstance(stage, Scan):
        return stage.sizes[stage.dim]
    if isinstance(stage, Pointwise) and not _spread(kernel):
        return math.prod(stage.sizes[len(kernel.outer) :])
    return math.prod(stage.sizes)


def grid(kernel: Kernel) -> int:
    """Programs to launch: one per element of the outer loops, one per
    block of a lone pointwise stage without them, or one per row of a scan."""
    first = kernel.stages[0]
    if isinstance(first, Scan):
        return math.prod(first.sizes) // max(first.sizes[first.dim], 1)
    if _spread(kernel):
        n = math.prod(kernel.stages[0].sizes)
        block = min(BLOCK, pow2(n))
        return -(-n // block)
    return math.prod(kernel.outer)

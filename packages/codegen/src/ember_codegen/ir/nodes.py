"""The loop-level IR: one node per computed tensor, defined by index expressions.

Pointwise and reduction nodes hold a scalar expression over their loop variables
(``i0..`` for output dims, ``r0..`` for reduced dims); ``Load(name, index)`` reads
another node at a logical index, so views are index math and fusion is substitution;
an index may hold ``Indirect`` terms, values read at run time (gather, embedding).
Scatter nodes write at such positions (scatter_add, index_put); Scan nodes fold
along a dim in order (cumsum). Extern and fallback nodes run an aten op through
torch. ``format_ir`` prints it all.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from .indexing import Index, indirect_terms, map_indirect, render

# The dtypes the C++ backend handles, by the C type of a buffer element; any
# other dtype runs through torch.
C_TYPES: dict[torch.dtype, str] = {
    torch.float32: "float",
    torch.float64: "double",
    torch.int64: "int64_t",
    torch.int32: "int32_t",
    torch.bool: "bool",
    torch.bfloat16: "ember_bf16",
    torch.float16: "ember_f16",
}
# 16-bit floats: buffers hold their bits, values are computed in float32 (as
# torch's CPU kernels compute them), rounded to the dtype when stored and when
# converted (docs/codegen.md, "Half precision").
HALF_TYPES: dict[torch.dtype, str] = {torch.bfloat16: "bf16", torch.float16: "f16"}


@dataclass(frozen=True, slots=True)
class Load:
    """The element of node ``name`` at a logical (per-dimension) index."""

    name: str
    index: tuple[Index, ...]
    dtype: torch.dtype


@dataclass(frozen=True, slots=True)
class Const:
    value: bool | int | float
    dtype: torch.dtype


@dataclass(frozen=True, slots=True)
class IndexValue:
    """An index expression used as a value (arange, masks of concatenation)."""

    index: Index
    dtype: torch.dtype = torch.int64


class ScalarOp(enum.StrEnum):
    """The scalar ops a ``Call`` may apply: a closed set, which every renderer
    covers (the C++ one with ``render/cpp/expr.SCALAR_OPS``). Members compare
    equal to their names, so rules write ``Call("add", ...)``.

    Integer ``int_fmod``/``int_remainder`` take a nonzero divisor other than -1
    (the lowering sees to it); ``index_clamp``/``index_check`` are the bounds
    handling of indirect indices; ``select`` (cond, a, b) evaluates only the
    taken branch, ``where`` both.
    """

    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    NEG = "neg"
    ABS = "abs"
    RELU = "relu"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    RECIPROCAL = "reciprocal"
    SIGMOID = "sigmoid"
    TANH = "tanh"
    SIN = "sin"
    COS = "cos"
    ERF = "erf"
    LOG1P = "log1p"
    EXPM1 = "expm1"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    SINH = "sinh"
    COSH = "cosh"
    TAN = "tan"
    ASINH = "asinh"
    ACOSH = "acosh"
    ATANH = "atanh"
    ATAN2 = "atan2"
    FMOD = "fmod"
    REMAINDER = "remainder"
    INT_FMOD = "int_fmod"
    INT_REMAINDER = "int_remainder"
    SIGN = "sign"
    SIGNBIT = "signbit"
    FLOOR = "floor"
    CEIL = "ceil"
    TRUNC = "trunc"
    ROUND = "round"
    POW = "pow"
    FMA = "fma"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    CLAMP_MIN = "clamp_min"
    CLAMP_MAX = "clamp_max"
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    NOT = "not"
    AND = "and"
    OR = "or"
    BITWISE_NOT = "bitwise_not"
    BITWISE_AND = "bitwise_and"
    BITWISE_OR = "bitwise_or"
    BITWISE_XOR = "bitwise_xor"
    WHERE = "where"
    SELECT = "select"
    CAST = "cast"
    INDEX_CLAMP = "index_clamp"
    INDEX_CHECK = "index_check"


# The scalar ops that cost tens of cycles (a polynomial or a library call): a
# value computed with one is worth storing where it would be computed again
# (scheduling/fusion.py, render/cpp/kernels.py).
COSTLY_OPS = frozenset(
    {
        ScalarOp.EXP,
        ScalarOp.LOG,
        ScalarOp.TANH,
        ScalarOp.ERF,
        ScalarOp.SIN,
        ScalarOp.COS,
        ScalarOp.POW,
        ScalarOp.SIGMOID,
        ScalarOp.LOG1P,
        ScalarOp.EXPM1,
        ScalarOp.TAN,
        ScalarOp.ASIN,
        ScalarOp.ACOS,
        ScalarOp.ATAN,
        ScalarOp.ATAN2,
        ScalarOp.SINH,
        ScalarOp.COSH,
        ScalarOp.ASINH,
        ScalarOp.ACOSH,
        ScalarOp.ATANH,
    }
)


@dataclass(frozen=True, slots=True)
class Call:
    """The scalar op ``op`` applied to ``args``, giving ``dtype``.

    ``select`` (cond, a, b) evaluates only the taken branch, so a branch may hold
    loads that are out of bounds when not taken (concatenation). An op name
    outside ``ScalarOp`` raises ValueError here, where the rule made it.
    """

    op: ScalarOp
    args: tuple[Expr, ...]
    dtype: torch.dtype

    def __post_init__(self) -> None:
        if type(self.op) is not ScalarOp:
            object.__setattr__(self, "op", ScalarOp(self.op))


Expr = Load | Const | IndexValue | Call


class ReduceKind(enum.Enum):
    SUM = "sum"
    PROD = "prod"
    MAX = "max"  # propagates NaN, like torch.amax
    MIN = "min"
    # The flat position (row-major over the reduced dims) of the first maximum
    # or minimum; NaN counts as both. The node's dtype is int64, its acc_dtype
    # the compared values'.
    ARGMAX = "argmax"
    ARGMIN = "argmin"
    # max_pool2d's indices: as ARGMAX, but of several NaNs the last one wins,
    # as in torch's pooling kernels.
    ARGMAX_LAST_NAN = "argmax_last_nan"


@dataclass(frozen=True, slots=True)
class TensorSpec:
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: torch.dtype


# --- nodes ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Input:
    """A graph input or constant; its strides are the ones compiled for."""

    name: str
    spec: TensorSpec
    origin: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Pointwise:
    """``out[i0, i1, ...] = expr``."""

    name: str
    sizes: tuple[int, ...]
    dtype: torch.dtype
    expr: Expr
    origin: tuple[str, ...]  # the aten nodes it came from, for comments
    view: bool = False  # a view op: as an output it may alias its input's memory


@dataclass(frozen=True, slots=True)
class Reduction:
    """``out[i0, ...] = reduce over r0, ... of expr``; ``acc_dtype`` accumulates."""

    name: str
    sizes: tuple[int, ...]
    reduce_sizes: tuple[int, ...]
    kind: ReduceKind
    dtype: torch.dtype
    acc_dtype: torch.dtype
    expr: Expr
    origin: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Scatter:
    """``out[i0, ...] = init``; then, for each source position ``r0, ...`` over
    ``src_sizes`` in order, ``out[target] = value``, or with ``kind``
    ``out[target] = kind(out[target], value)``.

    ``target`` indexes ``out`` per dim; its ``Indirect`` terms are index-tensor
    values, clamped into range, and ``value`` carries their ``index_check``s.
    ``include_self=False`` first sets every targeted element to ``kind``'s
    identity; ``mean`` then divides each targeted element by the number of
    values it received (plus one when ``include_self``).
    """

    name: str
    sizes: tuple[int, ...]
    dtype: torch.dtype
    init: Expr
    src_sizes: tuple[int, ...]
    target: tuple[Index, ...]
    value: Expr
    kind: ReduceKind | None
    origin: tuple[str, ...]
    include_self: bool = True
    mean: bool = False


@dataclass(frozen=True, slots=True)
class Scan:
    """``out[..., j, ...] = kind over k <= j of expr(..., k, ...)`` along dim
    ``dim`` (cumsum, cumprod), folded in order in ``acc_dtype``: float64 for a
    float32 cumsum, as torch's CPU kernel. ``expr`` reads at the output index,
    its ``dim`` variable standing for k."""

    name: str
    sizes: tuple[int, ...]
    dtype: torch.dtype
    acc_dtype: torch.dtype
    dim: int
    kind: ReduceKind
    expr: Expr
    origin: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Ref:
    """A tensor argument of an extern or fallback call: the node named ``name``."""

    name: str


@dataclass(frozen=True, slots=True)
class Extern:
    """A library kernel (mm, conv, ...) called through torch; ``outputs`` name
    the tensors it returns (``None`` where a returned value is unused)."""

    op: torch._ops.OpOverload
    args: tuple
    kwargs: tuple[tuple[str, object], ...]
    outputs: tuple[str | None, ...]
    specs: tuple[TensorSpec | None, ...]
    origin: tuple[str, ...]
    fallback: bool = False  # True: an op with no lowering, listed in fallback_ops
    # True: the tensor arguments get the layouts their nodes were lowered with,
    # never a view of their source in another layout (a fallback op may read
    # strides; a convolution given channels-last operands runs faster).
    exact_layout: bool = False

    @property
    def name(self) -> str:
        return next(o for o in self.outputs if o is not None)


Node = Input | Pointwise | Reduction | Scatter | Scan | Extern
Stage = Pointwise | Reduction | Scatter | Scan  # what a loop kernel computes


def exprs(node: Stage) -> tuple[Expr, ...]:
    """The expressions a stage evaluates (a scatter's target as index values)."""
    if isinstance(node, Scatter):
        targets = tuple(IndexValue(i) for i in node.target)
        return (node.init, node.value, *targets)
    return (node.expr,)


def node_loads(node: Stage) -> list[Load]:
    """Every Load a stage makes, those inside indirect indices included."""
    return [ld for e in exprs(node) for ld in loads(e)]


def loads(e: Expr) -> list[Load]:
    """Every Load in ``e``, depth first, those inside indirect indices included."""
    return [x for x in walk(e) if isinstance(x, Load)]


def walk(e: Expr) -> Iterator[Expr]:
    """Every expression in ``e``, each before its parts (depth first, in
    argument order), those inside indirect indices included: the one walk
    every stage uses, so none of them misses a load behind an index."""
    yield e
    if isinstance(e, Call):
        for a in e.args:
            yield from walk(a)
    elif isinstance(e, (Load, IndexValue)):
        for i in e.index if isinstance(e, Load) else (e.index,):
            for term in indirect_terms(i):
                yield from walk(term.value)


def map_expr(
    e: Expr,
    fn: Callable[[Expr], Expr] = lambda x: x,
    index: Callable[[Index], Index] = lambda i: i,
) -> Expr:
    """``e`` rebuilt from its parts up: the expressions inside an index's
    indirect terms first, then the index itself through ``index``, then each
    rebuilt expression (``Load``, ``IndexValue``, ``Call``, ``Const``) through
    ``fn``. A part ``fn`` replaces is not walked again."""

    def rebuild_index(i: Index) -> Index:
        return index(map_indirect(i, rebuild))

    def rebuild(x: Expr) -> Expr:
        if isinstance(x, Load):
            x = Load(x.name, tuple(rebuild_index(i) for i in x.index), x.dtype)
        elif isinstance(x, IndexValue):
            x = IndexValue(rebuild_index(x.index), x.dtype)
        elif isinstance(x, Call):
            x = Call(x.op, tuple(rebuild(a) for a in x.args), x.dtype)
        return fn(x)

    return rebuild(e)


def refs(value: object) -> list[str]:
    """Names of the Ref arguments inside an extern's (nested) args."""
    if isinstance(value, Ref):
        return [value.name]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in refs(v)]
    return []


def describe_origin(origin: tuple[str, ...]) -> str:
    """``op, op, ... (file:line, ...)`` for an origin list of ``op @ file:line``."""
    ops = dict.fromkeys(o.split(" @ ")[0] for o in origin)
    locs = dict.fromkeys(o.split(" @ ")[1] for o in origin if " @ " in o)
    where = f" ({', '.join(locs)})" if locs else ""
    return ", ".join(ops) + where


def format_expr(e: Expr) -> str:
    def leaf(term) -> str:
        return f"{{{format_expr(term.value)}}}"

    if isinstance(e, Load):
        return f"{e.name}[{', '.join(render(i, leaf) for i in e.index)}]"
    if isinstance(e, Const):
        return repr(e.value)
    if isinstance(e, IndexValue):
        return f"index({render(e.index, leaf)})"
    return f"{e.op}({', '.join(format_expr(a) for a in e.args)})"


def format_node(node: Node) -> str:
    """One line of the IR listing."""
    if isinstance(node, Input):
        s = node.spec
        layout = f"{list(s.sizes)}, strides={list(s.strides)}"
        return f"{node.name} = input({layout}, {s.dtype})"
    if isinstance(node, Pointwise):
        return (
            f"{node.name} = pointwise({list(node.sizes)}, {node.dtype}) "
            f"{format_expr(node.expr)}"
        )
    if isinstance(node, Reduction):
        return (
            f"{node.name} = {node.kind.value}({list(node.sizes)} over "
            f"{list(node.reduce_sizes)}, {node.dtype}) {format_expr(node.expr)}"
        )
    if isinstance(node, Scan):
        return (
            f"{node.name} = cum{node.kind.value}({list(node.sizes)} along "
            f"{node.dim}, {node.dtype}) {format_expr(node.expr)}"
        )
    if isinstance(node, Scatter):
        kind = f"scatter_{node.kind.value}" if node.kind else "scatter"
        at = ", ".join(
            render(i, lambda t: f"{{{format_expr(t.value)}}}") for i in node.target
        )
        return (
            f"{node.name} = {kind}({list(node.sizes)} over {list(node.src_sizes)}, "
            f"{node.dtype}) {format_expr(node.init)}; "
            f"[{at}] <- {format_expr(node.value)}"
        )
    outs = ", ".join(o or "_" for o in node.outputs)
    kind = "fallback" if node.fallback else "extern"
    return f"{outs} = {kind} {node.op}({', '.join(map(str, node.args))})"


def format_ir(nodes: list[Node]) -> str:
    """The IR as a short listing, one node per line."""
    return "\n".join(format_node(n) for n in nodes)


@dataclass(frozen=True)
class LoweredGraph:
    """The IR of one graph: nodes in order and the names the graph returns."""

    nodes: list[Node]
    specs: dict[str, TensorSpec]
    inputs: list[str]  # placeholder node names, in call order
    constants: dict[str, str]  # get_attr target -> IR name
    outputs: list[str | None]  # IR name per output (None: a non-tensor output)
    output_constants: dict[int, object]  # non-tensor outputs by position
    fallback_ops: tuple[str, ...]


def contiguous(sizes: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for s in reversed(sizes):
        strides.append(step)
        step *= max(s, 1)
    return tuple(reversed(strides))

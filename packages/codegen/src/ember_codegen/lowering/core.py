"""Aten graph -> loop IR: the lowering registry and the walk that applies it.

Each aten overload with a rule in ``LOWERINGS`` becomes IR nodes; any other op (or
one whose rule raises ``Unsupported``, e.g. for a dtype the C++ backend lacks)
becomes a fallback node that runs the op through torch, so lowering never fails.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.fx
from torch.utils import _pytree as pytree

from ..errors import CodegenError
from ..ir.aten import STORAGE_READERS, returns_view
from ..ir.indexing import Index, var
from ..ir.nodes import (
    C_TYPES,
    HALF_TYPES,
    Call,
    Const,
    Expr,
    Extern,
    Input,
    Load,
    LoweredGraph,
    Node,
    Pointwise,
    ReduceKind,
    Reduction,
    Ref,
    Scan,
    Scatter,
    TensorSpec,
    contiguous,
)
from .channels_last import channels_last_meta, keeps_channels_last


class Unsupported(Exception):
    """Raised by a lowering rule: run this node through the fallback instead."""


@dataclass(frozen=True, slots=True)
class TV:
    """A lowered tensor value handed to rules: the IR node ``name`` and its meta."""

    name: str
    sizes: tuple[int, ...]
    dtype: torch.dtype
    meta: torch.Tensor


Lowering = Callable[..., object]
LOWERINGS: dict[torch._ops.OpOverload, Lowering] = {}


def register(*ops: torch._ops.OpOverload):
    """Register a rule ``fn(lo, *args, **kwargs)`` for aten overloads; tensor
    arguments arrive as ``TV`` and the rule returns a ``TV`` or a tuple of them."""

    def decorate(fn: Lowering) -> Lowering:
        for op in ops:
            LOWERINGS[op] = fn
        return fn

    return decorate


def spec_of(t: torch.Tensor) -> TensorSpec:
    return TensorSpec(tuple(t.shape), tuple(t.stride()), t.dtype)


def to_meta(value: object) -> object:
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(
            value.shape, value.stride(), dtype=value.dtype, device="meta"
        )
    return value


@dataclass
class Lowerer:
    """Builds the IR for one graph; rules call its helpers to make nodes."""

    nodes: dict[str, Node] = field(default_factory=dict)
    specs: dict[str, TensorSpec] = field(default_factory=dict)
    origin: tuple[str, ...] = ()  # the aten node being lowered
    out_meta: object = None  # its meta value (a tensor or a tuple of them)
    # Which items of its tuple result the graph reads (getitem users); None
    # when the node is read whole.
    items_read: frozenset[int] | None = None
    _count: int = 0
    # Each reduction made so far, by everything that decides its values: a
    # graph that reduces the same values twice (mean and sum of one tensor,
    # amax and logsumexp's max) computes them once.
    _reductions: dict[tuple, TV] = field(default_factory=dict)

    def _name(self) -> str:
        self._count += 1
        return f"buf{self._count - 1}"

    def add(self, node: Node, spec: TensorSpec) -> TV:
        self.nodes[node.name] = node
        self.specs[node.name] = spec
        meta = torch.empty_strided(
            spec.sizes, spec.strides, dtype=spec.dtype, device="meta"
        )
        return TV(node.name, spec.sizes, spec.dtype, meta)

    def load(self, tv: TV, index: Sequence[Index]) -> Expr:
        return Load(tv.name, tuple(index), tv.dtype)

    def pointwise(
        self,
        sizes: Sequence[int],
        dtype: torch.dtype,
        fn: Callable[[tuple[Index, ...]], Expr],
        strides: Sequence[int] | None = None,
        view: bool = False,
    ) -> TV:
        """A node ``out[i] = fn(i)``; ``strides`` are the output's if realized."""
        sizes = tuple(sizes)
        index = tuple(var(f"i{d}", s) for d, s in enumerate(sizes))
        expr = fn(index)
        if expr.dtype != dtype:
            expr = cast(expr, dtype)
        node = Pointwise(self._name(), sizes, dtype, expr, self.origin, view)
        return self.add(
            node, TensorSpec(sizes, tuple(strides or contiguous(sizes)), dtype)
        )

    def reduction(
        self,
        sizes: Sequence[int],
        reduce_sizes: Sequence[int],
        kind: ReduceKind,
        dtype: torch.dtype,
        fn: Callable[[tuple[Index, ...], tuple[Index, ...]], Expr],
        acc_dtype: torch.dtype | None = None,
        strides: Sequence[int] | None = None,
    ) -> TV:
        """A node ``out[i] = reduce(kind) over r of fn(i, r)``, accumulated in
        ``acc_dtype`` (default ``dtype``), stored with ``strides`` (default
        row-major)."""
        sizes, reduce_sizes = tuple(sizes), tuple(reduce_sizes)
        index = tuple(var(f"i{d}", s) for d, s in enumerate(sizes))
        rindex = tuple(var(f"r{d}", s) for d, s in enumerate(reduce_sizes))
        expr = fn(index, rindex)
        acc = acc_dtype or dtype
        if expr.dtype != acc:
            expr = cast(expr, acc)
        strides = tuple(strides or contiguous(sizes))
        key = (sizes, reduce_sizes, kind, dtype, acc, expr, strides)
        known = self._reductions.get(key)
        if known is not None and known.name in self.nodes:  # (not rolled back)
            return known
        node = Reduction(
            self._name(), sizes, reduce_sizes, kind, dtype, acc, expr, self.origin
        )
        self._reductions[key] = made = self.add(node, TensorSpec(sizes, strides, dtype))
        return made

    def scatter(
        self,
        meta: torch.Tensor,
        init: Callable[[tuple[Index, ...]], Expr],
        src_sizes: Sequence[int],
        write: Callable[[tuple[Index, ...]], tuple[tuple[Index, ...], Expr]],
        kind: ReduceKind | None,
        include_self: bool = True,
        mean: bool = False,
    ) -> TV:
        """A ``Scatter`` node shaped like ``meta``: ``out[i] = init(i)``, then for
        each source position ``r`` (in order) ``(target, value) = write(r)``."""
        sizes, dtype = tuple(meta.shape), meta.dtype
        if dtype in HALF_TYPES:
            raise Unsupported  # the C++ scatter loop combines in the buffer itself
        index = tuple(var(f"i{d}", s) for d, s in enumerate(sizes))
        rindex = tuple(var(f"r{d}", s) for d, s in enumerate(src_sizes))
        target, value = write(rindex)
        node = Scatter(
            self._name(),
            sizes,
            dtype,
            cast(init(index), dtype),
            tuple(src_sizes),
            tuple(target),
            cast(value, dtype),
            kind,
            self.origin,
            include_self,
            mean,
        )
        return self.add(node, TensorSpec(sizes, tuple(meta.stride()), dtype))

    def scan(
        self,
        meta: torch.Tensor,
        dim: int,
        kind: ReduceKind,
        acc_dtype: torch.dtype,
        fn: Callable[[tuple[Index, ...]], Expr],
    ) -> TV:
        """A ``Scan`` node shaped like ``meta``: ``out[i]`` folds ``fn`` over
        the positions up to ``i`` along ``dim``."""
        sizes, dtype = tuple(meta.shape), meta.dtype
        index = tuple(var(f"i{d}", s) for d, s in enumerate(sizes))
        node = Scan(
            self._name(),
            sizes,
            dtype,
            acc_dtype,
            dim,
            kind,
            cast(fn(index), acc_dtype),
            self.origin,
        )
        return self.add(node, TensorSpec(sizes, tuple(meta.stride()), dtype))


def cast(e: Expr, dtype: torch.dtype) -> Expr:
    if e.dtype == dtype:
        return e
    if isinstance(e, Const):
        return constant(e.value, dtype)
    return Call("cast", (e,), dtype)


def constant(value: bool | int | float, dtype: torch.dtype) -> Const:
    if dtype.is_floating_point:
        return Const(float(value), dtype)
    if dtype == torch.bool:
        return Const(bool(value), dtype)
    return Const(int(value), dtype)


def lower_graph(
    gm: torch.fx.GraphModule, example_inputs: Sequence[object]
) -> LoweredGraph:
    """The loop IR of ``gm`` for inputs shaped like ``example_inputs``."""
    lo = Lowerer()
    env: dict[torch.fx.Node, object] = {}
    metas: dict[torch.fx.Node, object] = {}
    inputs: list[str] = []
    constants: dict[str, str] = {}
    fallback_ops: set[str] = set()
    env_of: dict[str, TV] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    channels_last: set[torch.fx.Node] = set()
    if len(placeholders) != len(example_inputs):
        raise CodegenError(
            f"graph has {len(placeholders)} inputs but {len(example_inputs)} "
            "example inputs were given"
        )
    examples = dict(zip(placeholders, example_inputs))
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            value = (
                examples[node] if node.op == "placeholder" else getattr(gm, node.target)
            )
            spec = spec_of(value)
            # A constant is named by its attribute, the name the wrapper binds;
            # several get_attr nodes may read the same one.
            name = c_name(node.name) if node.op == "placeholder" else node.target
            if name in lo.nodes:
                env[node], metas[node] = env_of[name], env_of[name].meta
                continue
            lo.nodes[name] = Input(name, spec, (node.op,))
            lo.specs[name] = spec
            env[node] = env_of[name] = TV(name, spec.sizes, spec.dtype, to_meta(value))
            metas[node] = env[node].meta
            if node.op == "placeholder":
                inputs.append(name)
            else:
                constants[node.target] = name
            continue
        if node.op == "output":
            break
        if node.target is operator.getitem:
            env[node] = env[node.args[0]][node.args[1]]
            metas[node] = metas[node.args[0]][node.args[1]]
            continue
        if node.op != "call_function" or not isinstance(
            node.target, torch._ops.OpOverload
        ):
            raise CodegenError(
                f"node {node.name} ({node.op} {node.target!r}) is not an aten op call"
            )
        # metas keep eager's layouts (a later node's meta derives from them);
        # the rule sees the layout codegen chose for this node's result.
        metas[node] = _meta_of(node, metas)
        meta = metas[node]
        if keeps_channels_last(node, metas, channels_last):
            channels_last.add(node)
            meta = channels_last_meta(meta)
        env[node] = _lower_node(lo, node, env, meta, fallback_ops)

    outputs: list[str | None] = []
    output_constants: dict[int, object] = {}
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    returned: dict[str, torch.fx.Node] = {}  # by reduction: its first storage
    for i, value in enumerate(pytree.tree_leaves(out_node.args[0])):
        if isinstance(value, torch.fx.Node) and isinstance(env.get(value), TV):
            outputs.append(_own_output(lo, env[value], value, returned))
        else:
            outputs.append(None)
            output_constants[i] = value
    return LoweredGraph(
        list(lo.nodes.values()),
        lo.specs,
        inputs,
        constants,
        outputs,
        output_constants,
        tuple(sorted(fallback_ops)),
    )


def _own_output(
    lo: Lowerer, tv: TV, node: torch.fx.Node, returned: dict[str, torch.fx.Node]
) -> str:
    """The IR name graph output ``node`` returns: ``tv``'s, or a copy's where
    another output got the same reduction, or a view of it
    (``Lowerer.reduction`` computes a reduction made twice once, but eager
    returns two tensors: writing into one must not change the other, nor a
    tensor saved for the backward). Outputs that are one tensor in eager (a
    reduction and a view of it) stay one."""
    reduced = _viewed(lo, tv.name)
    storage = storage_root(node)
    first = returned.setdefault(reduced, storage)
    if first is storage or not isinstance(lo.nodes[reduced], Reduction):
        return tv.name
    strides = lo.specs[tv.name].strides
    op = node.args[0] if node.target is operator.getitem else node
    loc = op.meta.get("user_loc")
    lo.origin = (f"{op.target} @ {loc}" if loc else str(op.target),)
    copy = lo.pointwise(tv.sizes, tv.dtype, lambda i: lo.load(tv, i), strides).name
    # Right after the reduction: kernels are grouped in graph order, so the
    # copy is one more store in the reduction's own loop, not a kernel of its own.
    order = [n for n in lo.nodes if n != copy]
    order.insert(order.index(tv.name) + 1, copy)
    lo.nodes = {n: lo.nodes[n] for n in order}
    return copy


_C_KEYWORDS = frozenset(
    [
        "auto",
        "bool",
        "break",
        "case",
        "char",
        "class",
        "const",
        "continue",
        "default",
        "delete",
        "do",
        "double",
        "else",
        "enum",
        "extern",
        "float",
        "for",
        "goto",
        "if",
        "int",
        "long",
        "new",
        "register",
        "return",
        "short",
        "signed",
        "sizeof",
        "static",
        "struct",
        "switch",
        "this",
        "typedef",
        "union",
        "unsigned",
        "void",
        "volatile",
        "while",
    ]
)


def c_name(name: str) -> str:
    return f"{name}_" if name in _C_KEYWORDS or name.startswith("buf") else name


def _meta_of(node: torch.fx.Node, metas: dict) -> object:
    if "val" in node.meta:
        return node.meta["val"]
    args, kwargs = pytree.tree_map(
        lambda a: metas[a] if isinstance(a, torch.fx.Node) else a,
        (node.args, node.kwargs),
    )
    try:
        return node.target(*args, **kwargs)
    except Exception as e:
        raise CodegenError(
            f"cannot infer the output of {node.name} ({node.target}) on meta tensors: "
            f"{type(e).__name__}: {e}"
        ) from e


def storage_root(node: torch.fx.Node) -> torch.fx.Node:
    """The node whose value owns the storage that ``node`` views (``node``
    itself when it is not a view)."""
    while node.op == "call_function":
        source = node
        if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
            source = node.args[0]  # an item of split, unbind, ...
        if not returns_view(source.target) or not isinstance(
            source.args[0], torch.fx.Node
        ):
            break
        node = source.args[0]
    return node


def _storage_offset(node: torch.fx.Node) -> object:
    """An as_strided's explicit storage offset (None: the input's own, so the
    input itself, not the tensor owning its storage, is what it reads)."""
    if len(node.args) > 3:
        return node.args[3]
    return node.kwargs.get("storage_offset")


def _lower_node(lo: Lowerer, node, env, meta, fallback_ops: set[str]) -> object:
    loc = node.meta.get("user_loc")
    lo.origin = (f"{node.target} @ {loc}" if loc else str(node.target),)
    lo.out_meta = meta
    lo.items_read = _items_read(node)
    rule = LOWERINGS.get(node.target)
    args, kwargs = pytree.tree_map(
        lambda a: env[a] if isinstance(a, torch.fx.Node) else a,
        (node.args, node.kwargs),
    )
    if node.target in STORAGE_READERS and _storage_offset(node) is not None:
        args = (env[storage_root(node.args[0])], *args[1:])
    if rule is not None and _all_supported(meta, args, kwargs):
        checkpoint = dict(lo.nodes), dict(lo.specs)
        try:
            return rule(lo, *args, **kwargs)
        except Unsupported:
            lo.nodes, lo.specs = checkpoint
    fallback_ops.add(str(node.target))
    return extern(lo, node.target, args, kwargs, fallback=True)


def _viewed(lo: Lowerer, name: str) -> str:
    """The IR node whose values ``name`` reads through views alone (itself
    when it is no view)."""
    node = lo.nodes[name]
    while isinstance(node, Pointwise) and node.view and isinstance(node.expr, Load):
        node = lo.nodes[node.expr.name]
    return node.name


def _items_read(node: torch.fx.Node) -> frozenset[int] | None:
    if all(u.target is operator.getitem for u in node.users):
        return frozenset(u.args[1] for u in node.users)
    return None


def extern(
    lo: Lowerer, op, args, kwargs, fallback: bool = False, exact_layout: bool = False
) -> object:
    """An Extern node calling ``op`` through torch; returns a TV or a tuple of them
    (``None`` for non-tensor results). A fallback op gets its arguments in
    exactly the layouts they were lowered with, and so does any op with
    ``exact_layout``."""
    meta = lo.out_meta
    metas = list(meta) if isinstance(meta, (tuple, list)) else [meta]
    names = [lo._name() if isinstance(m, torch.Tensor) else None for m in metas]
    specs = tuple(spec_of(m) if isinstance(m, torch.Tensor) else None for m in metas)
    call_args, call_kwargs = pytree.tree_map(
        lambda a: Ref(a.name) if isinstance(a, TV) else a,
        (tuple(args), kwargs),
        is_leaf=lambda a: isinstance(a, TV),
    )
    node = Extern(
        op,
        call_args,
        tuple(call_kwargs.items()),
        tuple(names),
        specs,
        lo.origin,
        fallback,
        fallback or exact_layout,
    )
    if not any(names):
        raise CodegenError(f"{op} returns no tensor; codegen cannot place it")
    values = []
    for name, spec, m in zip(names, specs, metas):
        if name is not None:
            lo.nodes[name] = node
            lo.specs[name] = spec
            values.append(TV(name, spec.sizes, spec.dtype, m))
        else:
            values.append(None)
    # Extern is keyed under each output name; the scheduler dedups by identity.
    return tuple(values) if isinstance(meta, (tuple, list)) else values[0]


def _all_supported(meta, args, kwargs) -> bool:
    """The C++ backend handles the op only when every tensor is a CPU tensor of a
    dtype it computes in."""
    leaves = pytree.tree_leaves(
        (meta, args, kwargs), is_leaf=lambda a: isinstance(a, TV)
    )
    for leaf in leaves:
        if isinstance(leaf, TV) and leaf.dtype not in C_TYPES:
            return False
        if isinstance(leaf, torch.Tensor) and leaf.dtype not in C_TYPES:
            return False
    return True

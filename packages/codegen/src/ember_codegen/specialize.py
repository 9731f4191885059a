"""Graphs whose sizes are read from their inputs (``aten.sym_size.int`` and
integer arithmetic on it; docs/dynamic.md), compiled once per set of sizes.

The kernels specialize on sizes, so a graph with symbolic sizes is compiled
again, as a graph with those sizes folded to constants, for each new set of
values of its symbolic sizes it is called with.
"""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import operator
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.fx
from torch.utils import _pytree as pytree

from .errors import CodegenError
from .graph_bytes import graph_from_bytes, graph_to_bytes

log = logging.getLogger("ember.codegen")
sym_size = torch.ops.aten.sym_size.int
_FORMAT = 2

# Integer arithmetic on sizes, folded once the sizes are known.
SIZE_OPS = frozenset(
    {
        sym_size,
        operator.add,
        operator.sub,
        operator.mul,
        operator.floordiv,
        operator.mod,
        operator.neg,
        operator.pow,
        torch.sym_max,
        torch.sym_min,
    }
)


def has_symbolic_sizes(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` was traced with symbolic sizes: a node's traced value is
    a size or has symbolic sizes (the graph may read none of them)."""
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt):
            return True
        if isinstance(val, torch.Tensor) and any(
            isinstance(s, torch.SymInt) for s in val.shape
        ):
            return True
    return False


# The graph meta entry listing (output index, input index) pairs: the output
# is the input's new value, which the caller copies into it (ember_aotgrad's
# forward graphs carry it; docs/codegen.md, "Inputs updated in place").
INPUT_UPDATES = "input_updates"


def specialize(
    gm: torch.fx.GraphModule, inputs: Sequence[object]
) -> torch.fx.GraphModule:
    """``gm`` with every size it computes replaced by its value for ``inputs``,
    integer inputs included: the result has no placeholders for them, so it
    takes ``tensor_inputs(inputs)``. The nodes' traced values, symbolic, are
    computed again on meta tensors."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, object] = {}
    placeholders = iter(inputs)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            value = next(placeholders)
            if isinstance(value, int):
                env[node] = value
            else:
                env[node] = graph.node_copy(node, env.__getitem__)
            continue
        if node.op == "call_function" and node.target in SIZE_OPS:
            args = [env[a] if isinstance(a, torch.fx.Node) else a for a in node.args]
            if node.target is sym_size:
                args[0] = inputs[_input_index(gm, node.args[0])]
                env[node] = args[0].shape[args[1]]
            else:
                env[node] = node.target(*args)
            continue
        env[node] = graph.node_copy(node, lambda a: env[a])
    _trace_values(graph, gm, tensor_inputs(inputs))
    out = torch.fx.GraphModule(gm, graph, class_name=type(gm).__name__)
    out.meta.update(gm.meta)
    if INPUT_UPDATES in gm.meta:  # count the inputs without the integers
        kept = [i for i, v in enumerate(inputs) if not isinstance(v, int)]
        out.meta[INPUT_UPDATES] = [
            (o, kept.index(i)) for o, i in gm.meta[INPUT_UPDATES]
        ]
    return out


def tensor_inputs(inputs: Sequence[object]) -> list[object]:
    """The inputs a specialized graph takes: all but the integers."""
    return [v for v in inputs if not isinstance(v, int)]


def _trace_values(
    graph: torch.fx.Graph, root: torch.nn.Module, inputs: Sequence[object]
) -> None:
    """``meta["val"]`` of each node: its value on meta tensors, as traced.
    (A graph loaded from the cache has no traced values: graph_bytes.py.)"""
    values = iter(inputs)
    for node in graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            if node.op == "placeholder":
                value = next(values)
            else:
                value = root
                for atom in node.target.split("."):
                    value = getattr(value, atom)
            if isinstance(value, torch.Tensor):
                value = torch.empty_strided(
                    value.shape, value.stride(), dtype=value.dtype, device="meta"
                )
            node.meta["val"] = value
        elif node.op == "call_function":
            args, kwargs = pytree.tree_map(_on_meta, (node.args, node.kwargs))
            node.meta["val"] = node.target(*args, **kwargs)


def _on_meta(value: object) -> object:
    if isinstance(value, torch.fx.Node):
        return value.meta.get("val")
    if isinstance(value, torch.device):
        return torch.device("meta")
    return value


def _input_index(gm: torch.fx.GraphModule, node: torch.fx.Node) -> int:
    return list(gm.graph.find_nodes(op="placeholder")).index(node)


# How far a probe's sizes are from the first compile's (``PerSizeGraph``).
PROBE_STEP = 3

# Sizes a PerSizeGraph counts calls of before they compile; past this many
# (sizes called once, and never again), the counts start over.
WAITING_LIMIT = 1024


def through_torch(gm: torch.fx.GraphModule, inputs: Sequence[object]) -> object:
    """``gm`` run by torch, op by op, as a compiled graph runs: outside the
    caller's autocast (the graph's dtypes are explicit)."""
    if torch._C._is_any_autocast_enabled():
        with torch._C._DisableAutocast():
            return gm(*inputs)
    return gm(*inputs)


class PerSizeGraph:
    """``compile_one(specialized_gm, inputs)`` per set of symbolic sizes (and
    integer inputs), behind one callable; the latest compile answers
    ``source`` and the rest for inspection. ``settings`` (plain data) is how
    ``compile_one`` compiles: kept by ``to_bytes`` so that a loaded one
    compiles new sizes the same way.

    With ``probe``, before its first compile it calls ``probe(specialized_gm,
    inputs)`` once for sizes ``PROBE_STEP`` above the first ones (inputs of
    that shape, contiguous, uninitialized): a renderer that shares a library
    between sizes (render/cpp/literals.py) then sees two sizes before it
    builds anything. A probe that fails is skipped.

    ``settings["compile_after"]`` (default 1): a new set of sizes compiles at
    its call number ``compile_after``; the calls before run the symbolic graph
    through torch, which holds at every size. The first sizes (``example_inputs``)
    compile at once."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: Sequence[object],
        compile_one: Callable[[torch.fx.GraphModule, list], Callable],
        settings: dict | None = None,
        probe: Callable[[torch.fx.GraphModule, list], object] | None = None,
    ) -> None:
        self.gm = gm
        self.compile_one = compile_one
        self.probe = probe
        self.settings = settings or {}
        self.compiled: dict[tuple, Callable] = {}
        self.waiting: dict[tuple, int] = {}  # calls so far, of sizes not compiled
        # What a compile depends on: the symbolic sizes (input, dim), and the
        # integer inputs. The rest of a layout is fixed by the caller's guards
        # (ember's), or follows from those sizes (tensors a compiled graph made).
        self.sizes, self.ints = _symbolic_reads(gm, example_inputs)
        self.keyed_ints = _used(gm, self.ints)
        self.latest = self._compile(list(example_inputs)) if example_inputs else None

    def to_bytes(self) -> bytes:
        """The symbolic graph and each compile so far; ``from_bytes`` reads it."""
        compiled = [
            [list(key), c.to_bytes()]
            for key, c in self.compiled.items()
            if hasattr(c, "to_bytes")
        ]
        buffer = io.BytesIO()
        torch.save(
            {
                "format": _FORMAT,
                "graph": graph_to_bytes(self.gm),
                "sizes": [list(r) for r in self.sizes],
                "ints": list(self.ints),
                "settings": self.settings,
                "compiled": compiled,
            },
            buffer,
        )
        return buffer.getvalue()

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        compile_for: Callable[[dict], Callable[[torch.fx.GraphModule, list], Callable]],
        load_one: Callable[[bytes], Callable],
    ) -> PerSizeGraph:
        """Rebuild from ``to_bytes()``: ``compile_for(settings)`` gives the
        compile_one for new sizes, ``load_one`` rebuilds each stored compile.
        The graph unpickles (graph_bytes.py): only load what the cache trusts
        (docs/security.md)."""
        state = torch.load(io.BytesIO(data), weights_only=True)
        if state.get("format") != _FORMAT:
            raise ValueError(f"unsupported PerSizeGraph format {state.get('format')}")
        new = cls(graph_from_bytes(state["graph"]), (), compile_for(state["settings"]))
        new.settings = state["settings"]
        new.sizes = [tuple(r) for r in state["sizes"]]
        new.ints = list(state["ints"])
        new.keyed_ints = _used(new.gm, new.ints)
        for key, blob in state["compiled"]:
            new.compiled[tuple(key)] = new.latest = load_one(blob)
        return new

    def __call__(self, *inputs: object) -> object:
        key = self._key(inputs)
        compiled = self.compiled.get(key)
        if compiled is None:
            calls = self.waiting.get(key, 0) + 1
            if calls < self.settings.get("compile_after", 1):
                # A size called once (each length of a generate whose cache
                # grows by a token a step) never repays a compile.
                if len(self.waiting) >= WAITING_LIMIT:
                    self.waiting.clear()
                self.waiting[key] = calls
                return through_torch(self.gm, inputs)
            self.waiting.pop(key, None)
            compiled = self._compile(list(inputs))
        if self.ints:  # the specialized graph takes the tensors only
            return compiled(*tensor_inputs(inputs))
        return compiled(*inputs)

    def _key(self, inputs: Sequence[object]) -> tuple:
        key = [inputs[i].shape[d] for i, d in self.sizes]
        key += [inputs[i] for i in self.keyed_ints]
        return tuple(key)

    def _compile(self, inputs: list) -> Callable:
        with collector_paused():
            if self.probe is not None and not self.compiled:
                self._probe(inputs)
            specialized = specialize(self.gm, inputs)
            try:
                compiled = self.compile_one(specialized, tensor_inputs(inputs))
            except CodegenError as e:  # after the first size: torch runs this one
                log.warning("a graph runs through torch at these sizes: %s", e)
                compiled = specialized
        self.compiled[self._key(inputs)] = self.latest = compiled
        return compiled

    def _probe(self, inputs: list) -> None:
        """``probe`` at sizes ``PROBE_STEP`` above ``inputs``' (same dtypes,
        contiguous); skipped when an input is laid out otherwise or anything
        fails (the sizes may break a relation the graph assumed)."""
        by_symbol = _symbols_of(self.gm)
        if by_symbol is None or not all(
            t.is_contiguous() for t in inputs if isinstance(t, torch.Tensor)
        ):
            return
        shapes = [list(t.shape) if isinstance(t, torch.Tensor) else t for t in inputs]
        for places in by_symbol.values():
            for i, d in places:
                if d is None:
                    shapes[i] += PROBE_STEP
                else:
                    shapes[i][d] += PROBE_STEP
        probe_inputs = [
            torch.empty(shape, dtype=t.dtype, device=t.device)
            if isinstance(t, torch.Tensor)
            else shape
            for t, shape in zip(inputs, shapes)
        ]
        try:
            specialized = specialize(self.gm, probe_inputs)
            self.probe(specialized, tensor_inputs(probe_inputs))
        except Exception as e:  # a probe is an optimization only
            log.info("no probe at other sizes: %s: %s", type(e).__name__, e)

    def __getattr__(self, name: str) -> object:
        # source, target, fallback_ops, kernels ...: those of the latest compile
        return getattr(self.__dict__["latest"], name)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for one compile made at call time
    (a new set of sizes), then one young-generation collection: a full
    collection meanwhile would walk every object alive (torch's, the model's),
    0.1-0.2 s each with transformers loaded, more than the compile itself. A
    compile inside another (the caller's, paused) leaves it to the outer one."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.collect(1)
        gc.enable()


def _symbols_of(
    gm: torch.fx.GraphModule,
) -> dict[str, list[tuple[int, int | None]]] | None:
    """Where each symbol of ``gm``'s traced inputs is: (input, dim), or
    (input, None) for an integer input; None when an input's traced size is
    an expression of symbols rather than one symbol, or nothing was traced."""
    places: dict[str, list[tuple[int, int | None]]] = {}
    for i, node in enumerate(gm.graph.find_nodes(op="placeholder")):
        val = node.meta.get("val")
        sizes = [(None, val)] if isinstance(val, torch.SymInt) else []
        if isinstance(val, torch.Tensor):
            sizes = list(enumerate(val.shape))
        for d, size in sizes:
            if isinstance(size, torch.SymInt):
                name = str(size)
                if not name.isidentifier():
                    return None
                places.setdefault(name, []).append((i, d))
    return places or None


def _used(gm: torch.fx.GraphModule, ints: list[int]) -> list[int]:
    """The integer inputs among ``ints`` that the graph uses. One only passed
    in (a KV cache's count, read by the caller's guards and written back)
    changes nothing compiled, so its value must not cost a compile."""
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    return [i for i in ints if placeholders[i].users]


def _symbolic_reads(
    gm: torch.fx.GraphModule, example_inputs: Sequence[object]
) -> tuple[list[tuple[int, int]], list[int]]:
    """Each (input, dim) whose traced size is symbolic or that the graph reads
    (``aten.sym_size.int``; a graph built by hand has no traced values), and
    each integer input (traced as a size, or an integer example)."""
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    examples = list(example_inputs) or [None] * len(placeholders)
    sizes, ints = [], []
    for i, (node, example) in enumerate(zip(placeholders, examples)):
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt) or isinstance(example, int):
            ints.append(i)
        elif isinstance(val, torch.Tensor):
            sizes += [
                (i, d) for d, s in enumerate(val.shape) if isinstance(s, torch.SymInt)
            ]
    for node in gm.graph.find_nodes(op="call_function", target=sym_size):
        if node.args[0] not in placeholders:
            continue  # a size of a tensor the graph made follows from the inputs'
        read = (placeholders.index(node.args[0]), node.args[1])
        if read not in sizes:
            sizes.append(read)
    return sizes, ints

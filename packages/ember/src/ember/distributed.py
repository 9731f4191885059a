"""DistributedDataParallel and compiled code: DDP's own forward runs as Python
around the compiled wrapped module, and a graph compiled inside a DDP forward is
split at DDP's gradient buckets, so each bucket's all-reduce starts while the
backward of the layers before it still runs (the split torch.compile makes)."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from .backends import Backend, CompileLog


def active_ddp() -> torch.nn.Module | None:
    """The DDP module whose forward is running now, if any (DDP publishes it,
    for compilers, while it calls the module it wraps)."""
    ddp_class = _ddp_class()
    return None if ddp_class is None else ddp_class._get_active_ddp_module()


def is_ddp(module: object) -> bool:
    ddp_class = _ddp_class()
    return ddp_class is not None and isinstance(module, ddp_class)


def _ddp_class() -> type | None:
    if not torch.distributed.is_available():
        return None
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel


class DDPForward:
    """What ``ember.compile(DDP(model))`` runs per call: DDP's ``__call__`` as it
    is (its reducer, logger and hooks are C++ objects no graph can hold), with
    ``ddp.module`` standing for ``compiled`` (the wrapped module, compiled) for
    the length of the call. DDP's forward reaches the module only through that
    attribute, so this is the one place to put the compiled module in."""

    def __init__(self, ddp: torch.nn.Module, compiled: torch.nn.Module) -> None:
        self.ddp = ddp
        self.compiled = compiled
        # What explain() and the tests read of a compiled forward: the wrapped
        # module's.
        self.dispatcher = compiled._compiled_forward.dispatcher
        self.log = compiled._compiled_forward.log
        self.breaks = compiled._compiled_forward.breaks

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        modules = self.ddp._modules
        wrapped = modules["module"]
        modules["module"] = self.compiled
        try:
            return torch.nn.Module.__call__(self.ddp, *args, **kwargs)
        finally:
            modules["module"] = wrapped


@dataclass(frozen=True)
class BucketCaps:
    """DDP's bucket sizes in bytes: the first bucket (the last layers, whose
    gradients are ready first) and every later one."""

    first: int
    rest: int

    @classmethod
    def of(cls, ddp: torch.nn.Module) -> BucketCaps:
        rest = ddp.bucket_bytes_cap
        config = getattr(ddp, "_bucket_config", None)
        return cls(getattr(config, "first_bucket_bytes_cap", rest), rest)


def split_at_buckets(backend: Backend, log: CompileLog) -> Backend:
    """``backend`` itself for a graph compiled outside a DDP forward. Inside one,
    the graph split where DDP's buckets of parameters end (``bucket_pieces``),
    each piece compiled by ``backend`` and run in turn: each piece is its own
    autograd node, so DDP's gradient hooks fire between their backwards."""

    def backend_under_ddp(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        ddp = active_ddp()
        if ddp is None:
            return backend(gm, example_inputs)
        sizes = {
            id(p): p.numel() * p.element_size()
            for p in ddp.parameters()
            if p.requires_grad
        }
        pieces = bucket_pieces(gm, example_inputs, sizes, BucketCaps.of(ddp))
        if len(pieces) == 1:
            return backend(gm, example_inputs)
        log.bucket_pieces.append(len(pieces))
        return SplitGraph.build(gm, example_inputs, pieces, backend)

    # Under DDP, convert captures with fixed sizes (the pieces are split by size).
    handles = getattr(backend, "handles_symbolic_sizes", False)
    backend_under_ddp.handles_symbolic_sizes = handles
    return backend_under_ddp


def bucket_pieces(
    gm: torch.fx.GraphModule,
    example_inputs: list,
    sizes: dict[int, int],
    caps: BucketCaps,
) -> list[list[torch.fx.Node]]:
    """``gm``'s nodes (placeholders and output left out) in consecutive pieces.

    Walking from the output back, as the backward runs, a piece ends once the
    parameters its nodes read (``sizes``: bytes per parameter, by id) fill a
    bucket; the nodes before it start the next. A node that only unpacks a
    result (``getitem``) stays with the node it unpacks, and two pieces merge
    where the boundary falls inside a grad-mode or autocast block of the graph
    (each piece is traced from the mode the graph starts in) or where a value
    that is not a tensor would pass between them (a piece's inputs and outputs
    are tensors)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    param_bytes = {
        node: sizes[id(value)]
        for node, value in zip(placeholders, example_inputs)
        if isinstance(value, torch.Tensor) and id(value) in sizes
    }
    nodes = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    piece_of: dict[torch.fx.Node, int] = {}
    piece, filled, cap, counted = 0, 0, caps.first, set()
    for node in reversed(nodes):
        if filled >= cap:
            piece, filled, cap = piece + 1, 0, caps.rest
        piece_of[node] = -piece  # numbered from the output back: negate to order
        for used in node.all_input_nodes:
            if used in param_bytes and used not in counted:
                counted.add(used)
                filled += param_bytes[used]
    for node in nodes:
        if node.target is operator.getitem and node.args[0] in piece_of:
            piece_of[node] = piece_of[node.args[0]]
    _merge_inside_modes(nodes, piece_of, torch.is_grad_enabled())
    _merge_across_non_tensors(nodes, piece_of)
    pieces: dict[int, list[torch.fx.Node]] = {}
    for node in nodes:
        pieces.setdefault(piece_of[node], []).append(node)
    return [pieces[k] for k in sorted(pieces)]


def _merge_inside_modes(
    nodes: list[torch.fx.Node], piece_of: dict[torch.fx.Node, int], grad: bool
) -> None:
    """Merges the pieces on both sides of each boundary where the grad mode
    differs from ``grad`` (the graph's own at its start) or an autocast block
    is open."""
    entry_grad, autocast_depth = grad, 0
    for before, node in itertools.pairwise(nodes):
        if before.target is torch._C._set_grad_enabled:
            grad = before.args[0]
        elif before.target is torch.amp._enter_autocast:
            autocast_depth += 1
        elif before.target is torch.amp._exit_autocast:
            autocast_depth -= 1
        inside = grad != entry_grad or autocast_depth > 0
        if inside and piece_of[node] != piece_of[before]:
            later = piece_of[node]
            for other in nodes:
                if piece_of[other] == later:
                    piece_of[other] = piece_of[before]


def _merge_across_non_tensors(
    nodes: list[torch.fx.Node], piece_of: dict[torch.fx.Node, int]
) -> None:
    changed = True
    while changed:
        changed = False
        for node in nodes:
            if isinstance(node.meta.get("example_value"), torch.Tensor):
                continue
            last = max(
                (piece_of[u] for u in node.users if u in piece_of),
                default=piece_of[node],
            )
            if last > piece_of[node]:
                low = piece_of[node]
                for other in nodes:
                    if low < piece_of[other] <= last:
                        piece_of[other] = low
                changed = True


@dataclass(frozen=True)
class Piece:
    """One compiled piece of a split graph: it reads ``reads`` (slots of the
    whole graph's values) and writes its outputs to ``writes``; ``frees`` are
    the slots no later piece or output reads."""

    compiled: Callable
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    frees: tuple[int, ...]


class SplitGraph:
    """A captured graph run as consecutive compiled pieces. Slots hold the
    graph's inputs, then the values that pass between pieces."""

    def __init__(
        self, pieces: list[Piece], inputs: int, slots: int, outputs: tuple
    ) -> None:
        self.pieces = pieces
        self.inputs = inputs
        self.slots = slots
        self.outputs = outputs  # per output: ("slot", index) or ("value", v)

    @classmethod
    def build(
        cls,
        gm: torch.fx.GraphModule,
        example_inputs: list,
        pieces: list[list[torch.fx.Node]],
        backend: Backend,
    ) -> SplitGraph:
        """Makes a torch-level GraphModule per piece, with example inputs (the
        graph's own, or zeros shaped like the values capture recorded), and
        compiles each with ``backend``."""
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        slot = {node: i for i, node in enumerate(placeholders)}
        example = dict(zip(placeholders, example_inputs))
        (output,) = [n for n in gm.graph.nodes if n.op == "output"]
        piece_of = {node: i for i, nodes in enumerate(pieces) for node in nodes}
        last_read: dict[torch.fx.Node, int] = {}
        for i, nodes in enumerate(pieces):
            for node in nodes:
                for used in node.all_input_nodes:
                    last_read[used] = i
        returned = set(output.all_input_nodes)
        device = _device(example_inputs)
        compiled_pieces = []
        for i, nodes in enumerate(pieces):
            reads = _unique(
                used
                for node in nodes
                for used in node.all_input_nodes
                if piece_of.get(used) != i
            )
            writes = [
                node
                for node in nodes
                if node in returned
                or any(piece_of.get(u, i) > i for u in node.users if u is not output)
            ]
            for node in writes:
                slot[node] = len(slot)
                example[node] = _zeros_like_meta(node.meta["example_value"], device)
            sub = _piece_module(gm, nodes, reads, writes)
            compiled = backend(sub, [example[n] for n in reads])
            frees = tuple(
                slot[n]
                for n in reads
                if last_read.get(n) == i and n not in returned and n not in writes
            )
            compiled_pieces.append(
                Piece(
                    compiled,
                    tuple(slot[n] for n in reads),
                    tuple(slot[n] for n in writes),
                    frees,
                )
            )
        outputs = tuple(
            ("slot", slot[v]) if isinstance(v, torch.fx.Node) else ("value", v)
            for v in output.args[0]
        )
        return cls(compiled_pieces, len(placeholders), len(slot), outputs)

    def __call__(self, *args: Any) -> tuple:
        values = list(args) + [None] * (self.slots - self.inputs)
        for piece in self.pieces:
            results = piece.compiled(*[values[i] for i in piece.reads])
            for i, result in zip(piece.writes, results):
                values[i] = result
            for i in piece.frees:
                values[i] = None  # autograd keeps what the backward needs
        return tuple(
            values[item] if kind == "slot" else item for kind, item in self.outputs
        )

    def __repr__(self) -> str:
        return f"SplitGraph({len(self.pieces)} pieces at DDP's buckets)"


def _unique(nodes: Any) -> list[torch.fx.Node]:
    return list(dict.fromkeys(nodes))


def _piece_module(
    gm: torch.fx.GraphModule,
    nodes: list[torch.fx.Node],
    reads: list[torch.fx.Node],
    writes: list[torch.fx.Node],
) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in reads:
        env[node] = graph.placeholder(node.name)
        env[node].meta = dict(node.meta)
    for node in nodes:
        env[node] = graph.node_copy(node, env.__getitem__)
    graph.output(tuple(env[n] for n in writes))
    return torch.fx.GraphModule(gm, graph)


def _device(example_inputs: list) -> torch.device:
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    return tensors[0].device if tensors else torch.device("cpu")


def _zeros_like_meta(meta: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A real tensor with the size, strides, dtype and requires_grad capture
    recorded for a value: what compiling a piece that reads it needs."""
    value = torch.empty_strided(
        meta.shape, meta.stride(), dtype=meta.dtype, device=device
    ).zero_()
    return value.requires_grad_(meta.requires_grad)

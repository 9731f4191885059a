"""Split a joint forward+backward aten graph into a forward and a backward graph.

The joint graph takes the flat inputs then the tangents, and returns the forward
outputs then the gradients. A partitioner picks the values the forward saves for
the backward: ``default_partition`` saves every forward value the backward reads;
``min_cut_partition`` finds the cheapest set of values to save (in bytes) from
which the backward can recompute the rest with pointwise and view ops; nodes of a
checkpointed region (``ember_recompute`` in their meta) are never saved.
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import pairwise

import torch
import torch.fx

from .core import LIBRARY_CALLS, POINTWISE, RANDOM, RECOMPUTABLE, VIEWS


@dataclass(frozen=True)
class Partition:
    """``forward(*inputs)`` returns the forward outputs then the saved values;
    ``backward(*saved, *tangents)`` returns one gradient (or None) per grad input.
    ``saved_bytes`` counts saved tensors that are not inputs or views of inputs."""

    forward: torch.fx.GraphModule
    backward: torch.fx.GraphModule
    saved: tuple[str, ...]
    saved_bytes: int


Partitioner = Callable[[torch.fx.GraphModule, int], Partition]


def default_partition(
    joint: torch.fx.GraphModule, num_forward_outputs: int
) -> Partition:
    """Saves each value computed without tangents that the backward reads."""
    graph = _JointView(joint, num_forward_outputs)
    saved = [
        n
        for n in graph.backward_needed
        if n not in graph.tangent_dependent
        and n.op != "get_attr"
        and (n in graph.grads or any(u in graph.backward_ops for u in n.users))
    ]
    return _split(graph, saved)


def min_cut_partition(
    joint: torch.fx.GraphModule, num_forward_outputs: int
) -> Partition:
    """Saves the fewest bytes: cheap pointwise and view ops are recomputed in the
    backward from the saved values instead of being saved themselves, except a
    pointwise value that a backward matmul or convolution reads."""
    graph = _JointView(joint, num_forward_outputs)
    candidates = [
        n
        for n in graph.backward_needed
        if n not in graph.tangent_dependent and n.op != "get_attr"
    ]
    members = set(candidates)
    flow = _FlowGraph()
    for n in candidates:
        forced = _must_recompute(n)
        flow.add(("in", n), ("out", n), _INF if forced else _weight(n))
        if n.op == "placeholder" or not (forced or _recomputable(n, graph)):
            flow.add(flow.source, ("in", n), _INF)
        if n in graph.grads or any(u in graph.backward_ops for u in n.users):
            flow.add(("out", n), flow.sink, _INF)
        for user in n.users:
            if user in members:
                flow.add(("out", n), ("in", user), _INF)
    reachable = flow.source_side()
    saved = [
        n for n in candidates if ("in", n) in reachable and ("out", n) not in reachable
    ]
    return _split(graph, saved)


_INF = 1 << 62


def _recomputable(node: torch.fx.Node, graph: _JointView) -> bool:
    return (
        node.op == "call_function"
        and node.target in RECOMPUTABLE
        and not (node.target in POINTWISE and _read_by_library_call(node, graph))
    )


def _read_by_library_call(node: torch.fx.Node, graph: _JointView) -> bool:
    """Whether a backward library call (a matmul, a convolution) reads ``node``,
    directly or through views. It must then exist as a tensor in the backward:
    recomputing it is a whole extra pass over it, where saving it costs only
    memory it had anyway (eager saves it too: GELU's output for the weight
    gradient of the linear after it)."""
    todo = list(node.users)
    while todo:
        user = todo.pop()
        if user.target in LIBRARY_CALLS and user in graph.backward_ops:
            return True
        if user.target in VIEWS:
            todo.extend(user.users)
    return False


def _must_recompute(node: torch.fx.Node) -> bool:
    """A node of a checkpointed region (``ember_recompute`` in its meta): never saved,
    recomputed from the region's inputs. Random ops and the items of a
    multi-output op are saved instead (recomputing a random op would draw a
    new mask)."""
    return (
        node.op == "call_function"
        and bool(node.meta.get("ember_recompute"))
        and node.target not in RANDOM
        and node.target is not operator.getitem
    )


def _weight(node: torch.fx.Node) -> int:
    """Bytes kept alive by saving ``node``; inputs are alive anyway."""
    if _is_input_view(node):
        return 0
    val = node.meta.get("val")
    if isinstance(val, (int, torch.SymInt)):
        return 1  # a size (docs/dynamic.md): the backward gets it as an int
    if not isinstance(val, torch.Tensor):
        return _INF  # a tuple-valued op: save its getitems instead
    return val.numel() * val.element_size()


def _is_input_view(node: torch.fx.Node) -> bool:
    while node.op == "call_function" and node.target in VIEWS:
        node = node.args[0]
    return node.op == "placeholder"


class _JointView:
    """The joint graph's parts: inputs, tangents, outputs and who depends on what."""

    def __init__(self, joint: torch.fx.GraphModule, num_forward_outputs: int) -> None:
        self.joint = joint
        nodes = list(joint.graph.nodes)
        placeholders = [n for n in nodes if n.op == "placeholder"]
        self.tangents = [n for n in placeholders if n.name.startswith("tangent")]
        self.inputs = [n for n in placeholders if n not in self.tangents]
        outputs = list(nodes[-1].args[0])
        self.forward_outputs = outputs[:num_forward_outputs]
        self.grad_outputs = outputs[num_forward_outputs:]
        self.grads = {g for g in self.grad_outputs if g is not None}
        self.tangent_dependent = _descendants(self.tangents)
        self.backward_needed = _ancestors(self.grads, nodes)
        self.backward_ops = {
            n for n in self.backward_needed if n in self.tangent_dependent
        }


def _descendants(roots: Iterable[torch.fx.Node]) -> set[torch.fx.Node]:
    seen = set(roots)
    queue = deque(seen)
    while queue:
        for user in queue.popleft().users:
            if user not in seen and user.op != "output":
                seen.add(user)
                queue.append(user)
    return seen


def _ancestors(
    roots: Iterable[torch.fx.Node],
    order: list[torch.fx.Node],
    stop: set[torch.fx.Node] = frozenset(),
) -> list[torch.fx.Node]:
    """``roots`` and all they read (not reading past ``stop``), in graph order."""
    seen = set()
    stack = [r for r in roots if r is not None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node not in stop:
            stack.extend(node.all_input_nodes)
    return [n for n in order if n in seen]


def _split(graph: _JointView, saved: list[torch.fx.Node]) -> Partition:
    order = list(graph.joint.graph.nodes)
    fw = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for n in _ancestors([*graph.forward_outputs, *saved, *graph.inputs], order):
        env[n] = fw.node_copy(n, env.__getitem__)
    fw.output(tuple(env[n] for n in [*graph.forward_outputs, *saved]))

    bw = torch.fx.Graph()
    benv: dict[torch.fx.Node, torch.fx.Node] = {}
    for n in saved:
        benv[n] = bw.placeholder(n.name)
        benv[n].meta = dict(n.meta)
    for t in graph.tangents:
        benv[t] = bw.node_copy(t, benv.__getitem__)
    boundary = set(saved) | set(graph.tangents)
    for n in _ancestors(graph.grads, order, stop=boundary):
        if n not in benv:
            if n.op == "placeholder":
                raise AssertionError(f"partition did not save input {n.name}")
            benv[n] = bw.node_copy(n, benv.__getitem__)
    bw.output(tuple(None if g is None else benv[g] for g in graph.grad_outputs))
    for g in (fw, bw):
        g.eliminate_dead_code(is_impure_node=_keeps)
    return Partition(
        torch.fx.GraphModule(graph.joint, fw, class_name="ForwardGraph"),
        torch.fx.GraphModule(graph.joint, bw, class_name="BackwardGraph"),
        tuple(n.name for n in saved),
        sum(_weight(n) for n in saved),
    )


def _keeps(node: torch.fx.Node) -> bool:
    return node.op in ("placeholder", "output") or (
        torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())
    )


class _FlowGraph:
    """A directed graph with capacities and a max-flow/min-cut (Dinic's: each
    phase finds every shortest augmenting path at once, where one search per
    path took most of a 12-layer model's partition)."""

    source, sink = ("source",), ("sink",)

    def __init__(self) -> None:
        self.capacity: dict[object, dict[object, int]] = {}

    def add(self, a: object, b: object, capacity: int) -> None:
        self.capacity.setdefault(a, {})
        self.capacity.setdefault(b, {}).setdefault(a, 0)
        self.capacity[a][b] = min(self.capacity[a].get(b, 0) + capacity, _INF)

    def _levels(self) -> dict[object, int] | None:
        """Each node's distance from the source over arcs with capacity left;
        None once the sink is out of reach (the flow is maximal)."""
        level = {self.source: 0}
        queue = deque([self.source])
        while queue:
            a = queue.popleft()
            for b, cap in self.capacity.get(a, {}).items():
                if cap > 0 and b not in level:
                    level[b] = level[a] + 1
                    queue.append(b)
        return level if self.sink in level else None

    def _blocking_flow(self, level: dict[object, int]) -> None:
        """Pushes flow along shortest paths until none is left: a walk forward
        over arcs one level deeper, each node resuming at the arc it stopped
        at, retreating from dead ends."""
        arcs = {a: list(caps) for a, caps in self.capacity.items()}
        at = dict.fromkeys(arcs, 0)
        path = [self.source]
        while path:
            a = path[-1]
            if a == self.sink:
                steps = list(pairwise(path))
                push = min(self.capacity[x][y] for x, y in steps)
                for x, y in steps:
                    self.capacity[x][y] -= push
                    self.capacity[y][x] += push
                path = [self.source]
                continue
            while at[a] < len(arcs[a]):
                b = arcs[a][at[a]]
                if self.capacity[a][b] > 0 and level.get(b) == level[a] + 1:
                    path.append(b)
                    break
                at[a] += 1
            else:  # a dead end: never entered again in this phase
                path.pop()
                if path:
                    at[path[-1]] += 1

    def source_side(self) -> set[object]:
        """Saturates the graph, then returns the nodes the source still reaches."""
        while (level := self._levels()) is not None:
            self._blocking_flow(level)
        reached = {self.source}
        queue = deque([self.source])
        while queue:
            a = queue.popleft()
            for b, cap in self.capacity.get(a, {}).items():
                if cap > 0 and b not in reached:
                    reached.add(b)
                    queue.append(b)
        return reached

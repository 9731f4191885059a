"""Trace a torch-level fx graph to a functional aten graph, forward or joint.

``trace`` runs the captured graph under the recorder (on meta tensors, or on copies
of the real inputs when an op has no meta kernel) and describes, as a GraphLayout,
how the graph's outputs map back to the user's outputs, which inputs it mutates,
and, for a joint trace, which outputs get tangents and which inputs get gradients.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.fx
from torch.utils import _pytree as pytree

from . import autocast, symbolic
from .decompositions import default_decompositions
from .errors import AotGradError
from .functionalize import MUTATION_RULES
from .layout import (
    ConstantOutput,
    Dynamic,
    GraphLayout,
    GraphOutput,
    InputAlias,
    OutputSpec,
)
from .recorder import (
    AtenRecorder,
    Decompositions,
    LocatingInterpreter,
    NeedsRealTensors,
)
from .symbolic.values import NoShapeRule, has_symbols

log = logging.getLogger("ember.aotgrad")


@dataclass(frozen=True)
class AtenTrace:
    """A traced aten graph and its GraphLayout; ``dynamic`` is None when the
    graph is specialized to the example sizes."""

    gm: torch.fx.GraphModule
    layout: GraphLayout
    dynamic: Dynamic | None = None
    # why a trace asked for symbolic sizes specialized instead
    specialized: str | None = None


def trace(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[object],
    decompositions: Decompositions,
    joint: bool = False,
    standalone: bool = False,
    dynamic_dims: Mapping[int, Sequence[int]] | None = None,
) -> AtenTrace:
    """Trace ``gm`` on ``example_inputs``; see AtenTrace for what comes back.

    ``joint`` also records the backward of every output that requires grad.
    ``standalone`` (trace_to_aten) makes every tensor the user gets back a graph
    output: those that view an input, and those inside nested outputs (a
    torch.return_types, a tuple of tuples), flattened in pytree order.
    ``dynamic_dims`` maps an input's index to the dims whose size is a symbol:
    the graph then reads those sizes from its inputs (docs/dynamic.md); an
    integer input listed (with no dims, ``()``) is a symbol itself. When an
    op has no symbolic shape rule, the trace specializes to the example sizes
    and says why in ``AtenTrace.specialized``.
    Raises AotGradError naming the op and user line for graphs it cannot trace.
    """
    args = (gm, example_inputs, decompositions, joint, standalone)
    specialized = None
    if dynamic_dims:
        try:
            return _trace(*args, True, dynamic_dims)
        except (NoShapeRule, NeedsRealTensors) as e:
            specialized = (
                str(e) if isinstance(e, NoShapeRule) else (f"no meta kernel for {e}")
            )
            log.info("specializing to the example sizes: %s", specialized)
    try:
        traced = _trace(*args, True)
    except NeedsRealTensors as e:
        log.debug("no meta kernel for %s; tracing on copies of the inputs", e)
        with torch.random.fork_rng(devices=[]):
            traced = _trace(*args, False)
    if specialized is not None:
        pinned = _pinned(example_inputs, dynamic_dims)
        traced = dataclasses.replace(traced, specialized=specialized, dynamic=pinned)
    return traced


def _pinned(example_inputs, dynamic_dims) -> Dynamic:
    """Guards that hold only at the example sizes, for a trace that was asked
    for symbolic sizes and specialized: a caller that runs it at other sizes
    without checking its own guards gets the eager graph, never a wrong one."""
    import sympy  # only traces asked for symbolic sizes come here

    env = symbolic.ShapeEnv()
    symbols, guards = {}, []
    for i, dims in sorted(dynamic_dims.items()):
        value = example_inputs[i]
        for d in dims if isinstance(value, torch.Tensor) else [None]:
            size = value if d is None else value.shape[d]
            if size < 2:
                continue
            name = f"s{len(symbols)}"
            symbols[name] = (i, d)
            guards.append(sympy.Eq(env.symbol(name, size), size))
    return Dynamic(symbols, tuple(guards))


def trace_device(example_inputs: Sequence[object]) -> torch.device:
    """The device a traced graph runs on: the first input tensor's (else CPU)."""
    return next(
        (t.device for t in example_inputs if isinstance(t, torch.Tensor)),
        torch.device("cpu"),
    )


def _trace(
    gm, example_inputs, decompositions, joint, standalone, on_meta, dynamic_dims=None
):
    device = trace_device(example_inputs)
    env = symbolic.ShapeEnv() if dynamic_dims else None
    rec = AtenRecorder(decompositions, MUTATION_RULES, device, on_meta, env)
    regions = autocast.has_regions(gm)
    if regions and on_meta:
        if env is not None:
            raise NoShapeRule("autocast regions with symbolic sizes")
        rec.on_device = device
    values = []
    symbols: dict[str, tuple[int, int | None]] = {}
    for i, value in enumerate(example_inputs):
        node = rec.graph.placeholder(f"arg{i}")
        if isinstance(value, torch.Tensor):
            dims = (dynamic_dims or {}).get(i, ())
            value = autocast.lift(_traced_input(value, on_meta, joint), rec.on_device)
            if dims:
                value = _symbolic_input(rec, value, node, i, dims, symbols)
            rec.track(value, node, input_index=i)
        elif type(value) is int and env is not None and i in dynamic_dims:
            value = _symbolic_int(rec, value, node, i, symbols)
        values.append(value)
    with autocast.no_autocast(regions):
        traced = _trace_values(gm, rec, values, joint, standalone)
    if env is None:
        return traced
    return dataclasses.replace(traced, dynamic=Dynamic(symbols, tuple(env.guards)))


def _symbolic_int(rec, value, node, index, symbols) -> torch.SymInt:
    """The integer input ``value`` as a new symbol (0 and 1 stay fixed)."""
    if value < 2:
        raise NoShapeRule(f"integer input {index} is {value} (0 and 1 specialize)")
    name = f"s{len(symbols)}"
    symbols[name] = (index, None)
    sym = rec.env.symbol(name, value)
    rec.sizes.sources[sym] = (node, None)
    node.meta["val"] = traced = rec.env.sym_int(sym)
    return traced


def _symbolic_input(rec, value, node, index, dims, symbols) -> torch.Tensor:
    """``value`` (a meta tensor) with a new symbol as the size of each of ``dims``."""
    names = {}
    for d in dims:
        names[d] = name = f"s{len(symbols)}"
        symbols[name] = (index, d)
    traced = symbolic.symbolic_tensor(rec.env, value, names)
    for d, name in names.items():
        rec.sizes.sources[rec.env.by_name[name]] = (node, d)
    return traced


def _trace_values(gm, rec, values, joint, standalone):
    with torch.enable_grad() if joint else torch.no_grad(), rec:
        outputs = LocatingInterpreter(gm, rec).run(*values)
    flat = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    if standalone:
        flat = pytree.tree_leaves(flat)
    for k, out in enumerate(flat):
        if not isinstance(out, torch.Tensor) and any(
            isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves(out)
        ):
            raise AotGradError(
                f"graph output {k} is a {type(out).__name__} holding tensors; "
                "aot_compile takes graphs that return a flat tuple of tensors "
                "(trace_to_aten flattens nested outputs)"
            )

    graph_outputs: list[torch.fx.Node] = []
    requires_grad: list[bool] = []
    specs: list[OutputSpec] = []
    for out in flat:
        if isinstance(out, torch.SymBool):
            # A relation between sizes has no graph form here: fix the sizes.
            raise NoShapeRule(f"graph output {out} is a relation between sizes")
        if isinstance(out, (torch.SymInt, torch.SymFloat)):
            # A size computed from symbolic sizes (torch.compile's graphs return
            # them): the graph computes it from its inputs, as any size it uses.
            out = rec.node_of(out)
            if isinstance(out, torch.fx.Node):
                graph_outputs.append(out)
                requires_grad.append(False)
                specs.append(GraphOutput(len(graph_outputs) - 1))
                continue
        if not isinstance(out, torch.Tensor):
            specs.append(ConstantOutput(out))
            continue
        ref = rec.ref_of(out)
        if ref.storage.input_index is not None and not standalone:
            if rec.env is not None and has_symbols([s.args for s in ref.chain]):
                # replayed on the real input, the view would keep the example sizes
                raise NoShapeRule("an output that views an input by symbolic sizes")
            specs.append(InputAlias(ref.storage.input_index, ref.chain))
            continue
        node = rec.current(ref)
        if node not in graph_outputs:
            graph_outputs.append(node)
            requires_grad.append(out.requires_grad)
        specs.append(GraphOutput(graph_outputs.index(node)))
    num_user = len(graph_outputs)

    mutated = []
    for i, value in enumerate(values):
        if not isinstance(value, torch.Tensor):
            continue
        storage = rec.refs[id(value)].storage
        if storage.version:
            if joint and value.requires_grad and storage.written_with_grad:
                raise AotGradError(
                    f"graph input {i} requires grad and is written in place "
                    "with grad mode on; the graph runs eagerly"
                )
            mutated.append(i)
            graph_outputs.append(storage.node)
            requires_grad.append(False)

    tangent_outputs: tuple[int, ...] = ()
    grad_inputs: tuple[int, ...] = ()
    if joint:
        tangent_outputs = tuple(
            k
            for k in range(num_user)
            if requires_grad[k] and _is_float(graph_outputs[k])
        )
        grad_inputs = tuple(
            i
            for i, v in enumerate(values)
            if isinstance(v, torch.Tensor) and v.requires_grad
        )
        grads = _record_backward(
            rec, flat, graph_outputs, tangent_outputs, values, grad_inputs
        )
        graph_outputs.extend(grads)

    rec.graph.output(tuple(graph_outputs))
    rec.graph.eliminate_dead_code(is_impure_node=_is_impure)
    root = torch.nn.Module()
    for name, value in rec.constants.items():
        root.register_buffer(name, value)
    aten_gm = torch.fx.GraphModule(root, rec.graph, class_name="AtenGraph")
    log.debug("traced aten graph:\n%s", aten_gm.code)
    layout = GraphLayout(
        tuple(specs),
        num_user,
        tuple(mutated),
        tangent_outputs,
        grad_inputs,
        tuple(requires_grad[:num_user]),
    )
    return AtenTrace(aten_gm, layout)


def _record_backward(rec, flat, graph_outputs, tangent_outputs, values, grad_inputs):
    """Records autograd's backward of the traced outputs; returns the grad nodes."""
    if not tangent_outputs or not grad_inputs:
        return [None] * len(grad_inputs)
    by_node = {}
    for out in flat:
        if isinstance(out, torch.Tensor) and id(out) in rec.refs:
            by_node.setdefault(rec.current(rec.refs[id(out)]), out)
    outs, tangents = [], []
    first_call = next(n for n in rec.graph.nodes if n.op != "placeholder")
    for k in tangent_outputs:
        node = graph_outputs[k]
        val = node.meta["val"]
        tangent = torch.empty(
            val.shape, dtype=val.dtype, device="meta" if rec.on_meta else val.device
        )
        if not rec.on_meta:
            tangent.fill_(1.0)
        tangent = autocast.lift(tangent, rec.on_device)
        with rec.graph.inserting_before(first_call):
            rec.track(tangent, rec.graph.placeholder(f"tangent{k}"))
        outs.append(by_node[node])
        tangents.append(tangent)
    inputs = [values[i] for i in grad_inputs]
    rec.user_loc = None
    rec.recompute = False  # the backward's own ops
    try:
        with rec:
            grads = _vjp(outs, inputs, tangents)
    except (AotGradError, NeedsRealTensors, NoShapeRule):
        raise
    except Exception as e:
        raise AotGradError(
            f"recording the backward failed: {type(e).__name__}: {e}"
        ) from e
    return [None if g is None else rec.current(rec.ref_of(g)) for g in grads]


def _traced_input(value: torch.Tensor, on_meta: bool, joint: bool) -> torch.Tensor:
    if on_meta:
        traced = torch.empty_strided(
            value.shape, value.stride(), dtype=value.dtype, device="meta"
        )
    else:
        traced = value.detach().clone(memory_format=torch.preserve_format)
    if joint and value.requires_grad:
        traced.requires_grad_(True)
    return traced


def _is_float(node: torch.fx.Node) -> bool:
    val = node.meta["val"]
    return val.is_floating_point() or val.is_complex()


def _is_impure(node: torch.fx.Node) -> bool:
    # Dropping an unused random op would shift the RNG stream against eager.
    if node.op in ("placeholder", "output"):
        return True
    tags = getattr(node.target, "tags", ())
    return torch.Tag.nondeterministic_seeded in tags


def trace_to_aten(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[object],
    decompositions: Decompositions | None = None,
) -> torch.fx.GraphModule:
    """A functional GraphModule of aten op overloads computing what ``gm`` computes.

    Inputs are the same flat list as ``gm``'s. The result returns a flat tuple: the
    user's outputs (the tensors of nested ones, such as ``x.max(1)``'s values and
    indices, in pytree order), then the new value of each input written in place.
    ``decompositions`` defaults to the built-in table (``{}`` decomposes nothing).
    """
    table = default_decompositions() if decompositions is None else decompositions
    return trace(gm, example_inputs, table, standalone=True).gm


def _vjp(outs: list, inputs: list, tangents: list) -> tuple:
    """``torch.autograd.grad(outs, inputs, tangents, allow_unused=True)`` by
    autograd's engine itself: the tangents are made to match ``outs``, and the
    Python layer's check of them imports torch's symbolic shapes (sympy,
    0.2 s of a first compile)."""
    engine = torch.autograd.Variable._execution_engine
    return engine.run_backward(
        tuple(outs), tuple(tangents), False, False, tuple(inputs), True, False
    )

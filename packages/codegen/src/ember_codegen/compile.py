"""The public entry: compile one aten graph for a target.

A loop target ("cpp", "triton") runs lower_graph -> schedule -> plan_memory,
then its renderer (render/); "torch" writes a wrapper calling each aten op
through torch, which every graph also keeps as its fallback.
"""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
import torch.fx

from .compiled import CompiledGraph
from .errors import CodegenError
from .locations import graph_locations, relocate_graph
from .lowering.core import c_name
from .lowering.rules import lower_graph
from .render import LOOP_TARGETS, Scheduled, Unsupported, renderer
from .render.cpp.build import Signer
from .render.cpp.literals import Templates
from .render.torch import emit_wrapper
from .render.triton.renderer import interpreted
from .scheduling.fusion import Kernel, schedule
from .scheduling.memory import plan_memory, write_in_place, write_into
from .specialize import INPUT_UPDATES, PerSizeGraph, has_symbolic_sizes

log = logging.getLogger("ember.codegen")

# target -> what it generates. "auto" picks by the inputs' device
# (``_auto_target``).
TARGETS = {
    **{name: renderer(name).description for name in LOOP_TARGETS},
    "torch": "a Python wrapper calling each aten op through torch (always correct)",
}


def compile_graph(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[object],
    target: str = "auto",
    *,
    cache_dir: Path | None = None,
    signer: Signer | None = None,
    check_inputs: bool = True,
    templates: Templates | None = None,
    build: bool = True,
    autotune: bool = False,
    compile_after: int = 1,
) -> CompiledGraph | None:
    """Compile an aten-level GraphModule (flat inputs, flat tuple output).

    ``target`` is "auto" or one of TARGETS. The result is callable with inputs like
    ``example_inputs`` and exposes its source and the ops left to torch. A loop
    target ("cpp", "triton") specializes on the inputs' sizes, strides and
    dtypes; other inputs run through torch. ``cache_dir`` holds compiled C++
    kernels, which are loaded only if their tag verifies with ``signer`` (see
    ``load_library``; the defaults keep them for this process only). Raises
    CodegenError for a graph that is not an aten graph, C++ that does not
    compile, or a loop target this machine cannot run.

    ``check_inputs=False`` drops a loop target's per-call check of each
    input's dtype, shape, strides and device. Pass it only when the caller
    guarantees every call's inputs match ``example_inputs`` in all four (its own
    guards check them); an input that differs then gives wrong results or a crash.

    A graph that reads sizes from its inputs (``aten.sym_size.int``; aotgrad's
    graphs with symbolic sizes) gives a callable that compiles the graph again
    for each new set of sizes it is called with (``specialize.PerSizeGraph``).
    ``templates`` (what that gives the compile of each size) lets sizes whose
    C++ differs only in literals share one library (render/cpp/literals.py);
    ``build=False`` only shows it this graph's C++ and returns None. With
    ``compile_after=n``, a new set of sizes compiles at its n-th call, and the
    calls before run the graph through torch (the first sizes, those of
    ``example_inputs``, compile at once).

    ``autotune=True`` (ember's ``mode="max-autotune"``): each Triton kernel's
    first launch times a few warp counts and keeps the fastest in
    ``cache_dir`` (render/triton/tuning.py); the C++ target ignores it.
    """
    if target == "auto":
        target = _auto_target(example_inputs)
    if target not in TARGETS:
        raise ValueError(
            f"unknown codegen target {target!r}; available: auto, {', '.join(TARGETS)}"
        )
    if target in LOOP_TARGETS and not renderer(target).available():
        raise CodegenError(
            f"the {target!r} target cannot run here: {renderer(target).needs}"
        )
    if has_symbolic_sizes(gm):
        # Kernels take sizes as constants: one compile per set of sizes.
        settings = {
            "target": target,
            "check_inputs": check_inputs,
            "autotune": autotune,
            "compile_after": compile_after,
        }
        compile_one = per_size_compiler(settings, cache_dir, signer, Templates())
        probe = functools.partial(compile_one, build=False)
        return PerSizeGraph(gm, example_inputs, compile_one, settings, probe)
    title = f"{type(gm).__name__}, {sum(1 for _ in gm.graph.nodes)} nodes"
    wrapper = emit_wrapper(gm, title)
    constants = {name: getattr(gm, name) for name in wrapper.constant_names}
    locations = graph_locations(gm)
    reason = _not_for_loops(gm, example_inputs, target) if target != "torch" else None
    if target == "torch" or reason:
        if reason:
            log.info("graph %s runs through torch: %s", title, reason)
        return _through_torch(wrapper, constants, locations)

    lowered = lower_graph(gm, example_inputs)
    steps = schedule(lowered)
    outputs = {n for n in lowered.outputs if n}
    plan = plan_memory(steps, lowered.specs, outputs, _updates(gm, lowered))
    steps.steps = [
        write_into(
            write_in_place(s, plan.in_place), plan.takes.get(i, {}), lowered.specs
        )
        if isinstance(s, Kernel)
        else s
        for i, s in enumerate(steps.steps)
    ]
    try:
        rendered = renderer(target).render(
            Scheduled(
                title,
                lowered,
                steps,
                plan,
                check_inputs,
                _device(example_inputs),
                sizes_vary=templates is not None,
            )
        )
    except Unsupported as e:
        log.info("graph %s runs through torch: %s", title, e)
        return _through_torch(wrapper, constants, locations)
    lifted = ()
    if templates is not None and target == "cpp":
        lifted = templates.choose(rendered.kernel_source)
    if not build:
        return None

    def compiled(lifted: tuple[int, ...]) -> CompiledGraph:
        return CompiledGraph(
            rendered.wrapper_source,
            target,
            lowered.fallback_ops,
            constants,
            rendered.kernel_source,
            rendered.kernels,
            wrapper.source,
            cache_dir,
            locations,
            signer,
            lifted,
            autotune,
        )

    if not lifted:
        return compiled(())
    try:
        return compiled(lifted)
    except CodegenError as e:  # the template: this size builds as it is
        log.info("sizes of graph %s build one by one: %s", title, e)
        templates.refuse(rendered.kernel_source)
        return compiled(())


def _device(example_inputs: Sequence[object]) -> str:
    """The device of the graph's tensor inputs, with its index ("cuda:0";
    "cpu" when it has none)."""
    for value in example_inputs:
        if isinstance(value, torch.Tensor):
            device = value.device
            if device.type == "cuda" and device.index is None:
                device = torch.device("cuda", torch.cuda.current_device())
            return str(device)
    return "cpu"


def _through_torch(wrapper, constants: dict, locations: tuple) -> CompiledGraph:
    """The graph as the "torch" target's wrapper: each aten op through torch."""
    return CompiledGraph(
        wrapper.source, "torch", wrapper.fallback_ops, constants, locations=locations
    )


def _auto_target(example_inputs: Sequence[object]) -> str:
    """ "cpp" for CPU inputs when a C++ compiler runs; "triton" for CUDA inputs
    when Triton is installed (else "torch", saying so once); else "torch"."""
    on_cuda = any(isinstance(v, torch.Tensor) and v.is_cuda for v in example_inputs)
    if not on_cuda:
        return "cpp" if renderer("cpp").available() else "torch"
    if renderer("triton").available():
        return "triton"
    if not _warned_no_triton:
        _warned_no_triton.append(True)
        warnings.warn(
            "ember: Triton is not installed, so graphs on CUDA tensors run "
            "through torch op by op; pip install 'ember-codegen[triton]'",
            stacklevel=3,
        )
    return "torch"


_warned_no_triton: list[bool] = []


def per_size_compiler(
    settings: dict,
    cache_dir: Path | None,
    signer: Signer | None,
    templates: Templates,
) -> Callable[[torch.fx.GraphModule, list], CompiledGraph]:
    """How a PerSizeGraph compiles a new set of sizes (``settings``: target and
    check_inputs, as ``compile_graph`` was given them; ``templates``: the
    graph's, one for all its sizes)."""

    def compile_one(
        specialized: torch.fx.GraphModule, inputs: list, build: bool = True
    ) -> CompiledGraph | None:
        return compile_graph(
            specialized,
            inputs,
            settings["target"],
            cache_dir=cache_dir,
            signer=signer,
            check_inputs=settings["check_inputs"],
            templates=templates,
            build=build,
            autotune=settings.get("autotune", False),
        )

    return compile_one


def load_per_size_graph(
    data: bytes,
    cache_dir: Path | None = None,
    signer: Signer | None = None,
    locations: Mapping[str, str] | None = None,
) -> PerSizeGraph:
    """A PerSizeGraph from ``to_bytes()``: its stored compiles load as
    ``CompiledGraph.from_bytes`` does, and new sizes compile as it did (sharing
    the libraries of the stored ones where their C++ allows). ``locations`` maps
    stored user locations to where the code is now, for the stored compiles and
    the sizes compiled from here on."""
    templates = Templates()

    def load_one(blob: bytes) -> CompiledGraph:
        compiled = CompiledGraph.from_bytes(blob, cache_dir, locations, signer)
        if compiled.target == "cpp" and compiled.cpp_source:
            templates.remember(compiled.cpp_source, compiled.lifted)
        return compiled

    per_size = PerSizeGraph.from_bytes(
        data,
        lambda settings: per_size_compiler(settings, cache_dir, signer, templates),
        load_one,
    )
    relocate_graph(per_size.gm, locations or {})
    return per_size


def _updates(gm: torch.fx.GraphModule, lowered) -> dict[str, str]:
    """Output buffer -> input name, for the updates ``gm`` declares."""
    pairs = gm.meta.get(INPUT_UPDATES, ())
    updates = {}
    for out, inp in pairs:
        name = lowered.outputs[out]
        # An output listed twice (an input's value returned, too) stays fresh.
        if name and lowered.outputs.count(name) == 1 and name not in lowered.inputs:
            updates[name] = lowered.inputs[inp]
    return updates


def _plain_name(name: str) -> bool:
    """A name the C++ and Python sources can use as it is."""
    return name.isidentifier() and c_name(name) == name


def _not_for_loops(
    gm: torch.fx.GraphModule, example_inputs: Sequence[object], target: str
) -> str | None:
    """Why the whole graph must run through torch, or None."""
    # C++ kernels run on CPU tensors; Triton's on the GPU, or on CPU tensors
    # under its interpreter.
    device = "cpu" if target == "cpp" or interpreted() else "cuda"
    for value in example_inputs:
        if not isinstance(value, torch.Tensor):
            return f"an input is a {type(value).__name__}, not a tensor"
        if value.device.type != device or value.layout != torch.strided:
            return f"an input is on {value.device} with layout {value.layout}"
    for node in gm.graph.nodes:
        if node.op == "get_attr" and not _plain_name(node.target):
            return f"constant {node.target!r} is not a plain name"
        if node.op == "get_attr":
            value = getattr(gm, node.target)
            if isinstance(value, torch.Tensor) and value.device.type != device:
                return f"constant {node.target!r} is on {value.device}"
        op = node.target
        if isinstance(op, torch._ops.OpOverload) and op._schema.is_mutable:
            # Lowered views would not see the mutation; the torch wrapper does.
            return f"{op} mutates its input"
    return None

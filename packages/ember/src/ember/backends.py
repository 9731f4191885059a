"""The named backends and how a backend argument is resolved.

A backend is ``backend(gm, example_inputs) -> callable`` (the capture contract).
The built-in ones are made per compile from the Config, and report what they did
(graphs compiled, ops left to torch, graphs run eagerly) into a CompileLog.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch.fx

import ember_aotgrad
import ember_codegen

from .config import Config
from .logs import warn_user

Backend = Callable[[torch.fx.GraphModule, list], Callable]


@dataclass
class CompileLog:
    """What happened while compiling, for explain() and the tests."""

    graphs: list[torch.fx.GraphModule] = field(default_factory=list)
    fallback_ops: set[str] = field(default_factory=set)
    generated_code: list[str] = field(default_factory=list)
    eager_graph_reasons: list[str] = field(default_factory=list)


BACKENDS: dict[str, Callable[[Config, CompileLog], Backend]] = {}


def register_backend(name: str):
    def register(factory):
        BACKENDS[name] = factory
        return factory

    return register


@register_backend("eager")
def _eager(config: Config, log: CompileLog) -> Backend:
    def backend(gm, example_inputs):
        return gm

    return backend


@register_backend("aot_eager")
def _aot_eager(config: Config, log: CompileLog) -> Backend:
    def run_with_torch(aten_gm, example_inputs):
        return aten_gm

    return _through_aotgrad(run_with_torch, log)


@register_backend("ember")
def _ember(config: Config, log: CompileLog) -> Backend:
    def codegen(aten_gm, example_inputs):
        try:
            compiled = ember_codegen.compile_graph(
                aten_gm,
                example_inputs,
                target=config.codegen_target,
                cache_dir=config.cache_dir / "kernels",
            )
        except ember_codegen.CodegenError as e:
            log.eager_graph_reasons.append(str(e))
            warn_user(f"ember: an aten graph runs with torch instead of codegen: {e}")
            return aten_gm
        log.fallback_ops.update(compiled.fallback_ops)
        log.generated_code.append(compiled.source)
        return compiled

    return _through_aotgrad(codegen, log)


def _through_aotgrad(fw_compiler, log: CompileLog) -> Backend:
    def backend(gm, example_inputs):
        try:
            return ember_aotgrad.aot_compile(gm, example_inputs, fw_compiler)
        except ember_aotgrad.AotGradError as e:
            # The torch-level graph still runs correctly under torch's autograd.
            # (torch.fx appends the failing node to the message: keep the reason.)
            reason = str(e).split("\n\n")[0]
            log.eager_graph_reasons.append(reason)
            warn_user(f"ember: a captured graph runs as captured, with torch: {reason}")
            return gm

    return backend


def resolve_backend(backend: str | Backend, config: Config, log: CompileLog) -> Backend:
    """The backend callable for a name or a user callable; ValueError if unknown."""
    if callable(backend):
        return backend
    if backend not in BACKENDS:
        raise ValueError(
            f"unknown backend {backend!r}; valid backends: {', '.join(BACKENDS)} "
            f"or a callable backend(gm, example_inputs)"
        )
    return BACKENDS[backend](config, log)

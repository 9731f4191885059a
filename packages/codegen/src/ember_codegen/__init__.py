"""ember-codegen: aten graphs into compiled callables.

``compile_graph(gm, example_inputs, target="auto")`` is the entry. Its layers are
public for downstream compilers: ``lower_graph`` (aten graph -> loop IR),
``schedule`` (fusion into kernels), ``plan_memory``, ``emit_source`` (C++) and
``load_library`` (compile, cache, load; ``KeySigner`` vouches for cached kernels);
see docs/codegen.md.
"""

import importlib

__version__ = "0.2.0"

# Each public name and the module that defines it. A module is imported when one
# of its names is first used, so loading a cached kernel does not import the
# lowering, the scheduler or the C++ renderer (docs/architecture.md, "Import cost").
_EXPORTS = {
    "KeySigner": "render.cpp.build",
    "Signer": "render.cpp.build",
    "build_seconds": "render.cpp.build",
    "load_library": "render.cpp.build",
    "TARGETS": "compile",
    "compile_graph": "compile",
    "load_per_size_graph": "compile",
    "CompiledGraph": "compiled",
    "emit_source": "render.cpp.kernels",
    "KernelInfo": "render",
    "CodegenError": "errors",
    "format_ir": "ir.nodes",
    "LOWERINGS": "lowering.rules",
    "lower_graph": "lowering.rules",
    "register": "lowering.rules",
    "plan_memory": "scheduling.memory",
    "GraphProfile": "profile",
    "KernelTime": "profile",
    "ProfileReport": "profile",
    "profiling": "profile",
    "schedule": "scheduling.fusion",
    "PerSizeGraph": "specialize",
    "graph_from_bytes": "graph_bytes",
    "graph_to_bytes": "graph_bytes",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
    globals()[name] = value = getattr(module, name)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})

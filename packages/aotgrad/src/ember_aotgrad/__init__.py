"""ember-aotgrad: captured torch-level graphs down to functional aten graphs.

``aot_compile(gm, example_inputs, fw_compiler, ...)`` is the entry;
``save_compiled_aot``/``load_compiled_aot`` store what it returns. See
docs/aotgrad.md for the contract and the core op set.
"""

from .lazy import lazy_names

__version__ = "0.2.0"

# Each public name and the module that defines it. A module is imported when one
# of its names is first used, so loading a cached graph does not import the tracer
# and its decompositions (docs/architecture.md, "Import cost").
_EXPORTS = {
    "aot_compile": "aot",
    "needs_backward": "aot",
    "CORE_OPS": "core",
    "is_core": "core",
    "default_decompositions": "decompositions",
    "register_decomposition": "decompositions",
    "decomposition_changes": "table_changes",
    "AotGradError": "errors",
    "Partition": "partition",
    "default_partition": "partition",
    "min_cut_partition": "partition",
    "BackwardPlan": "runtime_wrapper",
    "CompiledAot": "runtime_wrapper",
    "LoadCompiled": "serialize",
    "SaveCompiled": "serialize",
    "load_compiled_aot": "serialize",
    "save_compiled_aot": "serialize",
    "MetaRulesMode": "meta",
    "meta_result": "meta",
    "Dynamic": "layout",
    "GraphLayout": "layout",
    "trace_to_aten": "trace",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_names(__name__, _EXPORTS, globals())

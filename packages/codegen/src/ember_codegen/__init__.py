"""ember-codegen: aten graphs into compiled callables.

``compile_graph(gm, example_inputs, target="auto")`` is the entry. Its layers are
public for downstream compilers: ``lower_graph`` (aten graph -> loop IR),
``schedule`` (fusion into kernels), ``plan_memory``, ``emit_source`` (C++) and
``load_library`` (compile, cache, load; ``KeySigner`` vouches for cached kernels);
see docs/codegen.md.
"""

from .build import KeySigner, Signer, load_library
from .compile import TARGETS, compile_graph
from .compiled import CompiledGraph
from .cpp import emit_source
from .cpp_wrapper import KernelInfo
from .errors import CodegenError
from .ir import format_ir
from .lowering import LOWERINGS, lower_graph, register
from .memory import plan_memory
from .profile import GraphProfile, KernelTime, ProfileReport, profiling
from .scheduler import schedule

__version__ = "0.2.0"

__all__ = [
    "LOWERINGS",
    "TARGETS",
    "CodegenError",
    "CompiledGraph",
    "GraphProfile",
    "KernelInfo",
    "KernelTime",
    "KeySigner",
    "ProfileReport",
    "Signer",
    "compile_graph",
    "emit_source",
    "format_ir",
    "load_library",
    "lower_graph",
    "plan_memory",
    "profiling",
    "register",
    "schedule",
]

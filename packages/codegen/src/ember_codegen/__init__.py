"""ember-codegen: aten graphs into compiled callables.

``compile_graph(gm, example_inputs, target="auto")`` is the entry; see
docs/codegen.md for the layers and the targets.
"""

from .compile import TARGETS, compile_graph
from .compiled import CompiledGraph
from .errors import CodegenError

__version__ = "0.1.0"

__all__ = ["TARGETS", "CodegenError", "CompiledGraph", "compile_graph"]

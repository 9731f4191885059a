"""The error codegen raises for a graph it cannot compile."""


class CodegenError(Exception):
    """A graph or target codegen cannot handle; the message says which node or
    which target, and callers may run the graph with torch instead."""

"""The error aotgrad raises for a graph it cannot prepare."""


class AotGradError(Exception):
    """A graph aotgrad cannot trace or differentiate; the message names the op and
    the user's source line where known. Callers may run the graph eagerly instead."""

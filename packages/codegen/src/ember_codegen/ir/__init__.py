"""The loop IR every stage of codegen shares: nodes (``nodes.py``: one per
computed tensor, defined by scalar expressions over loads) and their index
expressions (``indexing.py``: affine sums of loop variables)."""

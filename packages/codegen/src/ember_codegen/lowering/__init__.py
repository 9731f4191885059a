"""Lowering: aten graph to loop IR. ``core.py`` holds the registry and the
walk that applies it; each family module (pointwise, reduce, layout, index,
scatter) registers its rules; ``rules.py`` is the registry with all of them."""

"""The C++ target: loop kernels (``kernels.py``, with scalar expressions in
``expr.py`` and reductions in ``reduce.py``), the renderer and launch
(``renderer.py``), loading a built library (``load.py``) and the compiler
driver with its kernel cache (``build.py``)."""

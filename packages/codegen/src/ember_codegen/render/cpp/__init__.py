"""The C++ target: loop kernels (``kernels.py``, with scalar expressions in
``expr.py`` and reductions in ``reduce.py``), their Python wrapper
(``wrapper.py``) and the compiler driver with its kernel cache (``build.py``)."""

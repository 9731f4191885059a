"""The Triton target: loop kernels as ``@triton.jit`` functions
(``kernels.py``), called by the shared loop wrapper with their tensors and a
grid (``renderer.py``), loaded by executing their module (``load.py``). On CPU
tensors it runs under Triton's interpreter (``TRITON_INTERPRET=1``)."""

"""Builds the optional C++ guard extension, ``ember_runtime._guards``.

Metadata lives in pyproject.toml. The extension is optional: without a C++
compiler (or without pybind11, in a build that skips isolation) the package still
installs, and ember_runtime.guards falls back to its pure-Python check.
"""

from setuptools import setup

try:
    from pybind11.setup_helpers import Pybind11Extension
except ImportError:
    ext_modules = []
else:
    ext_modules = [
        Pybind11Extension(
            "ember_runtime._guards",
            ["src/ember_runtime/_guards.cpp"],
            cxx_std=17,
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]

setup(ext_modules=ext_modules)

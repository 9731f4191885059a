"""Shared helpers: aten graphs from plain functions, and a C++ compile that uses a
per-session temporary kernel cache."""

import importlib.util
import os

import gpu_compile
import pytest
import torch
import torch.fx

from ember_codegen import compile_graph


def aten_graph(fn, user_loc=None):
    gm = torch.fx.symbolic_trace(fn)
    if user_loc:
        for node in gm.graph.nodes:
            if node.op == "call_function":
                node.meta["user_loc"] = user_loc
    return gm


@pytest.fixture(scope="session")
def kernel_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("kernels")


@pytest.fixture
def cpp(kernel_cache):
    """``cpp(fn, *inputs)`` compiles ``fn``'s aten graph for the C++ target."""

    def build(fn, *inputs):
        return compile_graph(
            aten_graph(fn), list(inputs), target="cpp", cache_dir=kernel_cache
        )

    return build


# The loop targets the lowering tests run on: C++, and Triton where it runs
# (under its interpreter on CPU tensors, ``nox -s triton``).
LOOP_TARGETS = ["cpp"] + (
    ["triton"]
    if importlib.util.find_spec("triton") and os.environ.get("TRITON_INTERPRET") == "1"
    else []
)


# The Triton modules this session rendered, compiled for a GPU at its end
# when EMBER_TRITON_GPU_COMPILE=1 (nox -s triton sets it; gpu_compile.py).
TRITON_SOURCES: set[str] = set()


@pytest.fixture(scope="session", autouse=True)
def triton_modules_compile_for_a_gpu():
    yield
    if TRITON_SOURCES and os.environ.get("EMBER_TRITON_GPU_COMPILE") == "1":
        bad = gpu_compile.failures(sorted(TRITON_SOURCES))
        assert not bad, "kernels that do not compile for a GPU:\n" + "\n".join(bad)


@pytest.fixture(params=LOOP_TARGETS)
def loops(request, kernel_cache):
    """``loops(fn, *inputs)`` compiles ``fn``'s aten graph for each loop target
    in turn (``compiled.target`` says which); neither may leave the graph to
    torch whole."""

    def build(fn, *inputs):
        compiled = compile_graph(
            aten_graph(fn), list(inputs), target=request.param, cache_dir=kernel_cache
        )
        assert compiled.target == request.param
        if compiled.target == "triton":
            TRITON_SOURCES.add(compiled.cpp_source)
        return compiled

    return build


def lowered(compiled) -> bool:
    """Whether every op ran as generated loops: no op through torch."""
    return compiled.fallback_ops == ()


def check(compiled, fn, *inputs, **tolerance):
    """The compiled graph returns what eager returns, with torch's strides."""
    got, want = compiled(*inputs), fn(*inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, equal_nan=True, **tolerance)
        if w.numel() > 1:
            assert g.stride() == w.stride()


def raises_like_torch(compiled, fn, *inputs):
    """The compiled graph raises the exception eager raises, with its message."""
    with pytest.raises(Exception) as eager:
        fn(*inputs)
    with pytest.raises(eager.type) as got:
        compiled(*inputs)
    assert str(got.value) == str(eager.value)

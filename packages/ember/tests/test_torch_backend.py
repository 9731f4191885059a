"""ember as a torch.compile backend: torch's capture, ember's aotgrad and codegen.
Each case runs through ``torch.compile(..., backend="ember")``, found by its
entry point, and compares with eager on fresh random data."""

import importlib.metadata

import pytest
import torch
import torch.nn.functional as F
from conftest import train_block_like_eager

from ember import torch_backend
from ember.demo import Block


@pytest.fixture(autouse=True)
def fresh_torch_compile():
    torch.compiler.reset()
    yield
    torch.compiler.reset()


def _new_code() -> int:
    return len(torch_backend.LOG.generated_code)


def test_the_entry_point_names_the_backend_and_torch_lists_it():
    (point,) = importlib.metadata.entry_points(
        group="torch_dynamo_backends", name="ember"
    )
    assert point.load() is torch_backend.torch_compile_backend
    assert "ember" in torch.compiler.list_backends()


def test_demo_block_matches_eager_and_runs_ember_kernels():
    torch.manual_seed(0)
    block = Block().eval()
    compiled = torch.compile(block, backend="ember")
    before = _new_code()
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 8, 64)
            torch.testing.assert_close(compiled(x), block(x))
    generated = torch_backend.LOG.generated_code[before:]
    assert len(generated) == 1  # one graph, compiled once
    assert "#pragma omp" in generated[0] or "for (" in generated[0]


def test_training_step_gradients_match_eager():
    train_block_like_eager(lambda block: torch.compile(block, backend="ember"))


def test_symbolic_sizes_from_torch_compile_serve_every_size():
    """torch.compile makes the changed dim symbolic on its recompile (and
    passes the size as a SymInt input): ember keeps it symbolic, and each
    size still matches eager, on both sides of a size-dependent op."""

    def fn(x, w):
        rows = x.shape[0]
        return F.gelu(x @ w).reshape(rows, -1).sum(0) * rows

    compiled = torch.compile(fn, backend="ember")
    graphs = len(torch_backend.LOG.cache_results)
    w = torch.randn(6, 4)
    for rows in (3, 5, 9, 17, 4):
        x = torch.randn(rows, 6)
        torch.testing.assert_close(compiled(x, w), fn(x, w))
    # The first size, then one symbolic graph for the rest.
    assert len(torch_backend.LOG.cache_results) - graphs == 2


def test_ember_options_pass_through_torch_compile():
    compiled = torch.compile(
        lambda x: x.sin() + 1, backend="ember", options={"codegen_target": "torch"}
    )
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), x.sin() + 1)
    with pytest.raises(Exception, match="unknown ember option 'no_such_option'"):
        torch.compile(lambda x: x + 1, backend="ember", options={"no_such_option": 1})(
            x
        )


def test_a_graph_whose_sizes_must_stay_fixed_compiles_per_size():
    """max_pool1d reads its length as a number: aotgrad fixes the sizes, and
    the graph torch.compile made symbolic compiles once per length instead of
    running the rest with torch (or, from the disk cache, a graph pinned to
    another length)."""

    def fn(x):
        return F.max_pool1d(x.sin(), 3, ceil_mode=True)

    compiled = torch.compile(fn, backend="ember")
    before = len(torch_backend.LOG.generated_code)
    for length in (6, 10, 14, 18, 14):
        x = torch.randn(2, 3, length)
        torch.testing.assert_close(compiled(x), fn(x))
    assert any("sizes stay fixed" in r for r in torch_backend.LOG.dynamic_reasons)
    # 6 (static), then 10, 14 and 18 each compiled for its own length.
    assert len(torch_backend.LOG.generated_code) - before >= 4


def test_a_relation_between_sizes_returned_is_this_calls_answer():
    def fn(x):
        return x.sin(), x.shape[0] > 4

    compiled = torch.compile(fn, backend="ember")
    for rows in (3, 5, 7, 2, 6):
        x = torch.randn(rows, 4)
        values, bigger = compiled(x)
        torch.testing.assert_close(values, x.sin())
        assert bigger is (rows > 4)


def test_a_float_function_of_a_size_fixes_the_sizes_and_says_why():
    """``x / math.sqrt(x.shape[0])``: torch.compile's graph calls sqrt on the
    symbolic size; ember fixes the sizes (one compile per size), the reason
    names the function, and every size matches eager."""
    import math

    def fn(x):
        return x / math.sqrt(x.shape[0])

    compiled = torch.compile(fn, backend="ember")
    for rows in (3, 5, 7, 5):
        x = torch.randn(rows, 4)
        torch.testing.assert_close(compiled(x), fn(x))
    reasons = torch_backend.LOG.dynamic_reasons
    assert any("math.sqrt of a symbolic size" in r for r in reasons), reasons

"""Seeded random ops: a compiled function reproduces eager's draws on every call,
the compiling one included, and leaves the global generator where eager leaves it."""

import pytest
import torch
import torch.nn.functional as F

import ember

# A graph that falls back to torch warns: the draws must come from compiled code.
pytestmark = pytest.mark.filterwarnings("error::UserWarning")


def draws(x):
    return (
        torch.randn_like(x)
        + torch.rand(x.shape)
        + torch.randint(0, 10, x.shape)
        + torch.randperm(x.shape[-1])
        + torch.bernoulli(torch.full_like(x, 0.5))
        + F.dropout(x, 0.5, training=True)
    )


def draws_around_a_break(x):
    y = torch.rand_like(x) * x
    print("a graph break between the draws")
    return y + torch.randn(x.shape)


class Noisy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.lin(x)) + torch.randn_like(x)


def _seeded(fn, x, seed):
    torch.manual_seed(seed)
    out = fn(x)
    return out, torch.rand(4)  # where the generator was left


@pytest.mark.parametrize("fn", [draws, draws_around_a_break, Noisy()])
def test_seeded_calls_reproduce_eager_from_the_first_call(fn, capsys):
    compiled = ember.compile(fn)
    for seed in (0, 0, 1, 2):
        x = torch.randn(3, 8)
        expected, expected_next = _seeded(fn, x, seed)
        actual, actual_next = _seeded(compiled, x, seed)
        torch.testing.assert_close(actual, expected)
        torch.testing.assert_close(actual_next, expected_next)


def fixed_shape_draws(x):
    return x + torch.rand(4, 8) + torch.randn(8)


@pytest.mark.parametrize("backend", ["ember", "aot_eager"])
def test_a_graph_loaded_from_the_cache_draws_anew(tmp_path, backend):
    """A draw whose arguments are all constants: the stored graph once froze
    it into one tensor (docs/runtime.md, "How a graph is stored")."""
    options = {"cache_dir": tmp_path}
    ember.compile(fixed_shape_draws, backend=backend, options=options)(torch.randn(8))
    loaded = ember.compile(fixed_shape_draws, backend=backend, options=options)
    for seed in (0, 1):
        x = torch.randn(8)
        expected, expected_next = _seeded(fixed_shape_draws, x, seed)
        actual, actual_next = _seeded(loaded, x, seed)
        torch.testing.assert_close(actual, expected)
        torch.testing.assert_close(actual_next, expected_next)
    assert loaded.log.cache_results == ["hit"]

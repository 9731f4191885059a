"""The graph cache serves code that moved to other lines or another file, and
everything a hit shows (generated source, repeated warnings, explain) names where
the code is now, exactly as a fresh compile there would."""

import warnings

import torch

import ember

# f compiles to kernels whose comments name its lines; g makes aotgrad refuse
# its graph, with a warning that names the line of the in-place transpose.
_PROGRAM = """
import torch

def f(x):
    y = torch.sin(x) * 2
    return y + y.sum(-1, keepdim=True)

def g(x):
    x.t_()
    return x + 1
"""
# The same code with f's two lines as one: which nodes share a line changes, so
# no rename can map the stored locations onto these.
_JOINED = _PROGRAM.replace("* 2\n    return", "* 2; return")


def program(path, source, blank_lines=0) -> dict:
    """The program's functions, compiled as if read from ``path``."""
    namespace: dict = {}
    exec(compile("\n" * blank_lines + source, str(path), "exec"), namespace)
    return namespace


def what_it_shows(functions, cache_dir) -> dict:
    """Cache results, generated code, warnings and explain output of f and g."""
    x = torch.randn(3, 5)
    shown = {"cache": [], "code": [], "warnings": [], "reasons": []}
    options = {"cache_dir": cache_dir}
    for name in ("f", "g"):
        fn = functions[name]
        compiled = ember.compile(fn, options=options)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.testing.assert_close(compiled(x.clone()), fn(x.clone()))
        shown["cache"] += compiled.log.cache_results
        shown["code"] += compiled.log.generated_code
        shown["warnings"] += [str(w.message) for w in caught]
        shown["reasons"] += compiled.log.eager_graph_reasons
    explained = ember.explain(functions["f"], options=options)(x)
    shown["explain"] = explained.generated_code
    return shown


def test_a_hit_names_where_the_code_is_now(tmp_path):
    a = program(tmp_path / "projA" / "model.py", _PROGRAM)
    b = program(tmp_path / "projB" / "other.py", _PROGRAM, blank_lines=4)
    assert what_it_shows(a, tmp_path / "cache")["cache"] == ["miss", "miss"]
    moved = what_it_shows(b, tmp_path / "cache")
    assert moved.pop("cache") == ["hit", "hit"]
    fresh = what_it_shows(b, tmp_path / "fresh")
    assert fresh.pop("cache") == ["miss", "miss"]
    assert moved == fresh
    other = tmp_path / "projB" / "other.py"
    assert f"{other}:9" in moved["code"][0]  # y = torch.sin(x) * 2
    assert f"{other}:10" in moved["code"][0]  # return y + y.sum(...)
    assert f"(from {other}:13)" in moved["warnings"][0]  # x.t_()
    assert "projA" not in repr(moved)


def test_code_that_shares_lines_differently_is_compiled_again(tmp_path):
    a = program(tmp_path / "projA" / "model.py", _PROGRAM)
    joined = program(tmp_path / "projB" / "other.py", _JOINED)
    assert what_it_shows(a, tmp_path / "cache")["cache"] == ["miss", "miss"]
    shown = what_it_shows(joined, tmp_path / "cache")
    assert shown["cache"] == ["miss", "hit"]
    assert f"{tmp_path / 'projB' / 'other.py'}:5" in shown["code"][0]
    assert "projA" not in repr(shown)

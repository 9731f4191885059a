"""Saved entries: a compile of a function the cache already saw serves its first
call from the entry an earlier compile saved (no capture), exactly when that
entry's guards hold; edits, changed values and other inputs capture again."""

import functools
import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import ember


def scaled(x):
    return x * 3


class Net(torch.nn.Module):
    def __init__(self, scale=2.0):
        super().__init__()
        self.fc = torch.nn.Linear(6, 5)
        self.scale = scale

    def forward(self, x):
        return scaled(F.gelu(self.fc(x))) * self.scale


def fresh(fn, tmp_path, **kwargs):
    """A new ember.compile of ``fn``: nothing in memory, the cache on disk."""
    return ember.compile(fn, options={"cache_dir": tmp_path}, **kwargs)


def stages(compiled) -> list[list[str]]:
    log = getattr(compiled, "_compiled_forward", compiled).log
    return [sorted(record.seconds) for record in log.compiles]


def served(compiled) -> list[bool]:
    """Per compile: whether a saved entry served it (no capture ran)."""
    return ["saved_entry" in s and "capture" not in s for s in stages(compiled)]


def test_a_fresh_compile_is_served_from_the_saved_entry(tmp_path):
    torch.manual_seed(0)
    model = Net()
    x = torch.randn(4, 6)
    first = fresh(model, tmp_path)
    torch.testing.assert_close(first(x), model(x))
    assert served(first) == [False]
    again = fresh(model, tmp_path)
    for _ in range(2):
        x = torch.randn(4, 6)
        torch.testing.assert_close(again(x), model(x))
    assert served(again) == [True]
    log = again._compiled_forward.log
    assert log.cache_results == ["hit"]
    assert any("scale == 2.0" in g for g in log.compiles[0].guards)
    # explain and the report still show the captured graph
    [gm] = log.graph_modules()
    assert "gelu" in gm.code


def test_other_inputs_and_changed_values_capture_again(tmp_path):
    torch.manual_seed(0)
    model = Net()
    fresh(model, tmp_path)(torch.randn(4, 6))
    # the constant the entry read differs: its guard fails, capture runs
    other = Net(scale=3.0)
    other.load_state_dict(model.state_dict())
    compiled = fresh(other, tmp_path)
    x = torch.randn(4, 6)
    torch.testing.assert_close(compiled(x), other(x))
    assert served(compiled) == [False]
    # another shape: the saved entry serves the first call, the next misses
    compiled = fresh(model, tmp_path)
    compiled(torch.randn(4, 6))
    y = torch.randn(7, 6)
    torch.testing.assert_close(compiled(y), model(y))
    assert served(compiled) == [True, False]
    [reason] = compiled._compiled_forward.dispatcher.recompile_reasons
    assert "L['x']" in reason and "size" in reason


def test_edited_code_the_entry_inlined_is_not_served(tmp_path):
    torch.manual_seed(0)
    model = Net()
    x = torch.randn(4, 6)
    fresh(model, tmp_path)(x)
    original = scaled.__code__
    try:
        scaled.__code__ = (lambda x: x * 5).__code__
        compiled = fresh(model, tmp_path)
        torch.testing.assert_close(compiled(x), model(x))
        assert served(compiled) == [False]
    finally:
        scaled.__code__ = original


def test_training_through_a_saved_entry_gives_eager_gradients(tmp_path):
    torch.manual_seed(0)
    model = Net()
    x = torch.randn(4, 6)
    fresh(model, tmp_path)(x).sum().backward()
    model.zero_grad()
    compiled = fresh(model, tmp_path)
    compiled(x).pow(2).sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).pow(2).sum().backward()
    for g, want in zip(got, (p.grad for p in model.parameters())):
        torch.testing.assert_close(g, want)
    assert served(compiled) == [True]


def add_into(a, b):
    a.add_(b)
    return a * 2


def test_inputs_sharing_memory_run_the_saved_graph_as_captured(tmp_path):
    a, b = torch.randn(4), torch.randn(4)
    fresh(add_into, tmp_path)(a.clone(), b)
    compiled = fresh(add_into, tmp_path)
    base = torch.randn(8)
    want_base = base.clone()
    want = add_into(want_base[:4], want_base[4:])
    got = compiled(base[:4], base[4:])  # same sizes and strides, one storage
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(base, want_base)
    assert served(compiled) == [True]


def breaks(x):
    y = x.sin()
    print("between graphs")
    return y.cos()


def test_an_entry_with_a_graph_break_is_not_saved(tmp_path, caplog, capsys):
    x = torch.randn(3)
    with caplog.at_level(logging.INFO, logger="ember.perf"):
        fresh(breaks, tmp_path)(x)
    assert "its entry is not saved: it has a graph break" in caplog.text
    again = fresh(breaks, tmp_path)
    torch.testing.assert_close(again(x), breaks(x))
    # captured again; the function after the break has no break of its own,
    # and its entry is served as any other
    assert served(again) == [False, True]


def test_backends_do_not_share_saved_entries(tmp_path):
    x = torch.randn(4, 6)
    torch.manual_seed(0)
    model = Net()
    fresh(model, tmp_path)(x)
    compiled = fresh(model, tmp_path, backend="aot_eager")
    torch.testing.assert_close(compiled(x), model(x))
    assert served(compiled) == [False]


_CHILD = """
import json, sys, torch, ember
sys.path.insert(0, {folder!r})
import model
torch.manual_seed(0)
net = model.Net()
x = torch.randn(4, 6)
compiled = ember.compile(net)
out = compiled(x)
out.sum().backward()
grads = [p.grad.clone() for p in net.parameters()]
net.zero_grad()
want = net(x)
want.sum().backward()
print(json.dumps({{
    "diff": (out - want).abs().max().item(),
    "grad_diff": max(
        (g - p.grad).abs().max().item() for g, p in zip(grads, net.parameters())
    ),
    "stages": sorted(ember.stats()["compile_seconds"]),
    "captured": "ember_capture.bytecode_interp" in sys.modules,
}}))
"""

_MODEL = """
import torch
import torch.nn.functional as F


def scaled(x):
    return x * {factor}


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 5)

    def forward(self, x):
        return scaled(F.gelu(self.fc(x)))
"""


def run_child(folder, cache_dir, code: str | None = None) -> dict:
    """The last line of ``code`` (default ``_CHILD``) run by a new Python."""
    env = dict(os.environ, EMBER_CACHE_DIR=str(cache_dir))
    code = _CHILD.format(folder=str(folder)) if code is None else code
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_new_process_runs_its_first_call_without_capture(tmp_path):
    folder, cache = tmp_path / "code", tmp_path / "cache"
    folder.mkdir()
    (folder / "model.py").write_text(textwrap.dedent(_MODEL.format(factor=3)))
    cold = run_child(folder, cache)
    assert cold["captured"] and "capture" in cold["stages"]
    warm = run_child(folder, cache)
    # capture's interpreter was never even imported
    assert not warm["captured"] and "capture" not in warm["stages"]
    assert warm["diff"] < 1e-5 and warm["grad_diff"] < 1e-5
    # the user edits the function the entry inlined: captured again, and right
    (folder / "model.py").write_text(textwrap.dedent(_MODEL.format(factor=4)))
    edited = run_child(folder, cache)
    assert edited["captured"] and edited["diff"] < 1e-5
    assert edited["grad_diff"] < 1e-5


@pytest.mark.parametrize("value", [0.5, 1])
def test_a_constant_of_another_type_is_not_served(tmp_path, value):
    def times(x, k):
        return x * k

    x = torch.randn(3)
    fresh(times, tmp_path)(x, 0.5)
    compiled = fresh(times, tmp_path)
    torch.testing.assert_close(compiled(x, value), times(x, value))
    assert served(compiled) == [value == 0.5 and type(value) is float]


def test_an_entry_with_symbolic_sizes_serves_other_sizes(tmp_path):
    def norm(x):
        return x / x.pow(2).sum(-1, keepdim=True).sqrt()

    fresh(norm, tmp_path, dynamic=True)(torch.randn(4, 8))
    compiled = fresh(norm, tmp_path, dynamic=True)
    for rows in (5, 9):
        x = torch.randn(rows, 8)
        torch.testing.assert_close(compiled(x), norm(x))
    assert served(compiled) == [True]
    # the entry kept its symbolic size and the guards on it
    assert any("size=[s0, s1]" in g for g in compiled.log.compiles[0].guards)


def test_the_entry_compiled_for_these_sizes_serves_before_the_symbolic_one(
    tmp_path,
):
    """Sizes 4 then 5 leave two entries: 4's exact one and the symbolic one made
    for 5, which also holds for 4. A new process's call at 4 is served by the
    first, whose graph was compiled for 4; 5 by the symbolic one."""

    def norm(x):
        return x / x.pow(2).sum(-1, keepdim=True).sqrt()

    first = fresh(norm, tmp_path)
    for rows in (4, 5):
        first(torch.randn(rows, 8))
    compiled = fresh(norm, tmp_path)
    for rows in (4, 5):
        x = torch.randn(rows, 8)
        torch.testing.assert_close(compiled(x), norm(x))
    assert served(compiled) == [True, True]
    exact, symbolic = (record.guards for record in compiled.log.compiles)
    assert any("size=[4, 8]" in g for g in exact)
    assert any("size=[s0, 8]" in g for g in symbolic)


class CountedConfig:
    """A config whose attribute reads are counted (as transformers' configs
    run Python on every read)."""

    reads = 0

    def __init__(self) -> None:
        self.scale = 2.0

    def __getattribute__(self, name):
        if name == "scale":
            type(self).reads += 1
        return object.__getattribute__(self, name)


class Configured(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.config = CountedConfig()

    def forward(self, x):
        return x.softmax(-1) * self.config.scale


def test_a_saved_entry_with_other_sizes_fails_before_its_other_guards(tmp_path):
    """The saved entry of 4 rows is tried first at 5 rows too (before the
    symbolic one): its tensor check fails before the config is read, so each
    call reads ``config.scale`` once, in the symbolic entry's guards."""
    model = Configured()
    first = fresh(model, tmp_path)
    for rows in (4, 5):
        first(torch.randn(rows, 8))
    for compiled in (first, fresh(model, tmp_path)):
        for rows in (4, 5):
            compiled(torch.randn(rows, 8))
        x = torch.randn(5, 8)
        CountedConfig.reads = 0
        torch.testing.assert_close(compiled(x), model(x))
        assert CountedConfig.reads == 2  # the guard, then eager's own forward
    assert served(compiled) == [True, True]


def rectified(x):
    return F.relu(x - 0.5) * 2


def test_a_patched_torch_function_is_not_served(tmp_path, monkeypatch):
    x = torch.randn(5)
    fresh(rectified, tmp_path)(x)
    monkeypatch.setattr(F, "relu", lambda t: t.abs())  # the same name, patched
    compiled = fresh(rectified, tmp_path)
    torch.testing.assert_close(compiled(x), rectified(x))
    assert served(compiled) == [False]


class Base:
    pass


class Other:
    pass


class Kind(Base):
    pass


def kind_of(obj, x):
    return x.sin() if isinstance(obj, Base) else x.cos()


def test_an_edited_class_body_is_not_served(tmp_path, monkeypatch):
    x = torch.randn(4)
    fresh(kind_of, tmp_path)(Kind(), x)
    # the class the guard names is defined again with another base
    edited = type("Kind", (Other,), {"__module__": __name__, "__qualname__": "Kind"})
    monkeypatch.setitem(globals(), "Kind", edited)
    compiled = fresh(kind_of, tmp_path)
    torch.testing.assert_close(compiled(edited(), x), x.cos())
    assert served(compiled) == [False]


def times_k(k):
    def decorate(f):
        @functools.wraps(f)
        def wrapper(x):
            return f(x) * k

        return wrapper

    return decorate


_twice = times_k(2)


@_twice
def plus_one(x):
    return x + 1


@_twice
def plus_two(x):
    return x + 2


def both(x):
    return plus_one(x) + plus_two(x)


def test_functions_that_shared_a_closure_cell_are_each_guarded(tmp_path, monkeypatch):
    x = torch.ones(3)
    fresh(both, tmp_path)(x)  # one decorator instance: one cell for both k's
    monkeypatch.setitem(globals(), "plus_two", times_k(3)(plus_two.__wrapped__))
    compiled = fresh(both, tmp_path)
    torch.testing.assert_close(compiled(x), both(x))
    assert served(compiled) == [False]


def environment_scaled(t):
    return t * len(os.environ.get("EMBER_TEST_A", "")) + len(
        os.environ.get("EMBER_TEST_B", "")
    )


def test_a_served_entry_names_the_guard_that_failed(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_TEST_A", "x")
    monkeypatch.setenv("EMBER_TEST_B", "y")
    fresh(environment_scaled, tmp_path)(torch.ones(2))
    compiled = fresh(environment_scaled, tmp_path)
    compiled(torch.ones(2))
    monkeypatch.setenv("EMBER_TEST_B", "yyyy")
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 5.0))
    assert served(compiled) == [True, False]
    [reason] = compiled.dispatcher.recompile_reasons
    assert "EMBER_TEST_B" in reason and "no longer holds" in reason


def test_saving_or_rebuilding_never_fails_a_compile(tmp_path, monkeypatch, caplog):
    import ember.convert
    import ember.saved_entries

    def broken(*args, **kwargs):
        raise RuntimeError("an object that cannot be read")

    x = torch.randn(4)
    monkeypatch.setattr(ember.convert, "saved_entry", broken)
    with caplog.at_level(logging.INFO, logger="ember.perf"):
        compiled = fresh(rectified, tmp_path)
        torch.testing.assert_close(compiled(x), rectified(x))
    assert "not saved: RuntimeError: an object that cannot be read" in caplog.text
    monkeypatch.undo()
    fresh(rectified, tmp_path)(x)  # saved now
    monkeypatch.setattr(ember.saved_entries, "_make_live", broken)
    compiled = fresh(rectified, tmp_path)
    torch.testing.assert_close(compiled(x), rectified(x))
    assert served(compiled) == [False]


_OP_MODEL = """
import torch


@torch.library.custom_op("ember_saved_tests::shifted", mutates_args=())
def shifted(x: torch.Tensor) -> torch.Tensor:
    return x + {shift}


@shifted.register_fake
def _(x):
    return torch.empty_like(x)


def forward(x):
    return torch.ops.ember_saved_tests.shifted(x.sin()).relu()
"""

_OP_CHILD = """
import json, sys, torch, ember
sys.path.insert(0, {folder!r})
import model
x = torch.randn(4, 6)
with torch.no_grad():
    out = ember.compile(model.forward)(x)
print(json.dumps({{
    "diff": (out - model.forward(x)).abs().max().item(),
    "captured": "ember_capture.bytecode_interp" in sys.modules,
}}))
"""


def test_an_entry_calling_a_custom_operator_serves_a_new_process(tmp_path):
    # transformers' MoE models call torch.ops.transformers.grouped_mm_fallback
    folder, cache = tmp_path / "code", tmp_path / "cache"
    folder.mkdir()
    (folder / "model.py").write_text(_OP_MODEL.format(shift=1))
    child = _OP_CHILD.format(folder=str(folder))
    cold = run_child(folder, cache, child)
    assert cold["captured"] and cold["diff"] < 1e-6
    warm = run_child(folder, cache, child)
    assert not warm["captured"] and warm["diff"] < 1e-6
    # the file that defines the operator's fake function changed: not served
    (folder / "model.py").write_text(_OP_MODEL.format(shift=2))
    edited = run_child(folder, cache, child)
    assert edited["captured"] and edited["diff"] < 1e-6

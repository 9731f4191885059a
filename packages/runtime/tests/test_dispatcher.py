"""Dispatcher behaviour with converters made of plain guarded entries."""

import inspect
import threading
import time
import types
import warnings

import pytest
import torch

from ember_runtime import (
    Counters,
    Dispatcher,
    Fallback,
    GuardedEntry,
    GuardSpec,
    RecompileError,
    Stance,
    TensorCheck,
    compile_guards,
    eagerly,
    get_stance,
    set_stance,
)


def scale(x, factor=2):
    return x * factor


def type_guarded_convert(log):
    """Entries guarded on the Python type of ``x``, as a capture stage would."""

    def convert(args, kwargs):
        seen = type(args[0])
        log.append(seen)

        def failure(f_locals):
            new = type(f_locals["x"])
            return (
                None
                if new is seen
                else f"type(L['x']) changed from {seen.__name__} to {new.__name__}"
            )

        return GuardedEntry(
            check=lambda f_locals: type(f_locals["x"]) is seen,
            failure=failure,
            run=lambda *a, **k: ("compiled", scale(*a, **k)),
        )

    return convert


def test_hit_miss_and_recompile_reason():
    compiled = []
    d = Dispatcher(scale, type_guarded_convert(compiled))
    assert d(3) == ("compiled", 6)
    assert d(4, factor=3) == ("compiled", 12)
    assert d(x=5) == ("compiled", 10)
    assert compiled == [int]
    assert d(1.5) == ("compiled", 3.0)
    assert compiled == [int, float]
    assert d.recompile_reasons == ["type(L['x']) changed from int to float"]
    c = d.counters
    assert (c.calls, c.hits, c.misses, c.compiles) == (4, 2, 2, 2)


def test_replacing_the_functions_code_converts_again():
    """``fn.__code__ = ...`` keeps the function object: the entries made from
    the old code are dropped, and the new code is converted."""

    def triple(x, factor=3):
        return x * 3

    def fn(x, factor=2):
        return x * factor

    made = []

    def convert(args, kwargs):
        made.append(fn.__code__)
        # what the code was when converted, as a compiled entry holds it
        frozen = types.FunctionType(fn.__code__, {}, "frozen", fn.__defaults__)
        return GuardedEntry(
            check=lambda f_locals: True,
            failure=lambda f_locals: None,
            run=lambda *a, **k: ("compiled", frozen(*a, **k)),
        )

    d = Dispatcher(fn, convert)
    assert d(3) == ("compiled", 6)
    fn.__code__ = triple.__code__
    assert d(3) == ("compiled", 9)
    assert made == [made[0], triple.__code__]
    assert d.recompile_reasons == ["the function's __code__ was replaced"]


def test_most_recently_hit_entry_is_tried_first():
    d = Dispatcher(scale, type_guarded_convert([]))
    d(1)
    d(1.0)
    first = d.entries[0]
    d(2)
    assert d.entries[0] is not first and len(d.entries) == 2


def test_entries_for_fixed_sizes_are_tried_before_symbolic_ones():
    """An entry compiled for sizes 4 and a symbolic one that also admits 4: the
    fixed one serves 4 even after the symbolic one was made or hit last (a
    symbolic entry would compile size 4 again); MRU order holds within each
    group, and a miss is explained by the symbolic entry's guard."""
    made = []

    def convert(args, kwargs):
        n = args[0].shape[0]
        symbolic = len(made) > 0  # the second compile makes the size a symbol
        made.append(n)

        def check(f_locals):
            size = f_locals["x"].shape[0]
            return (symbolic and size < 8) or size == n

        def failure(f_locals):
            what = "sizes: no longer (L['x'].size(0) < 8)" if symbolic else "size"
            return None if check(f_locals) else what

        run = lambda x, factor=2: (n, symbolic)  # noqa: E731
        return GuardedEntry(check, failure, run, symbolic)

    d = Dispatcher(scale, convert)
    assert d(torch.ones(4)) == (4, False)
    assert d(torch.ones(5)) == (5, True)
    assert d(torch.ones(4)) == (4, False)  # not the latest, symbolic entry
    assert d(torch.ones(6)) == (5, True)
    assert d(torch.ones(4)) == (4, False)
    assert [e.symbolic for e in d.entries] == [False, True]
    assert d(torch.ones(9)) == (9, True)  # a new symbolic entry, before the first
    assert d.recompile_reasons == ["size", "sizes: no longer (L['x'].size(0) < 8)"]
    assert [e.symbolic for e in d.entries] == [False, True, True]
    assert d.entries[1].run(torch.ones(9)) == (9, True)
    assert d(torch.ones(4)) == (4, False)
    assert made == [4, 5, 9]


def test_recompile_limit_runs_eagerly_and_warns_once_with_the_guard():
    d = Dispatcher(scale, type_guarded_convert([]), recompile_limit=2)
    d(1)
    d(1.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert d("ab") == "abab"  # eager: the plain function's result
        assert d("cd") == "cdcd"
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1
    assert "recompile limit (2)" in messages[0]
    assert "type(L['x']) changed from float to str" in messages[0]
    assert d.counters.eager_calls == 2 and d.counters.compiles == 2


def test_reset_clears_entries_and_counters():
    compiled = []
    d = Dispatcher(scale, type_guarded_convert(compiled))
    d(1)
    d.reset()
    assert d.entries == () and d.counters.calls == 0
    d(1)
    assert compiled == [int, int]


def test_threads_missing_together_compile_once():
    compiled = []
    slow = type_guarded_convert(compiled)

    def convert(args, kwargs):
        time.sleep(0.05)
        return slow(args, kwargs)

    d = Dispatcher(scale, convert)
    results = []
    threads = [threading.Thread(target=lambda: results.append(d(7))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [("compiled", 14)] * 8
    assert compiled == [int]


def test_arguments_bind_like_a_call():
    def fn(a, /, b, *rest, c, d=4, **extra):
        return a

    seen = []

    def convert(args, kwargs):
        return GuardedEntry(lambda L: seen.append(dict(L)) or True, lambda L: None, fn)

    d = Dispatcher(fn, convert)
    d(1, 2, 3, c=5, e=6)  # compiles
    d(1, 2, 3, c=5, e=6)  # checks the guards on the bound locals
    assert seen[-1] == {"a": 1, "b": 2, "rest": (3,), "c": 5, "d": 4, "extra": {"e": 6}}
    with pytest.raises(TypeError):
        d(1)


def test_convert_giving_up_runs_misses_plainly_and_keeps_entries():
    compiled = []
    typed = type_guarded_convert(compiled)

    def convert(args, kwargs):
        return None if isinstance(args[0], str) else typed(args, kwargs)

    d = Dispatcher(scale, convert)
    assert d(2) == ("compiled", 4)
    assert d("ab") == "abab"
    assert d(1.5) == 3.0  # a later miss runs plainly: no more converting
    assert d(3) == ("compiled", 6)  # the existing entry still serves its calls
    assert compiled == [int] and d.counters.eager_calls == 2


def test_a_fallback_runs_the_misses_and_never_shadows_the_entries():
    compiled, fallback_calls = [], []
    typed = type_guarded_convert(compiled)

    def fallback(x):
        fallback_calls.append(x)
        return ("fallback", x)

    def convert(args, kwargs):
        return Fallback(fallback) if isinstance(args[0], str) else typed(args, kwargs)

    d = Dispatcher(scale, convert)
    assert d(2) == ("compiled", 4)
    assert d("ab") == ("fallback", "ab")
    assert d(3) == ("compiled", 6)  # not the fallback, though it came later
    assert d(1.5) == ("fallback", 1.5)  # no more converting
    assert compiled == [int] and fallback_calls == ["ab", 1.5]
    assert len(d.entries) == 1 and d.counters.eager_calls == 2


def tensor_guarded_convert(compiled, native=None):
    """Entries guarded by compiled tensor checks on ``x``, as the umbrella builds
    them; the "compiled" code is x + 1 through a different torch call."""

    def convert(args, kwargs):
        x = args[0]
        compiled.append(tuple(x.shape))
        spec = GuardSpec((TensorCheck.of("L['x']", x),), lambda L: (L["x"],))
        guards = compile_guards(spec, native=native)
        return GuardedEntry(guards.check, guards.failure, lambda x: torch.add(x, 1))

    return convert


def add_one(x):
    return x + 1


def test_threads_calling_one_function_get_correct_results_and_compile_once():
    compiled = []
    d = Dispatcher(add_one, tensor_guarded_convert(compiled))
    failures = []
    barrier = threading.Barrier(6)

    def work(seed):
        g = torch.Generator().manual_seed(seed)
        barrier.wait()
        for i in range(60):
            x = torch.randn(3 + i % 2, generator=g)
            if not torch.equal(d(x), x + 1):
                failures.append((seed, i))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert sorted(compiled) == [(3,), (4,)]
    assert d.counters.compiles == 2 and d.counters.misses == 2


def test_recompile_limit_names_the_failing_tensor_guard_with_values():
    d = Dispatcher(add_one, tensor_guarded_convert([]), recompile_limit=3)
    for n in range(1, 4):
        d(torch.zeros(n))
    assert d.recompile_reasons == [
        "L['x']: size changed from [1] to [2] (size(0): 1 -> 2)",
        "L['x']: size changed from [2] to [3] (size(0): 2 -> 3)",
    ]
    with pytest.warns(UserWarning, match=r"size changed from \[3\] to \[4\]"):
        out = d(torch.zeros(4))
    assert torch.equal(out, torch.ones(4))
    assert d.counters.eager_calls == 1 and d.counters.compiles == 3
    x = torch.randn(2)
    assert torch.equal(d(x), x + 1)  # an existing entry still serves its inputs


def test_counters_time_converts_and_sum_across_dispatchers():
    counters = Counters()
    d1 = Dispatcher(add_one, tensor_guarded_convert([]), counters=counters)
    d2 = Dispatcher(add_one, tensor_guarded_convert([]))
    for _ in range(3):
        d1(torch.zeros(2))
    d2(torch.zeros(2))
    with counters.timed("codegen"):
        time.sleep(0.01)
    assert counters.compile_seconds["convert"] > 0
    assert counters.compile_seconds["codegen"] >= 0.01
    total = Counters.total([d1.counters, d2.counters])
    assert (total.calls, total.hits, total.compiles) == (4, 2, 2)
    assert total.compile_seconds["convert"] == pytest.approx(
        d1.counters.compile_seconds["convert"] + d2.counters.compile_seconds["convert"]
    )
    assert total.as_dict()["calls"] == 4
    d1.reset()
    assert d1.counters is counters and counters.calls == 0
    assert counters.compile_seconds == {}


def test_misses_after_giving_up_or_the_warning_skip_naming_the_guard():
    named = []

    def failure(f_locals):
        named.append(f_locals["x"])
        return "L['x']: not an int"

    def convert(args, kwargs):
        if isinstance(args[0], str):
            return None
        return GuardedEntry(lambda L: type(L["x"]) is int, failure, lambda x: x)

    d = Dispatcher(scale, convert)
    d(1)
    d("a")  # a recompile: its reason names the guard
    d("b")
    d(2.5)  # gave up: misses run plainly, with no reason to compute
    assert named == ["a"] and d.recompile_reasons == ["L['x']: not an int"]
    limited = Dispatcher(scale, lambda a, k: convert(a, k), recompile_limit=1)
    limited(1)
    with pytest.warns(UserWarning, match="recompile limit"):
        limited("c")
    limited("d")  # warned once already: no reason computed again
    assert named == ["a", "c"]


def test_guards_see_locals_as_the_function_binds_them():
    """The locals a guard reads, for every way of declaring parameters: the
    fast paths (positional, ``*args``, ``**kwargs``) agree with inspect's."""

    def plain(a, b):
        pass

    def wrapper(*args, **kwargs):
        pass

    def method(self, *rest):
        pass

    def options(x, **extra):
        pass

    def defaults(x, y=2, *, z=3):
        pass

    calls = [
        (plain, (1, 2), {}),
        (plain, (1,), {"b": 2}),
        (wrapper, (), {}),
        (wrapper, (1, 2), {}),
        (wrapper, (1,), {"k": 3}),
        (method, ("self",), {}),
        (method, ("self", 1, 2), {}),
        (options, (1,), {}),
        (options, (1,), {"o": 2}),
        (defaults, (1,), {}),
        (defaults, (1, 5), {"z": 4}),
    ]
    for fn, args, kwargs in calls:
        seen = []

        def convert(args, kwargs, seen=seen):
            return GuardedEntry(
                check=lambda f_locals: seen.append(dict(f_locals)) or False,
                failure=lambda f_locals: None,
                run=lambda *a, **k: None,
            )

        d = Dispatcher(fn, convert)
        d(*args, **kwargs)  # compiles an entry whose guard then fails
        d(*args, **kwargs)
        bound = inspect.signature(fn).bind(*args, **kwargs)
        bound.apply_defaults()
        assert seen[-1] == dict(bound.arguments), fn.__name__


@pytest.fixture
def stance():
    yield set_stance
    set_stance("default")


def test_force_eager_and_eagerly_run_the_function_itself(stance):
    compiled = []
    d = Dispatcher(scale, type_guarded_convert(compiled))
    assert d(3) == ("compiled", 6)
    assert stance("force_eager") is Stance.DEFAULT
    assert d(3) == 6 and d(1.5) == 3.0 and compiled == [int]
    stance(Stance.DEFAULT)
    with eagerly():
        with eagerly():
            assert d(3) == 6
        assert d(3) == 6
    assert d(3) == ("compiled", 6)
    assert d.counters.calls == 2  # eager calls are not counted


def test_eager_on_recompile_keeps_entries_and_compiles_nothing(stance):
    compiled = []
    d = Dispatcher(scale, type_guarded_convert(compiled))
    stance("eager_on_recompile")
    assert d(3) == ("compiled", 6)  # a first compile is not a recompile
    assert d(1.5) == 3.0  # would recompile: runs eagerly
    assert d(4) == ("compiled", 8)
    assert compiled == [int] and d.counters.eager_calls == 1


def test_fail_on_recompile_raises_with_the_guard(stance):
    d = Dispatcher(scale, type_guarded_convert([]))
    stance("fail_on_recompile")
    assert d(3) == ("compiled", 6)
    with pytest.raises(RecompileError, match="changed from int to float"):
        d(1.5)
    assert get_stance() is Stance.FAIL_ON_RECOMPILE
    with pytest.raises(ValueError, match="unknown stance 'fast'"):
        stance("fast")

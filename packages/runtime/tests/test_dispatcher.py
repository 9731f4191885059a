"""Dispatcher behaviour with converters made of plain guarded entries."""

import threading
import time
import warnings

import pytest

from ember_runtime import Dispatcher, GuardedEntry


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


def test_most_recently_hit_entry_is_tried_first():
    d = Dispatcher(scale, type_guarded_convert([]))
    d(1)
    d(1.0)
    first = d.entries[0]
    d(2)
    assert d.entries[0] is not first and len(d.entries) == 2


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

"""With-blocks over the managers library code uses: user classes with Python
``__enter__``/``__exit__``, ``contextlib``'s generator managers, ``nullcontext``
and ``suppress``, and profiler ranges: captured whole, compared with eager."""

import contextlib
import io

import torch
from conftest import CaptureCache

from ember_capture import capture


class Scaled:
    """Sets a scale on entry and puts the old one back on exit."""

    def __init__(self, holder, scale):
        self.holder = holder
        self.scale = scale

    def __enter__(self):
        self.old = self.holder.scale
        self.holder.scale = self.scale
        return self.holder

    def __exit__(self, *exc_info):
        self.holder.scale = self.old
        return False


class Holder:
    scale = 1.0


def scaled_block(x, holder):
    with Scaled(holder, 3.0) as h:
        y = x * h.scale
    return y + holder.scale


@contextlib.contextmanager
def tracing(events, name):
    events.append(f"enter {name}")
    yield len(events)
    events.append(f"exit {name}")


def generator_block(x, events):
    with tracing(events, "a") as n:
        y = x + n
    with contextlib.nullcontext(y) as same, contextlib.suppress(KeyError):
        y = same * 2
    with torch.profiler.record_function("ember-test-range"):
        y = y - 1
    return y


def _captured_whole(cache: CaptureCache) -> bool:
    return not cache.breaks and not cache.refused


def test_a_user_manager_is_inlined_and_its_writes_replayed():
    cache = CaptureCache(scaled_block)
    holder, expected = Holder(), Holder()
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(cache(x, holder), scaled_block(x, expected))
        assert holder.scale == expected.scale == 1.0 and "scale" in vars(holder)
    assert _captured_whole(cache)


def test_contextlib_managers_and_profiler_ranges_are_captured():
    cache = CaptureCache(generator_block)
    events, expected = [], []
    for _ in range(2):
        x = torch.randn(3)
        got = cache(x, events)
        torch.testing.assert_close(got, generator_block(x, expected))
        assert events == expected
    assert events == ["enter a", "exit a"] * 2
    assert _captured_whole(cache)
    assert cache.captures == 2  # the list's length is part of the guard


def c_manager(x, stream):
    with stream:
        return x * 2


def test_a_manager_written_in_c_breaks_the_graph_with_the_reason():
    result = capture(c_manager, torch.randn(2), io.StringIO())
    reason = result.break_reason
    assert "a with-block over a StringIO, whose __enter__ or __exit__" in reason.reason
    assert reason.lineno == c_manager.__code__.co_firstlineno + 1
    cache = CaptureCache(c_manager)
    x = torch.randn(2)
    stream = io.StringIO()
    torch.testing.assert_close(cache(x, stream), x * 2)
    assert stream.closed  # entered and left for real

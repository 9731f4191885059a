"""Helpers shared by the capture tests: run a capture with its own graph as the
compiled code, compare with eager, and count captures like a dispatcher would."""

import torch

from ember_capture import CaptureError, capture


def assert_tree_equal(actual, expected):
    """Same structure, same Python values, tensors close (eager float tolerance)."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected)
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_tree_equal(a, e)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for k in expected:
            assert_tree_equal(actual[k], expected[k])
    elif hasattr(expected, "__dataclass_fields__"):
        for name in expected.__dataclass_fields__:
            assert_tree_equal(getattr(actual, name), getattr(expected, name))
    else:
        assert actual == expected


class CaptureCache:
    """Guarded entries over one function, the way the runtime uses capture results:
    a call runs the first entry whose guards hold, or captures a new one."""

    def __init__(self, fn, hook=None, on_result=None):
        self.fn = fn
        self.entries = []
        self.captures = 0
        self.breaks: set[str] = set()  # where graphs broke, file:line
        self.refused: list[CaptureError] = []
        self.hook = hook
        self.on_result = on_result

    def __call__(self, *args, **kwargs):
        import inspect

        target = self.fn
        if inspect.ismethod(target):
            target, args = target.__func__, (target.__self__, *args)
        bound = inspect.signature(target).bind(*args, **kwargs)
        bound.apply_defaults()
        for check, run in self.entries:
            if check.check(dict(bound.arguments)):
                return run(*args, **kwargs)
        try:
            result = capture(target, *args, **kwargs)
        except CaptureError as e:  # what the runtime does: run the function as is
            self.refused.append(e)
            return target(*args, **kwargs)
        self.captures += 1
        if result.break_reason is not None:
            self.breaks.add(result.break_reason.location)
        if self.on_result is not None:
            self.on_result(result)
        run = result.build([g.gm for g in result.graphs], self.hook)
        self.entries.append((result.guard_checker(), run))
        return run(*args, **kwargs)

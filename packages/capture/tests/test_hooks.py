"""Forward pre-hooks and hooks on modules the function calls: inlined in the
order nn.Module.__call__ runs them, and guarded, so adding or removing a hook
recompiles (or finds the earlier entry again)."""

import torch
from conftest import CaptureCache


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.inner(x)) + 1


def double_input(module, args):
    return (args[0] * 2,)


def shift_with_kwargs(module, args, kwargs):
    return (args[0] - 1,), kwargs


def scale_output(module, args, output):
    return output * 3


def observe(module, args, output):
    module.seen = True  # a hook returning None leaves the output as it is


def _captured_whole(cache: CaptureCache) -> bool:
    return not cache.breaks and not cache.refused


def test_forward_hooks_are_inlined_and_guarded():
    model = Block()
    model.inner.register_forward_pre_hook(double_input)
    model.inner.register_forward_pre_hook(shift_with_kwargs, with_kwargs=True)
    model.inner.register_forward_hook(scale_output)

    def run(x):
        return model(x)

    cache = CaptureCache(run)
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(cache(x), model(x))
        handle = model.inner.register_forward_hook(observe)
        torch.testing.assert_close(cache(x), model(x))  # a new hook: recompiled
        assert cache.captures == 2
        handle.remove()
        torch.testing.assert_close(cache(x), model(x))  # the first entry again
        assert cache.captures == 2
    assert _captured_whole(cache)


class Scaled(Block):
    """A module class with a __call__ of its own: calling it runs that."""

    def __call__(self, x):
        return super().__call__(x) * 7


class Shifted(Block):
    def __call__(self, x):
        return self.forward(x) + 1


def test_a_module_class_with_its_own_call_runs_it():
    for model in (Scaled(), Shifted()):

        def run(x, model=model):
            return model(x)

        cache = CaptureCache(run)
        x = torch.randn(2, 4)
        with torch.no_grad():
            torch.testing.assert_close(cache(x), model(x))  # was forward's alone
        assert _captured_whole(cache)

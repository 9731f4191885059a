"""A compiled module with forward hooks: the hooks are captured with forward
(no eager fallback); backward hooks still run eagerly."""

import torch

import ember


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)

    def forward(self, x):
        return torch.tanh(self.fc(x))


def test_forward_hooks_on_the_compiled_module_are_compiled_with_it():
    model = Net()
    model.register_forward_pre_hook(lambda m, args: (args[0] * 2,))
    model.register_forward_hook(lambda m, args, out: out + 1)
    model.fc.register_forward_hook(lambda m, args, out: out * 0.5)
    compiled = ember.compile(model, fullgraph=True)
    for _ in range(2):
        x = torch.randn(3, 6)
        want = torch.tanh(model.fc(x * 2)) + 1  # the submodule's hook halves fc
        torch.testing.assert_close(compiled(x), want)
    dispatcher = compiled._compiled_call.dispatcher
    assert dispatcher.counters.compiles == 1 and dispatcher.counters.eager_calls == 0


def test_backward_hooks_keep_the_module_eager():
    model = Net()
    model.register_full_backward_hook(lambda m, gi, go: None)
    compiled = ember.compile(model)
    x = torch.randn(3, 6, requires_grad=True)
    torch.testing.assert_close(compiled(x), model(x))
    assert compiled._compiled_call is None
    assert compiled._compiled_forward.dispatcher.counters.compiles == 0


class Densify(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x.to_dense())


def test_a_hooked_module_capture_refuses_runs_eagerly_once():
    """A sparse input refuses the capture: the hooked call runs eagerly, and
    its own call of the module is not routed back to the compiled module (an
    FSDP2 module, whose parameters capture refuses, took that path)."""
    model = Densify()
    calls = []
    model.register_forward_hook(lambda m, args, out: calls.append(1) or out * 2)
    compiled = ember.compile(model)
    x = torch.randn(3, 4).to_sparse()
    torch.testing.assert_close(compiled(x), model.fc(x.to_dense()) * 2)
    assert calls == [1]

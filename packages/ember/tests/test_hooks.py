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

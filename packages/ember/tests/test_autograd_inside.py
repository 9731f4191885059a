"""torch.autograd inside a compiled function: gradients taken in the function run
behind a graph break and equal eager's."""

import torch

import ember


def grad_of_input(x):
    y = (x * x).sin().sum()
    return torch.autograd.grad(y, x)[0] * 2


def grad_of_detached_copy(x):
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        y = (x.sin() * x).sum()
        (g,) = torch.autograd.grad(y, x, create_graph=False)
    return g + 1


def grad_of_a_leaf_made_inside(x):
    w = x.detach().clone().requires_grad_()
    loss = (w.exp() * x).sum()
    return torch.autograd.grad(loss, w)[0]


def test_autograd_grad_of_an_input_that_requires_grad():
    compiled = ember.compile(grad_of_input)
    for _ in range(2):
        x = torch.randn(5, requires_grad=True)
        torch.testing.assert_close(compiled(x), grad_of_input(x))


def test_autograd_grad_of_a_tensor_turned_on_inside():
    for fn in (grad_of_detached_copy, grad_of_a_leaf_made_inside):
        compiled = ember.compile(fn)
        for _ in range(2):
            x = torch.randn(5)
            torch.testing.assert_close(compiled(x), fn(x))
        with torch.no_grad():  # grad mode off outside: enable_grad still holds
            x = torch.randn(5)
            if fn is grad_of_detached_copy:
                torch.testing.assert_close(compiled(x), fn(x))

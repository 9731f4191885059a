"""Whole models through ember.compile: loops over ModuleLists, a transformer block
and a CNN, compared with eager on every call, with compilations counted."""

import pytest
import torch
import torch.nn.functional as F

import ember


class CountingBackend:
    def __init__(self):
        self.compiles = 0

    def __call__(self, gm, example_inputs):
        self.compiles += 1
        return gm


class TransformerLayer(torch.nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(dim, 2 * dim),
            torch.nn.GELU(),
            torch.nn.Linear(2 * dim, dim),
        )

    def forward(self, x, mask=None):
        b, t, d = x.shape
        h = d // self.heads
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, h).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / h**0.5
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))
        x = x + self.proj((F.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class Transformer(torch.nn.Module):
    def __init__(self, layers=2):
        super().__init__()
        self.layers = torch.nn.ModuleList(TransformerLayer() for _ in range(layers))
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)
        return {"logits": self.head(x[:, -1]), "hidden": x}


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(
                torch.nn.Conv2d(c_in, c_out, 3, padding=1),
                torch.nn.BatchNorm2d(c_out),
                torch.nn.ReLU(),
            )
            for c_in, c_out in [(3, 8), (8, 8), (8, 16)]
        )
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(16, 5)

    def forward(self, x):
        for i, block in enumerate(self.blocks):
            x = block(x)
            if i < len(self.blocks) - 1:
                x = F.max_pool2d(x, 2)
        return self.fc(torch.flatten(self.pool(x), 1))


def assert_outputs_close(actual, expected):
    if isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key in expected:
            torch.testing.assert_close(actual[key], expected[key], rtol=1e-4, atol=1e-5)
    else:
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["counting", "ember"])
def test_transformer_block_recompiles_exactly_when_needed(backend):
    ember.reset()
    counter = CountingBackend()
    model = Transformer().eval()
    compiled = ember.compile(
        model, backend=counter if backend == "counting" else "ember"
    )
    dispatcher = compiled._compiled_forward.dispatcher
    causal = torch.ones(6, 6, dtype=torch.bool).triu(1)
    calls = [
        ((torch.randn(2, 6, 32),), 1),
        ((torch.randn(2, 6, 32),), 1),  # fresh data
        ((torch.randn(2, 6, 32), causal), 2),  # mask None -> tensor
        ((torch.randn(3, 6, 32), causal), 3),  # batch size
        ((torch.randn(2, 6, 32),), 3),  # back to the first entry
    ]
    with torch.no_grad():
        for args, compiles in calls:
            assert_outputs_close(compiled(*args), model(*args))
            assert dispatcher.counters.compiles == compiles
        model.layers[0].heads = 2  # a module attribute the graph depends on
        x = torch.randn(2, 6, 32)
        assert_outputs_close(compiled(x), model(x))
        assert dispatcher.counters.compiles == 4
        model.layers.append(TransformerLayer().eval())  # the ModuleList grows
        assert_outputs_close(compiled(x), model(x))
        assert dispatcher.counters.compiles == 5
    if backend == "counting":
        assert counter.compiles == 5


def test_cnn_with_module_list_loop_train_and_eval():
    ember.reset()
    counter = CountingBackend()
    model = CNN()
    compiled = ember.compile(model, backend=counter)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        model.eval()
        compiled.eval()
        assert_outputs_close(compiled(x), model(x))
        y = torch.randn(2, 3, 16, 16)
        assert_outputs_close(compiled(y), model(y))
        assert counter.compiles == 1
    compiled.train()  # batch norm switches to batch statistics: a new graph
    reference = CNN()
    reference.load_state_dict(model.state_dict())
    out = compiled(x)
    expected = reference.train()(x)
    assert_outputs_close(out, expected)
    assert counter.compiles == 2
    for name, buffer in model.named_buffers():  # running stats updated like eager
        torch.testing.assert_close(buffer, dict(reference.named_buffers())[name])


class PrintingBlock(torch.nn.Module):
    """Three prints, a data-dependent branch and a no_grad section."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x):
        print("start")
        x = self.a(x).relu()
        with torch.no_grad():
            print("no grad")
            stats = x.mean()
        if x.sum() > 0:
            x = self.b(x)
        print("end")
        return x - stats


def test_graph_breaks_through_every_backend_match_eager(capsys):
    for backend in ("eager", "aot_eager", "ember"):
        ember.reset()
        model = PrintingBlock()
        compiled = ember.compile(model, backend=backend)
        for sign in (1.0, -1.0, 1.0):
            x = torch.rand(2, 8) * sign
            out = compiled(x)
            torch.testing.assert_close(out, model(x))
            out.sum().backward()
            assert torch.is_grad_enabled()
    explained = ember.explain(PrintingBlock())(torch.rand(2, 8))
    assert explained.graph_break_count == 4  # three prints and the branch


def test_edge_cases_found_in_review(capsys):
    import functools

    def gen(x):
        yield x * 2

    def no_grad_break(x):
        with torch.no_grad():
            y = x * 2
            print("inside")
            z = y + 1
        return z

    def appends(xs, x):
        xs.append(x * 2)
        print("between")
        xs.append(x * 3)
        return xs

    def halving(x):
        while x.abs().sum() > 1:  # a data-dependent while loop
            x = x / 2
        return x

    def decorator(fn):
        @functools.wraps(fn)
        def inner(*args):
            return fn(*args)

        return inner

    @decorator
    def wrapped(x):
        return x + 1

    for backend in ("eager", "aot_eager", "ember"):
        ember.reset()
        compiled_gen = ember.compile(gen, backend=backend)(torch.ones(2))
        (first,) = compiled_gen
        assert first.tolist() == [2.0, 2.0]
        x = torch.randn(3, requires_grad=True)
        out = ember.compile(no_grad_break, backend=backend)(x)
        assert not out.requires_grad and torch.is_grad_enabled()
        xs = []
        result = ember.compile(appends, backend=backend)(xs, torch.ones(1))
        assert result is xs and len(xs) == 2
        y = torch.randn(64) * 100
        torch.testing.assert_close(
            ember.compile(halving, backend=backend)(y), halving(y)
        )
        torch.testing.assert_close(ember.compile(wrapped, backend=backend)(x), x + 1)

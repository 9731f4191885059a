"""One program through every stage: runtime dispatcher -> capture -> aotgrad ->
codegen, compared with eager on fresh random data on every call."""

import pytest
import torch
import torch.nn.functional as F

import ember

BACKENDS = ["eager", "aot_eager", "ember"]


@pytest.fixture(autouse=True)
def _fresh():
    ember.reset()
    yield


def thin(x, w, b):
    return torch.relu(x @ w + b).sum(-1)


class Attention(torch.nn.Module):
    """Straight-line attention: projections, scaled scores, softmax, output."""

    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)
        self.norm = torch.nn.LayerNorm(dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        y = F.softmax(scores, dim=-1) @ v
        return x + self.out(y.transpose(1, 2).reshape(b, t, d))


@pytest.mark.parametrize("backend", BACKENDS)
def test_thin_path_program(backend):
    compiled = ember.compile(thin, backend=backend)
    for _ in range(3):
        x, w, b = torch.randn(8, 3), torch.randn(3, 5), torch.randn(5)
        torch.testing.assert_close(compiled(x, w, b), thin(x, w, b))


@pytest.mark.parametrize("backend", BACKENDS)
def test_attention_block_inference(backend):
    model = Attention().eval()
    compiled = ember.compile(model, backend=backend)
    with torch.no_grad():
        for shape in [(2, 5, 16), (2, 5, 16), (1, 7, 16)]:
            x = torch.randn(shape)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    counters = compiled._compiled_forward.dispatcher.counters
    assert (counters.compiles, counters.hits) == (2, 1)


def test_full_pipeline_generates_code_for_every_op_of_attention():
    with torch.no_grad():
        out = ember.explain(Attention().eval())(torch.randn(2, 3, 16))
    assert out.graph_count == 1
    assert out.fallback_ops == []
    (source,) = out.generated_code
    assert "#include" in source  # the C++ translation unit


def test_dtype_change_compiles_again_and_stays_correct():
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm

    compiled = ember.compile(thin, backend=counting)
    for dtype in (torch.float32, torch.float32, torch.float64, torch.float32):
        x, w, b = (
            torch.randn(4, 3, dtype=dtype),
            torch.randn(3, 5, dtype=dtype),
            torch.randn(5, dtype=dtype),
        )
        torch.testing.assert_close(compiled(x, w, b), thin(x, w, b))
    assert len(graphs) == 2


def test_python_constant_argument_is_part_of_the_cache_key():
    compiled = ember.compile(lambda x, k: x * k + 1)
    x = torch.randn(3)
    for k in (2, 2, 3, 2.5):
        torch.testing.assert_close(compiled(x, k), x * k + 1)
    assert compiled.dispatcher.counters.compiles == 3


def test_in_place_update_of_an_input_matches_eager():
    def fn(x, y):
        x.add_(y)
        return x * 2

    a, b = torch.randn(4), torch.randn(4)
    a2 = a.clone()
    out = ember.compile(fn)(a, b)
    expected = fn(a2, b)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(a, a2)


class ConvPool(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 5 * 5, 3)

    def forward(self, x):
        y = F.relu(self.conv(x))
        pooled = F.max_pool2d(y, 3, stride=2, padding=1)
        pooled = pooled + F.avg_pool2d(y, 3, 2, 1, count_include_pad=False)
        return self.fc(torch.flatten(pooled, 1)).pow(2).sum()


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_conv_pool_training_matches_eager_and_leaves_nothing_to_torch(layout):
    torch.manual_seed(0)
    model = ConvPool()
    compiled = ember.compile(model)
    params = list(model.parameters())
    for _ in range(2):
        x = torch.randn(2, 3, 10, 9)
        if layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        model.zero_grad()
        expected = model(x)
        expected.backward()
        want = [p.grad.clone() for p in params]
        model.zero_grad()
        got = compiled(x)
        got.backward()
        torch.testing.assert_close(got, expected)
        for g, w in zip([p.grad for p in params], want):
            torch.testing.assert_close(g, w)
    assert ember.explain(model)(x).fallback_ops == []


class ResidualBlock(torch.nn.Module):
    """A ResNet stem and block: strided conv, max pool, batch norm, adaptive pool."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 7, stride=2, padding=3)
        self.conv1 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.norm1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.norm2 = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.stem(x)), 3, 2, 1)
        y = self.norm2(self.conv2(F.relu(self.norm1(self.conv1(x)))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(F.relu(x + y), 1), 1))


class Recurrent(torch.nn.Module):
    """An LSTM cell unrolled over time, then a log-softmax head."""

    def __init__(self):
        super().__init__()
        self.cell = torch.nn.LSTMCell(8, 16)
        self.out = torch.nn.Linear(16, 3)

    def forward(self, xs):
        h = c = torch.zeros(xs.shape[0], 16)
        for t in range(xs.shape[1]):
            h, c = self.cell(xs[:, t], (h, c))
        return F.log_softmax(self.out(h), -1)


class Sequence1d(torch.nn.Module):
    """conv1d, group norm, SiLU, avg_pool1d, a GLU gate, cumsum and a norm."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 6, 5, padding=2)
        self.norm = torch.nn.GroupNorm(2, 6)

    def forward(self, x):
        y = F.avg_pool1d(F.silu(self.norm(self.conv(x))), 2)
        gated = F.glu(torch.cat([y, y * 2], 1), 1)
        return gated.cumsum(-1) / gated.norm(dim=-1, keepdim=True).clamp_min(1e-3)


MODELS = {
    "residual_block": (ResidualBlock, (2, 3, 32, 32)),
    "recurrent": (Recurrent, (3, 4, 8)),
    "sequence_1d": (Sequence1d, (2, 4, 16)),
}


@pytest.mark.parametrize("name", MODELS)
def test_small_models_train_like_eager_with_nothing_left_to_torch(name):
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make()
    twin = make()
    twin.load_state_dict(model.state_dict())
    compiled = ember.compile(twin)
    for _ in range(2):
        x = torch.randn(*shape)
        for m in (model, twin):
            m.zero_grad()
        model(x).pow(2).sum().backward()
        compiled(x).pow(2).sum().backward()
        for got, want in zip(twin.parameters(), model.parameters()):
            torch.testing.assert_close(got.grad, want.grad, rtol=1e-3, atol=1e-4)
        for got, want in zip(twin.buffers(), model.buffers()):
            torch.testing.assert_close(got, want)  # batch norm's running stats
    assert ember.explain(twin)(x).fallback_ops == []

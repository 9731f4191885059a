"""Autocast: compiled code gives eager's autocast dtypes and, within the
precision of those dtypes, its values, with autocast around the compiled call
or inside the compiled function, forward and backward."""

import pytest
import torch
import torch.nn.functional as F

import ember

HALF = [torch.bfloat16, torch.float16]


@pytest.fixture(autouse=True)
def _fresh():
    ember.reset()
    yield
    ember.reset()


def compile_fn(fn, tmp_path, **kw):
    return ember.compile(fn, options={"cache_dir": tmp_path}, **kw)


def assert_like(got, want, dtype):
    """Same dtype as eager, and values within a few roundings to ``dtype`` of
    eager's own: the compiled code rounds where eager does not (a decomposed
    addmm rounds the product before adding the bias), or the other way round (a
    fused chain runs in float32 between buffers), one rounding at a time."""
    assert got.dtype == want.dtype
    eps = torch.finfo(dtype).eps
    scale = max(1.0, want.detach().abs().max().item())
    torch.testing.assert_close(
        got.detach().double(),
        want.detach().double(),
        rtol=2 * eps,
        atol=2 * eps * scale,
    )


def mm_bias_relu(x, w, b):
    return torch.relu(x @ w + b)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 5 * 5, 6)

    def forward(self, x, target):
        y = F.gelu(self.conv(x))  # a conv with a fused epilogue
        logits = torch.tanh(self.fc(y.flatten(1)))
        return logits, F.cross_entropy(logits, target)  # autocast: in float32


def mm_inputs(requires_grad=False):
    x = torch.randn(6, 8, requires_grad=requires_grad)
    w = torch.randn(8, 5, requires_grad=requires_grad)
    b = torch.randn(5, requires_grad=requires_grad)
    return x, w, b


@pytest.mark.parametrize("dtype", HALF)
def test_ambient_autocast_matmul_with_fused_epilogue(dtype, tmp_path):
    compiled = compile_fn(mm_bias_relu, tmp_path)
    args = mm_inputs()
    with torch.autocast("cpu", dtype=dtype):
        want = mm_bias_relu(*args)
        got = compiled(*args)
    assert_like(got, want, dtype)


@pytest.mark.parametrize("dtype", HALF)
def test_ambient_autocast_linear_and_conv_eval(dtype, tmp_path):
    model = Block().eval()
    compiled = compile_fn(model, tmp_path)
    args = torch.randn(2, 3, 5, 5), torch.tensor([1, 4])
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
        want = model(*args)
        got = compiled(*args)
    assert [t.dtype for t in want] == [dtype, torch.float32]
    for g, w in zip(got, want):
        assert_like(g, w, dtype)


@pytest.mark.parametrize("dtype", HALF)
def test_ambient_autocast_training_gradients(dtype, tmp_path):
    model = Block()
    compiled = compile_fn(model, tmp_path)
    x = torch.randn(2, 3, 5, 5, requires_grad=True)
    target = torch.tensor([1, 4])
    grads = []
    for fn in (model, compiled):
        with torch.autocast("cpu", dtype=dtype):
            logits, loss = fn(x, target)
        (loss + logits.float().sum()).backward()  # outside the block, as advised
        grads.append([logits, loss, x.grad, *(p.grad for p in model.parameters())])
        x.grad = None
        model.zero_grad(set_to_none=True)
    for got, want in zip(grads[1], grads[0]):
        assert_like(got, want, dtype)


def inside_block(x, w, b):
    y = x.sin()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = torch.relu(y @ w + b)  # bf16 matmul, float32 add
        with torch.autocast("cpu", enabled=False):
            q = y @ w  # float32 again
        r = torch.mm(z, w.t())  # bf16
    return z.cos(), q, r


def inside_amp_fp16(x, w, b):
    with torch.amp.autocast("cpu", dtype=torch.float16):
        return F.linear(x, w.t(), b).relu(), x @ w


def inside_cpu_amp(x, w, b):
    with torch.cpu.amp.autocast():
        return x @ w + b


@torch.autocast("cpu", dtype=torch.bfloat16)
def decorated(x, w, b):
    return torch.relu(x @ w + b)


def calls_decorated(x, w, b):
    return decorated(x, w, b) * 2


INSIDE = [
    (inside_block, torch.bfloat16),
    (inside_amp_fp16, torch.float16),
    (inside_cpu_amp, torch.bfloat16),
    (decorated, torch.bfloat16),
    (calls_decorated, torch.bfloat16),
]


@pytest.mark.parametrize("fn, dtype", INSIDE, ids=[f.__name__ for f, _ in INSIDE])
@pytest.mark.filterwarnings("ignore:.*torch.cpu.amp.autocast.*:FutureWarning")
def test_autocast_inside_the_function_in_one_graph(fn, dtype, tmp_path):
    explained = ember.explain(fn)(*mm_inputs())
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    compiled = compile_fn(fn, tmp_path)
    args = mm_inputs()
    want, got = fn(*args), compiled(*args)
    for g, w in zip(*(o if isinstance(o, tuple) else (o,) for o in (got, want))):
        assert_like(g, w, dtype)
    assert not torch.is_autocast_enabled("cpu")  # the blocks were left


@pytest.mark.parametrize("fn, dtype", INSIDE[:2], ids=["block", "amp_fp16"])
def test_autocast_inside_the_function_backward(fn, dtype, tmp_path):
    compiled = compile_fn(fn, tmp_path)
    args = mm_inputs(requires_grad=True)
    # Fresh data, but no pre-activation at relu's kink: a 16-bit rounding
    # difference there flips its gradient (both sides are right).
    while (F.linear(args[0], args[1].t(), args[2]).abs() < 0.05).any():
        args = mm_inputs(requires_grad=True)
    results = []
    for f in (fn, compiled):
        outs = f(*args)
        sum(o.float().sum() for o in outs).backward()
        results.append([*outs, *(a.grad for a in args)])
        for a in args:
            a.grad = None
    for got, want in zip(results[1], results[0]):
        assert_like(got, want, dtype)


def test_autocast_state_is_guarded(tmp_path):
    compiled = compile_fn(mm_bias_relu, tmp_path)
    counters = compiled.dispatcher.counters
    args = mm_inputs()
    assert compiled(*args).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert_like(compiled(*args), mm_bias_relu(*args), torch.bfloat16)
    assert counters.compiles == 2
    torch.testing.assert_close(compiled(*args), mm_bias_relu(*args))
    assert counters.compiles == 2  # the plain entry again
    with torch.autocast("cpu", dtype=torch.float16):
        assert_like(compiled(*args), mm_bias_relu(*args), torch.float16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.autocast("cpu", enabled=False):  # off again, inside
            torch.testing.assert_close(compiled(*args), mm_bias_relu(*args))
        compiled(*args)
    assert counters.compiles == 3
    reasons = compiled.dispatcher.recompile_reasons
    assert "torch global state changed" in reasons[0]


def test_a_break_inside_an_autocast_block_keeps_its_dtypes(tmp_path):
    def fn(x, w, b):
        y = x.sin()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = y @ w
            print("inside")  # a graph break inside the block
            z = z + b
        return z.cos()

    compiled = compile_fn(fn, tmp_path)
    args = mm_inputs()
    assert_like(compiled(*args), fn(*args), torch.bfloat16)
    assert not torch.is_autocast_enabled("cpu")


def test_an_op_whose_kernel_autocasts_inside_keeps_eagers_dtype(tmp_path):
    def fn(x):
        return torch.linalg.pinv(x.sin()) * 2

    compiled = compile_fn(fn, tmp_path)
    x = torch.randn(5, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = fn(x)  # bfloat16: the kernel's own matmuls were autocast
        assert_like(compiled(x), want, torch.bfloat16)


class Normed(torch.nn.Module):
    """Norms whose float32 weights meet a lower-precision input under
    autocast (mixed precision): eager keeps the input's dtype."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.gn = torch.nn.GroupNorm(2, 8)

    def forward(self, x):
        y = self.bn(self.fc(x)).relu()
        return self.gn(y.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_norms_with_float32_weights_keep_the_inputs_dtype(dtype, training, tmp_path):
    torch.manual_seed(0)
    model = Normed().train(training)
    twin = Normed().train(training)
    twin.load_state_dict(model.state_dict())
    compiled = compile_fn(model, tmp_path)
    x = torch.randn(6, 8)
    with torch.autocast("cpu", dtype=dtype):
        want = twin(x)
        got = compiled(x)
    assert got.dtype == want.dtype == dtype  # was float32: the norms upcast it
    assert_like(got, want, dtype)
    # the running statistics: float32, from inputs that may differ by a rounding
    for mine, theirs in zip(model.buffers(), twin.buffers()):
        assert_like(mine, theirs, dtype)

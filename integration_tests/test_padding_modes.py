"""Circular, reflection and replication padding in 1-d, 2-d and 3-d through the
whole pipeline: values and input gradients as eager's, including pads as large
as the dimension they wrap (circular) or one less (reflection)."""

import warnings

import pytest
import torch

import ember

nn = torch.nn


@pytest.fixture(autouse=True)
def _fresh():
    ember.reset()
    yield


def _shape(dims: int) -> tuple[int, ...]:
    return (1, 2, 3, 2, 3)[: 2 + dims] if dims < 3 else (1, 1, 2, 2, 3)


def _cases():
    for dims in (1, 2, 3):
        shape = _shape(dims)
        spatial = shape[2:]
        # Pads per side, last dim first, as torch takes them.
        full = [n for n in reversed(spatial) for _ in range(2)]  # pad == size
        mixed = [max(n - 1, 0) if i % 2 else 1 for i, n in enumerate(full)]
        yield f"Circular{dims}d-full", getattr(nn, f"CircularPad{dims}d"), full, shape
        yield f"Circular{dims}d-mixed", getattr(nn, f"CircularPad{dims}d"), mixed, shape
        reflect = [max(n - 1, 0) for n in full]  # reflection needs pad < size
        yield f"Reflection{dims}d", getattr(nn, f"ReflectionPad{dims}d"), reflect, shape
        yield f"Replication{dims}d", getattr(nn, f"ReplicationPad{dims}d"), full, shape
    # The case reported: pads as large as the dimension, on every side.
    yield "Circular3d-issue", nn.CircularPad3d, [1, 2, 2, 1, 1, 2], (1, 1, 2, 2, 3)


CASES = list(_cases())


@pytest.mark.parametrize("data", ["arange", "randn"])
@pytest.mark.parametrize(
    "name, module, padding, shape", CASES, ids=[c[0] for c in CASES]
)
def test_padding_matches_eager_with_gradients(name, module, padding, shape, data):
    pad = module(tuple(padding))
    numel = torch.Size(shape).numel()
    if data == "arange":
        x = torch.arange(float(numel)).reshape(shape)
    else:
        x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    weight = torch.randn(pad(x).shape, generator=torch.Generator().manual_seed(1))

    def loss(t):
        out = pad(t)
        return out, (out * weight).sum(), out.sum()

    eager_x = x.clone().requires_grad_()
    out, weighted, plain = loss(eager_x)
    want = torch.autograd.grad(weighted + plain, eager_x)[0]

    compiled = ember.compile(loss, backend="ember")
    ember_x = x.clone().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing may fall back to torch silently
        got_out, got_weighted, got_plain = compiled(ember_x)
        got = torch.autograd.grad(got_weighted + got_plain, ember_x)[0]
    torch.testing.assert_close(got_out, out)
    torch.testing.assert_close(got, want)

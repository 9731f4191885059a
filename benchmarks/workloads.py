"""The workload kinds the suite times (benchmarks/run.py): each is a function or
module and its inputs, run for inference (under no_grad) or as a training step
(forward and backward). The shapes are those of the codegen performance issue."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ember.demo import Block


@dataclass(frozen=True)
class Workload:
    make: Callable[[], tuple[Callable, tuple]]  # (function or module, inputs)
    training: bool = False  # time forward + backward instead of no_grad forward


def thin_path() -> tuple[Callable, tuple]:
    def fn(x, w, b):
        return torch.relu(x @ w + b).sum(-1)

    return fn, (torch.randn(256, 512), torch.randn(512, 512), torch.randn(512))


def demo_block() -> tuple[Callable, tuple]:
    return Block().eval(), (torch.randn(8, 32, 64),)


class ConvNet(torch.nn.Module):
    """3 x (conv3x3 + BatchNorm + ReLU + maxpool), global average pool, linear."""

    def __init__(self) -> None:
        super().__init__()
        layers, channels = [], 3
        for width in (16, 32, 64):
            layers += [
                torch.nn.Conv2d(channels, width, 3, padding=1),
                torch.nn.BatchNorm2d(width),
                torch.nn.ReLU(),
                torch.nn.MaxPool2d(2),
            ]
            channels = width
        self.features = torch.nn.Sequential(*layers)
        self.head = torch.nn.Linear(channels, 10)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


def conv_bn_relu_pool() -> tuple[Callable, tuple]:
    model = ConvNet().eval()
    for m in model.modules():  # statistics that are not the identity
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return model, (torch.randn(4, 3, 32, 32),)


def reductions(x):
    out = []
    for dim in (-1, 1, 0):
        out += [
            x.mean(dim),
            x.var(dim),
            x.amax(dim),
            torch.logsumexp(x, dim),
            x.max(dim).values,
            x.sum(dim),
        ]
    return out


def reductions_over_dims() -> tuple[Callable, tuple]:
    return reductions, (torch.randn(8, 64, 128),)


def causal_attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    n = q.shape[-2]
    mask = torch.ones(n, n, dtype=torch.bool).triu(1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), -1) @ v


def attention() -> tuple[Callable, tuple]:
    return causal_attention, tuple(torch.randn(4, 4, 128, 64) for _ in range(3))


def mlp_training() -> tuple[Callable, tuple]:
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)
    )
    return model, (torch.randn(64, 512),)


def encoder_training() -> tuple[Callable, tuple]:
    layer = torch.nn.TransformerEncoderLayer(
        128, 4, 512, dropout=0.0, batch_first=True, norm_first=True
    )
    return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), (
        torch.randn(4, 64, 128),
    )


class RMSNormSwiGLU(torch.nn.Module):
    def __init__(self, dim: int = 256, hidden: int = 688) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.gate = torch.nn.Linear(dim, hidden, bias=False)
        self.up = torch.nn.Linear(dim, hidden, bias=False)
        self.down = torch.nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def rmsnorm_swiglu() -> tuple[Callable, tuple]:
    return RMSNormSwiGLU(), (torch.randn(2, 64, 256),)


WORKLOADS: dict[str, Workload] = {
    "thin path (256x512 @ 512x512)": Workload(thin_path),
    "demo block": Workload(demo_block),
    "conv+BN+ReLU+pool x3, (4,3,32,32)": Workload(conv_bn_relu_pool),
    "6 reductions x 3 dims of (8,64,128)": Workload(reductions_over_dims),
    "causal attention (4,4,128,64)": Workload(attention),
    "RMSNorm+SwiGLU+residual (2,64,256)": Workload(rmsnorm_swiglu),
    "MLP 512-2048-512 training, batch 64": Workload(mlp_training, training=True),
    "2 encoder layers training (4,64,128)": Workload(encoder_training, training=True),
}

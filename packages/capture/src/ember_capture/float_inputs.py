"""What transformed code calls to pass a Python float to a graph: kept apart from
emit.py so that code rebuilt from a saved entry needs nothing else of capture."""

from __future__ import annotations

import math

import torch


class FloatTensors:
    """The 0-d float64 tensor that a float input is passed to a graph as, one
    per value, reused while nobody wrote to it or asked for its gradient:
    making one costs about 2.5 us, five times per Adam step (lr, betas, eps,
    weight decay), where looking one up costs a tenth of that."""

    LIMIT = 256  # a scheduler's new lr every step must not grow this forever

    def __init__(self) -> None:
        self._made: dict[object, torch.Tensor] = {}

    def __call__(self, value: float) -> torch.Tensor:
        # 0.0 and -0.0 are equal keys but different inputs.
        key = value if value else (value, math.copysign(1.0, value))
        made = self._made.get(key)
        if made is not None and made._version == 0 and not made.requires_grad:
            return made
        if len(self._made) >= self.LIMIT:
            self._made.clear()
        # A tensor made under inference_mode could not join a later training
        # call's autograd graph.
        with torch.inference_mode(False):
            made = torch.tensor(value, dtype=torch.float64)
        self._made[key] = made
        return made


float_tensor = FloatTensors()

"""Random ops trace like any other op, with the arguments eager used.

torch's dispatcher leaves out an argument equal to its default
(``bernoulli_(x, 0.5)`` reaches ``__torch_dispatch__`` as ``bernoulli_(x)``), so
an in-place op's functional twin, which may have no default, must get it back.
Dropout with p=0.5 is that case on CPU: ``bernoulli_(1 - p)``.
"""

import pytest
import torch
import torch.nn.functional as F
from aot_helpers import check_against_eager, graph_of

from ember_aotgrad import AotGradError, aot_compile, trace_to_aten

aten = torch.ops.aten


def r(*shape):
    return torch.randn(*shape, requires_grad=True)


def _targets(fn, *inputs):
    gm = trace_to_aten(graph_of(fn, len(inputs)), list(inputs))
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


# name -> fn; each draws from the generator with an argument at its default.
DEFAULT_ARGUMENTS = {
    "bernoulli_()": lambda x: (x.detach().clone().bernoulli_() * x,),
    "bernoulli_(0.5)": lambda x: (x.detach().clone().bernoulli_(0.5) * x,),
    "bernoulli_(p=0.3)": lambda x: (x.detach().clone().bernoulli_(p=0.3) * x,),
    "dropout(0.5)": lambda x: (F.dropout(x, 0.5, training=True),),
    "dropout2d(0.5)": lambda x: (F.dropout2d(x.view(2, 2, 2, 4), 0.5, True),),
    "alpha_dropout(0.5)": lambda x: (F.alpha_dropout(x, 0.5, training=True),),
    "uniform_()": lambda x: (x.detach().clone().uniform_() * x,),
    "exponential_()": lambda x: (x.detach().clone().exponential_() * x,),
    "log_normal_()": lambda x: (x.detach().clone().log_normal_() * x,),
    "cauchy_()": lambda x: (x.detach().clone().cauchy_() * x,),
    "normal_()": lambda x: (x.detach().clone().normal_() * x,),
    "normal_(2, 3)": lambda x: (x.detach().clone().normal_(2.0, 3.0) * x,),
}


@pytest.mark.parametrize("name", DEFAULT_ARGUMENTS)
def test_random_op_with_a_default_argument_matches_eager(name):
    check_against_eager(DEFAULT_ARGUMENTS[name], [r(8, 4)], seed=3)


def test_dropout_half_is_a_bernoulli_of_one_half():
    targets = _targets(lambda x: (F.dropout(x, 0.5, training=True),), r(8, 4))
    assert aten.bernoulli.p in targets


def test_dropout_half_keeps_eager_statistics_and_its_gradient_is_mask_times_scale():
    x = torch.ones(256, 256, requires_grad=True)
    compiled = aot_compile(
        graph_of(lambda t: (F.dropout(t, 0.5, training=True),), 1),
        [x],
        lambda gm, example_inputs: gm,
    )
    (out,) = compiled(x)
    kept = out != 0
    assert 0.48 < kept.float().mean().item() < 0.52
    assert torch.equal(out[kept], torch.full_like(out[kept], 2.0))  # 1 / (1 - p)
    out.sum().backward()
    assert torch.equal(x.grad, kept.float() * 2.0)


def test_random_from_to_falls_back_with_an_aotgrad_error():
    # aten.random.from: fx cannot write an overload named with a Python keyword.
    with pytest.raises(AotGradError, match="random"):
        _targets(lambda x: (x.detach().clone().random_(3, 10) * x,), r(4))

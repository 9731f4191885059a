"""The decomposition table: each listed op's forward and gradient match eager, and
a decomposed graph holds core ops only."""

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from aot_helpers import check_against_eager, graph_of

from ember_aotgrad import (
    CORE_OPS,
    aot_compile,
    decomposition_changes,
    default_decompositions,
    is_core,
    min_cut_partition,
    register_decomposition,
)
from ember_aotgrad.decompositions import BUILTIN_RULES, DECOMPOSITIONS

aten = torch.ops.aten


def r(*shape):
    return torch.randn(*shape, requires_grad=True)


def corners():
    values = [-3.5, -3.0, -2.5, 0.0, 2.5, 3.0, 3.5]
    return torch.tensor([values, [v / 2 for v in values]], requires_grad=True)


def labels(n, classes):
    return torch.randint(0, classes, (n,))


# name -> (fn, input factory). Every input that requires grad is checked.
CASES = {
    "gelu": (lambda x: (F.gelu(x),), lambda: [r(4, 5)]),
    "gelu_tanh": (lambda x: (F.gelu(x, approximate="tanh"),), lambda: [r(4, 5)]),
    "silu": (lambda x: (F.silu(x),), lambda: [r(4, 5)]),
    "mish": (lambda x: (F.mish(x),), lambda: [r(4, 5)]),
    "hardswish": (lambda x: (F.hardswish(x * 4),), lambda: [r(4, 5)]),
    "hardsigmoid": (lambda x: (F.hardsigmoid(x * 4),), lambda: [r(4, 5)]),
    # activations at their corners, where the gradient's case changes
    "corners": (
        lambda x: (
            F.hardswish(x),
            F.hardsigmoid(x * 1.5),
            F.hardtanh(x / 3),
            F.relu6(x * 2),
            F.leaky_relu(x - 3),
            F.threshold(x, 3.0, -1.0),
        ),
        lambda: [corners()],
    ),
    "sigmoid_tanh_relu": (
        lambda x: (torch.sigmoid(x) * torch.tanh(x) + F.relu(x),),
        lambda: [r(4, 5)],
    ),
    "softmax": (lambda x: (F.softmax(x, -1), F.softmax(x, 0)), lambda: [r(4, 5)]),
    "log_softmax": (lambda x: (F.log_softmax(x, 1),), lambda: [r(3, 4, 2)]),
    "layer_norm": (
        lambda x, w, b: (F.layer_norm(x, (5,), w, b), F.layer_norm(x, (3, 5))),
        lambda: [r(2, 3, 5), r(5), r(5)],
    ),
    "rms_norm": (lambda x, w: (F.rms_norm(x, (5,), w),), lambda: [r(4, 5), r(5)]),
    "batch_norm_train": (
        lambda x, w, b, m, v: (F.batch_norm(x, m, v, w, b, training=True),),
        lambda: [r(4, 3, 5), r(3), r(3), torch.randn(3), torch.rand(3) + 0.5],
    ),
    "batch_norm_eval": (
        lambda x, w, b, m, v: (F.batch_norm(x, m, v, w, b, training=False),),
        lambda: [r(4, 3, 5), r(3), r(3), torch.randn(3), torch.rand(3) + 0.5],
    ),
    "batch_norm_no_stats": (
        lambda x: (F.batch_norm(x, None, None, training=True),),
        lambda: [r(4, 3, 2, 2)],
    ),
    "group_norm": (
        lambda x, w, b: (F.group_norm(x, 2, w, b),),
        lambda: [r(3, 4, 5), r(4), r(4)],
    ),
    "linear": (lambda x, w, b: (F.linear(x, w, b),), lambda: [r(4, 5), r(3, 5), r(3)]),
    "addmm_scaled": (
        lambda b, x, w: (torch.addmm(b, x, w, beta=0.5, alpha=2.0),),
        lambda: [r(3), r(4, 5), r(5, 3)],
    ),
    "mean_var_std": (
        lambda x: (x.mean(), x.mean(-1), x.var(0), x.std(-1, keepdim=True)),
        lambda: [r(4, 5)],
    ),
    "var_correction": (lambda x: (torch.var(x, 1, correction=0),), lambda: [r(4, 5)]),
    "logsumexp": (
        lambda x: (torch.logsumexp(x, -1), torch.logsumexp(x, (0, 1), keepdim=True)),
        lambda: [r(4, 5)],
    ),
    "cross_entropy": (
        lambda x, t: (F.cross_entropy(x, t),),
        lambda: [r(6, 5), labels(6, 5)],
    ),
    "cross_entropy_weighted_ignore": (
        lambda x, t, w: (F.cross_entropy(x, t, weight=w, ignore_index=1),),
        lambda: [r(6, 5), labels(6, 5), torch.rand(5) + 0.1],
    ),
    "nll_loss_sum_none": (
        lambda x, t: (
            F.nll_loss(x, t, reduction="sum"),
            F.nll_loss(x, t, reduction="none"),
        ),
        lambda: [r(6, 5), labels(6, 5)],
    ),
    "mse_loss": (
        lambda x, y: (F.mse_loss(x, y), F.mse_loss(x, y, reduction="sum")),
        lambda: [r(4, 5), r(4, 5)],
    ),
    "embedding": (
        lambda w, i: (F.embedding(i, w), F.embedding(i, w, padding_idx=2)),
        lambda: [r(10, 4), torch.tensor([[1, 2, 2], [9, 0, 1]])],
    ),
    "dropout_eval_and_zero": (
        lambda x: (F.dropout(x, 0.5, training=False), F.dropout(x, 0.0, training=True)),
        lambda: [r(4, 5)],
    ),
    "safe_softmax_attention": (
        lambda q, k, v: (F.scaled_dot_product_attention(q, k, v, is_causal=True),),
        lambda: [r(1, 2, 4, 8), r(1, 2, 4, 8), r(1, 2, 4, 8)],
    ),
    "leaky_relu_elu_selu_celu": (
        lambda x: (
            F.leaky_relu(x, 0.2),
            F.elu(x, 0.7),
            F.selu(x),
            F.celu(x, 1.5),
            F.elu(x * 3).exp(),  # a gradient through elu's output
        ),
        lambda: [r(4, 5)],
    ),
    "glu": (lambda x: (F.glu(x, -1), F.glu(x, 0)), lambda: [r(4, 6)]),
    "hardtanh_softplus": (
        lambda x: (
            F.hardtanh(x * 2, -1.5, 0.5),
            F.softplus(x * 5, beta=2, threshold=3),
        ),
        lambda: [r(4, 5)],
    ),
    "vector_norms": (
        lambda x: (
            x.norm(dim=-1),
            F.normalize(x, dim=0),
            torch.linalg.vector_norm(x, 1, dim=(0, 1), keepdim=True),
            torch.linalg.vector_norm(x, float("inf")),
            torch.linalg.vector_norm(x, 3.0, dim=1),
        ),
        lambda: [r(4, 5)],
    ),
    "max_pool2d": (
        lambda x: (
            F.max_pool2d(x, 3, 2, 1),  # overlapping windows: added gradients
            F.max_pool2d(x.contiguous(memory_format=torch.channels_last), 2),
        ),
        lambda: [r(2, 3, 7, 6)],
    ),
    "views_and_creation": (
        lambda x: (
            x.t() @ torch.ones(4, 2),
            torch.cat([a * 2 for a in x.split(2, dim=0)], 1),
            torch.stack(x.unbind(1)).masked_fill(x.t() > 0, 0.5),
            1 - x,
        ),
        lambda: [r(4, 5)],
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_op_forward_and_gradients_match_eager(name):
    fn, make = CASES[name]
    torch.manual_seed(0)
    check_against_eager(fn, make())


@pytest.mark.parametrize("name", CASES)
def test_decomposed_graph_is_core_only(name):
    fn, make = CASES[name]
    torch.manual_seed(0)
    compiled = aot_compile(graph_of(fn, len(make())), make(), lambda g, e: g)
    graphs = [compiled.forward, compiled.backward_plan.graph]
    for gm in graphs:
        outside = {
            str(n.target)
            for n in gm.graph.nodes
            if n.op == "call_function" and not is_core(n.target)
        }
        assert not outside, f"{name}: not in the core set: {sorted(outside)}"


def test_norms_of_a_permuted_input_are_row_major_as_in_eager():
    """Eager's layer_norm, softmax and batch_norm kernels write row-major
    results for a permuted input (and layer_norm's input gradient is
    row-major); a projection after them then views them without a copy. The
    decompositions keep those layouts."""

    def fn(x, w, b):
        x = x.permute(0, 2, 1)
        stats = torch.zeros(3), torch.ones(3)
        return (
            F.layer_norm(x, (4,), w, b),
            F.softmax(x, -1),
            F.log_softmax(x, 1),
            F.batch_norm(x, *stats),  # (channels-last would be kept)
            F.batch_norm(x, None, None, training=True),
        )

    inputs = [r(2, 4, 3), r(4), r(4)]
    compiled = check_against_eager(fn, inputs)
    for got, want in zip(compiled(*inputs), fn(*inputs)):
        assert got.stride() == want.stride() == (12, 4, 1)

    def norm(x):
        return (F.layer_norm(x, (4,)),)

    x = torch.randn(2, 4, 3).permute(0, 2, 1).requires_grad_()
    (out,) = aot_compile(graph_of(norm, 1), [x], lambda g, e: g)(x)
    (got,) = torch.autograd.grad(out.sum(), x)
    (want,) = torch.autograd.grad(norm(x)[0].sum(), x)
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("params", [torch.float32, torch.bfloat16])
def test_half_precision_norms_compute_in_float32_as_eager(params):
    """Eager's CPU norms and softmax compute a bfloat16 input in float32 and
    round once; with float32 weights (mixed precision) the output keeps the
    input's dtype and the statistics and weight gradients the weights'. The
    decompositions computed in bfloat16 and returned float32 outputs."""

    def fn(x, w, b, mean, var):
        return (
            F.layer_norm(x, (8,), w, b),
            F.group_norm(x, 2, w, b),
            F.batch_norm(x, mean, var, w, b, training=True),
            F.batch_norm(x, mean, var, w, b),
            F.softmax(x, -1),
        )

    torch.manual_seed(0)
    x = torch.randn(4, 8, 8, dtype=torch.bfloat16, requires_grad=True)
    w, b = (torch.randn(8, dtype=params, requires_grad=True) for _ in range(2))
    stats = [torch.zeros(8, dtype=params), torch.ones(8, dtype=params)]
    inputs = [x, w, b, *stats]
    compiled = aot_compile(graph_of(fn, 5), inputs, lambda g, e: g)
    got = compiled(
        *[t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    )
    want = fn(*[t.detach().clone().requires_grad_(t.requires_grad) for t in inputs])
    # mixed precision: exactly eager's; all in bfloat16, eager's batch norm
    # rounds in places of its own (within one bfloat16 step)
    exact = params == torch.float32
    for g, e in zip(got, want):
        assert g.dtype == e.dtype == torch.bfloat16
        torch.testing.assert_close(
            g, e, atol=0 if exact else 1e-2, rtol=0 if exact else 1e-2
        )
    # the gradients: in the input's and the weights' dtypes, within rounding
    check_against_eager(fn, inputs, atol=2e-2, rtol=2e-2)


def test_logsumexp_takes_its_log_at_the_reduced_shape():
    """Without keepdim the log and the add follow a plain sum (no size-1 dim
    and no squeeze after them), so codegen runs them in the sum's loops."""
    x = torch.randn(4, 5, 6)
    compiled = aot_compile(
        graph_of(lambda x: (torch.logsumexp(x, 1),), 1), [x], lambda g, e: g
    )
    (log,) = [n for n in compiled.forward.graph.nodes if n.target is aten.log.default]
    summed = log.args[0]
    assert summed.target is aten.sum.dim_IntList and summed.args[2:] in ((), (False,))
    assert list(log.meta["val"].shape) == [4, 6]
    assert not any(
        n.target is aten.squeeze.dims and n.args[0].target is aten.add.Tensor
        for n in compiled.forward.graph.nodes
    )
    torch.testing.assert_close(compiled(x)[0], torch.logsumexp(x, 1))


def test_dropout_matches_eager_under_the_same_seed():
    def fn(x):
        return (F.dropout(x, 0.3, training=True) * 2,)

    for partitioner in (None, min_cut_partition):
        kwargs = {} if partitioner is None else {"partitioner": partitioner}
        check_against_eager(fn, [r(8, 16)], seed=7, **kwargs)


def test_every_rule_targets_an_op_outside_the_core_set():
    assert DECOMPOSITIONS
    assert not set(DECOMPOSITIONS) & CORE_OPS


def test_registering_twice_is_an_error_and_the_default_table_is_a_copy():
    table = default_decompositions()
    table.pop(aten.gelu.default)
    assert aten.gelu.default in default_decompositions()
    with pytest.raises(ValueError, match="already"):
        register_decomposition(aten.gelu.default)(lambda x: x)


def test_without_decompositions_ops_stay_whole_and_still_match():
    fn, make = CASES["layer_norm"]
    compiled = check_against_eager(fn, make(), decompositions={})
    targets = {n.target for n in compiled.forward.graph.nodes}
    assert aten.native_layer_norm.default in targets


def test_table_changes_name_added_replaced_and_removed_rules():
    assert decomposition_changes() == ()  # the shipped table
    gelu_rule = DECOMPOSITIONS[aten.gelu.default]

    def my_hardshrink(x, lambd=0.5):
        return aten.where.self(aten.abs.default(x) > lambd, x, 0.0)

    try:
        register_decomposition(aten.hardshrink.default)(my_hardshrink)
        DECOMPOSITIONS[aten.gelu.default] = my_hardshrink
        del DECOMPOSITIONS[aten.silu.default]
        changes = decomposition_changes()
    finally:
        DECOMPOSITIONS.pop(aten.hardshrink.default, None)
        DECOMPOSITIONS[aten.gelu.default] = gelu_rule
        DECOMPOSITIONS[aten.silu.default] = BUILTIN_RULES[aten.silu.default]
    here = f"{__name__}.test_table_changes_name_added_replaced_and_removed_rules"
    assert changes == (
        f"aten.gelu.default={here}.<locals>.my_hardshrink",
        f"aten.hardshrink.default={here}.<locals>.my_hardshrink",
        "aten.silu.default=removed",
    )
    assert decomposition_changes() == ()


def test_table_changes_do_not_import_the_rules():
    code = (
        "import sys, ember_aotgrad\n"
        "assert ember_aotgrad.decomposition_changes() == ()\n"
        "assert 'ember_aotgrad.decompositions' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

"""PyTorch's OpInfo database through the whole pipeline, compared with eager.

Each op's float32 CPU samples are called from a small generated function that
``ember.compile(fn, backend="ember")`` compiles afresh for every sample, and the
results are compared with eager's: values (and non-tensor results), which outputs
alias an input (in both directions: ember never returns a view where eager
returns a fresh tensor, nor a copy where eager returns a view), what the call
wrote into its inputs, and, in the backward mode, the gradients of a weighted sum
of the outputs with respect to every input that requires grad.

A fixed, deterministic subset runs by default (every ``STRIDE``-th op, its first
``DEFAULT_SAMPLES`` samples). ``EMBER_OPINFO_SWEEP=full`` (what ``nox -s sweep``
sets) runs every op and every sample; ``EMBER_OPINFO_SAMPLES=N`` caps the samples
per op. A sample whose eager result differs between two seeds (a random op) is
skipped, and so are the few ops in ``EXCLUDED``.
"""

from __future__ import annotations

import itertools
import os
import warnings

import pytest
import torch
from torch.utils import _pytree as pytree

import ember

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torch.testing._internal.common_methods_invocations import op_db

FULL = os.environ.get("EMBER_OPINFO_SWEEP", "") == "full"
STRIDE = 5  # the default run takes every 5th op...
DEFAULT_SAMPLES = 2  # ...and its first two samples
# At most this many samples per op (the full sweep: all of them, unless set).
MAX_SAMPLES = int(os.environ.get("EMBER_OPINFO_SAMPLES", "0")) or (
    None if FULL else DEFAULT_SAMPLES
)

# Ops whose eager result cannot be compared with anything (never ember bugs).
EXCLUDED = {
    # Return uninitialized memory: two eager calls already differ.
    "empty": "uninitialized memory",
    "empty_like": "uninitialized memory",
    "empty_strided": "uninitialized memory",
    "empty_permuted": "uninitialized memory",
    "new_empty": "uninitialized memory",
    "new_empty_strided": "uninitialized memory",
}


def _name(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _float32_ops():
    return [op for op in op_db if torch.float32 in op.supported_dtypes("cpu")]


def _selected():
    ops = _float32_ops()
    return ops if FULL else ops[::STRIDE]


# -- one sample as a function of its tensors -------------------------------------


def _as_function(op, sample):
    """``(fn, tensors)``: ``fn(*tensors)`` calls the op on the sample, the
    tensors passed as arguments and every other value a constant."""
    tensors: list[torch.Tensor] = []
    constants: dict[str, object] = {"op": op.op}

    def render(value) -> str:
        if isinstance(value, torch.Tensor):
            tensors.append(value)
            return f"t{len(tensors) - 1}"
        if type(value) in (list, tuple):
            inner = ", ".join(render(v) for v in value)
            if type(value) is list:
                return f"[{inner}]"
            return f"({inner},)" if inner else "()"
        if value is None or type(value) in (bool, int, str):
            return repr(value)
        name = f"c{len(constants)}"
        constants[name] = value
        return name

    args = [render(sample.input), *(render(a) for a in sample.args)]
    args += [f"{k}={render(v)}" for k, v in sample.kwargs.items()]
    params = ", ".join(f"t{i}" for i in range(len(tensors)))
    source = f"def fn({params}):\n    return op({', '.join(args)})\n"
    namespace = dict(constants)
    exec(compile(source, f"<opinfo {op.name}>", "exec"), namespace)
    return namespace["fn"], tensors


def _clone(tensors, requires_grad):
    """Copies with the samples' own strides and storage offsets (a
    non-contiguous sample must reach the op non-contiguous)."""
    out = []
    for t in tensors:
        t = t.detach()
        if t.layout == torch.strided:
            c = torch.empty(0, dtype=t.dtype).set_(
                t.untyped_storage().clone(), t.storage_offset(), t.shape, t.stride()
            )
        else:
            c = t.clone()
        if requires_grad and t.requires_grad:
            c.requires_grad_()
        out.append(c)
    return out


def _aliases(outputs, inputs) -> list[bool]:
    """For each tensor output: whether it shares memory with an input."""
    ptrs = {
        t.untyped_storage().data_ptr()
        for t in inputs
        if t.layout == torch.strided and t.untyped_storage().nbytes() > 0
    }
    return [
        o.untyped_storage().nbytes() > 0 and o.untyped_storage().data_ptr() in ptrs
        for o in pytree.tree_leaves(outputs)
        if isinstance(o, torch.Tensor) and o.layout == torch.strided
    ]


def _assert_same(expected, actual, what: str) -> None:
    exp_leaves, exp_spec = pytree.tree_flatten(expected)
    act_leaves, act_spec = pytree.tree_flatten(actual)
    assert exp_spec == act_spec, f"{what}: structure {act_spec} != eager's {exp_spec}"
    for i, (e, a) in enumerate(zip(exp_leaves, act_leaves)):
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor), f"{what}[{i}]: {type(a)} not a tensor"
            torch.testing.assert_close(
                a.detach(),
                e.detach(),
                rtol=1e-4,
                atol=1e-4,
                equal_nan=True,
                msg=lambda m, i=i: f"{what}[{i}]: {m}",
            )
        else:
            assert e == a or (e != e and a != a), f"{what}[{i}]: {a!r} != eager's {e!r}"


def _weights(outputs):
    gen = torch.Generator().manual_seed(1234)
    return [torch.randn(o.shape, generator=gen) for o in outputs]


def _grads(outputs, inputs, sample, weights=None):
    """Gradients of a weighted sum of the differentiable outputs (None: none)."""
    outs = sample.output_process_fn_grad(outputs)
    diff = [
        o
        for o in pytree.tree_leaves(outs)
        if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point()
    ]
    wrt = [t for t in inputs if t.requires_grad]
    if not diff or not wrt:
        return None, weights
    weights = weights or _weights(diff)
    loss = sum((o * w).sum() for o, w in zip(diff, weights))
    grads = torch.autograd.grad(loss, wrt, allow_unused=True)
    return [
        g if g is not None else torch.zeros_like(t) for g, t in zip(grads, wrt)
    ], weights


def _is_random(fn, tensors) -> bool:
    """Whether two eager calls on the same inputs, under two seeds, differ."""
    results = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        try:
            results.append(fn(*_clone(tensors, False)))
        except Exception:
            return False
    try:
        _assert_same(results[0], results[1], "eager")
    except AssertionError:
        return True
    return False


def check_sample(op, sample, backward: bool) -> str | None:
    """None when ember agrees with eager on ``sample``, else what differs.
    Raises ``pytest.skip.Exception`` for a sample eager itself cannot run."""
    fn, tensors = _as_function(op, sample)
    eager_inputs = _clone(tensors, backward)
    torch.manual_seed(0)
    try:
        expected = fn(*eager_inputs)
    except Exception as e:
        return f"skip: eager raises {type(e).__name__}"
    if _is_random(fn, tensors):
        return "skip: random"
    compiled = ember.compile(fn, backend="ember")
    inputs = _clone(tensors, backward)
    torch.manual_seed(0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            actual = compiled(*inputs)
            _assert_same(expected, actual, "output")
            eager_alias = _aliases(expected, eager_inputs)
            ember_alias = _aliases(actual, inputs)
            assert eager_alias == ember_alias, (
                f"outputs aliasing an input: {ember_alias}, eager's {eager_alias}"
            )
            _assert_same(eager_inputs, inputs, "inputs after the call")
            if backward:
                exp_grads, weights = _grads(expected, eager_inputs, sample)
                if exp_grads is not None:
                    act_grads, _ = _grads(actual, inputs, sample, weights)
                    _assert_same(exp_grads, act_grads, "grad")
    except Exception as e:
        return f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return None


def check_op(op, backward: bool) -> tuple[int, list[str]]:
    """``(samples compared, failures)`` of one op."""
    if backward and not op.supports_autograd:
        pytest.skip("no autograd")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = op.sample_inputs("cpu", torch.float32, requires_grad=backward)
        if MAX_SAMPLES is not None:
            samples = itertools.islice(samples, MAX_SAMPLES)
        samples = list(samples)
    compared, failures, random = 0, [], 0
    for i, sample in enumerate(samples):
        ember.reset()
        result = check_sample(op, sample, backward)
        if result == "skip: random":
            random += 1
        elif result is None:
            compared += 1
        elif not result.startswith("skip:"):
            failures.append(f"sample {i} ({sample.summary()[:120]}): {result}")
    if random and not compared and not failures:
        pytest.skip("random: eager differs between two seeds")
    return compared, failures


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("op", _selected(), ids=_name)
def test_opinfo(op, backward):
    if _name(op) in EXCLUDED or op.name in EXCLUDED:
        pytest.skip(EXCLUDED.get(_name(op), EXCLUDED.get(op.name)))
    _, failures = check_op(op, backward)
    assert not failures, "\n".join(failures)

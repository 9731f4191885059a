"""Autocast in capture: blocks become graph regions, example outputs carry the
dtypes eager's autocast gives, the ambient autocast is guarded and written into
the graph, and a break inside a block leaves the block to Python."""

import pytest
import torch
import torch.nn.functional as F

from ember_capture import capture
from ember_capture.meta_memo import check_meta_results

ENTER, EXIT = torch.amp._enter_autocast, torch.amp._exit_autocast


def example_dtypes(result):
    gm = result.graphs[0].gm
    return {
        n.name: n.meta["example_value"].dtype
        for n in gm.graph.nodes
        if isinstance(n.meta.get("example_value"), torch.Tensor)
    }


def targets(result, index=0):
    nodes = result.graphs[index].gm.graph.nodes
    return [n.target for n in nodes if n.op == "call_function"]


def run(result, *args):
    return result.build([g.gm for g in result.graphs])(*args)


def args():
    return torch.randn(4, 8), torch.randn(8, 5), torch.randn(5)


def nested(x, w, b):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w + b  # bfloat16 matmul, float32 add
        with torch.autocast("cpu", enabled=False):
            z = x @ w
        with torch.autocast("cpu", dtype=torch.float16):
            h = torch.mm(x, w)
        return y, z, h, F.cross_entropy(y, torch.zeros(4, dtype=torch.long))


def test_blocks_are_regions_with_eager_dtypes():
    result = capture(nested, *args())
    ops = targets(result)
    assert ops.count(ENTER) == ops.count(EXIT) == 3
    dtypes = example_dtypes(result)
    assert dtypes["matmul"] == torch.bfloat16 and dtypes["add"] == torch.float32
    assert dtypes["matmul_1"] == torch.float32 and dtypes["mm"] == torch.float16
    assert dtypes["cross_entropy"] == torch.float32
    a = args()
    for got, want in zip(run(result, *a), nested(*a)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)  # the graph runs its own regions
    assert not torch.is_autocast_enabled("cpu")


def test_ambient_autocast_encloses_the_graph_and_is_guarded():
    def fn(x, w, b):
        return torch.relu(x @ w + b)

    with torch.autocast("cpu", dtype=torch.float16):
        result = capture(fn, *args())
        check = result.guard_checker()
        assert check.check(dict(zip("xwb", args())))
    ops = targets(result)
    assert ops[0] is ENTER and ops[-1] is EXIT
    assert example_dtypes(result)["matmul"] == torch.float16
    state = dict(zip("xwb", args()))
    assert not check.check(state)  # no autocast now
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not check.check(state)  # another dtype
        assert "torch global state changed" in check.failure(state)
    a = args()
    with torch.autocast("cpu", dtype=torch.float16):
        want = fn(*a)
    got = run(result, *a)  # the regions hold outside any autocast, too
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want)


@torch.autocast("cpu")
def decorated(x, w):
    return x @ w


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.autocast("cpu"),
        lambda: torch.amp.autocast(device_type="cpu", dtype=torch.bfloat16),
        lambda: torch.cpu.amp.autocast(),
    ],
    ids=["torch.autocast", "torch.amp.autocast", "torch.cpu.amp.autocast"],
)
@pytest.mark.filterwarnings("ignore:.*torch.cpu.amp.autocast.*:FutureWarning")
def test_every_spelling_of_autocast_and_the_decorator(make):
    def fn(x, w, b):
        with make() as ctx:
            y = x @ w
        return y, decorated(x, w), ctx is not None

    result = capture(fn, *args())
    assert len(result.graphs) == 1 and result.break_reason is None
    dtypes = example_dtypes(result)
    assert list(dtypes.values()).count(torch.bfloat16) == 2


def test_a_break_inside_a_block_leaves_the_block_to_python():
    def fn(x, w, b):
        y = x.sin()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = y @ w
            print("breaks")
            z = z + b
        return z.cos()

    result = capture(fn, *args())
    assert result.break_reason is not None
    assert "autocast block with a graph break inside" in str(result.break_reason)
    assert ENTER not in targets(result)  # the graph ends before the with
    a = args()
    torch.testing.assert_close(run(result, *a), fn(*a))
    assert not torch.is_autocast_enabled("cpu")


def test_switching_autocast_by_hand_is_refused_and_state_is_restored():
    def fn(x):
        torch.set_autocast_enabled("cpu", True)
        return x + 1

    result = capture(fn, torch.randn(2))
    assert "changes torch's global state" in str(result.break_reason)
    assert not torch.is_autocast_enabled("cpu")


def test_an_op_whose_kernel_autocasts_inside_runs_eagerly():
    def fn(x):
        return torch.linalg.pinv(x.sin()).cos()

    x = torch.randn(5, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        result = capture(fn, x)
        assert "linalg_pinv under autocast" in str(result.break_reason)
        want = fn(x)
        assert want.dtype == torch.bfloat16  # pinv's own matmuls ran in bfloat16
        assert run(result, x).dtype == want.dtype


def test_meta_results_under_autocast_are_valid_memo_entries():
    def fn(x, w, b):
        return torch.relu(x @ w + b)

    with torch.autocast("cpu", dtype=torch.bfloat16):
        result = capture(fn, *args())
    assert result.meta_results
    assert check_meta_results(result.meta_results) is None
    assert all('["cpu"]' in key for key in result.meta_results)

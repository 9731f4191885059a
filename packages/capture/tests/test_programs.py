"""A corpus of small programs over the constructs model code is written in.

Each program is captured on one set of random inputs, then run (through its own
captured graph) on that set and on fresh data of the same kind; every result must
equal eager, and the fresh call must hit the same guarded entry.
"""

import collections
import dataclasses
import math
import operator

import pytest
import torch
import torch.nn.functional as F
from conftest import CaptureCache, assert_tree_equal

PROGRAMS = []


def program(*make_args):
    """Register ``fn`` with factories of its arguments (fresh data on each call)."""

    def register(fn):
        PROGRAMS.append(pytest.param(fn, make_args, id=fn.__name__))
        return fn

    return register


def t(*shape, dtype=torch.float32):
    return lambda: torch.randn(*shape).to(dtype)


def const(value):
    return lambda: value


SCALE = 0.5
OFFSETS = (1.0, 2.0, 3.0)
Pair = collections.namedtuple("Pair", ["first", "second"])


@dataclasses.dataclass
class Out:
    loss: torch.Tensor
    logits: torch.Tensor
    tag: str = "out"


def helper_square(x):
    return x * x


def helper_kw(x, *, alpha=2.0, beta=1.0):
    return x * alpha + beta


def helper_star(*xs):
    return sum(xs)


def helper_kwargs(x, **options):
    return x * options.get("scale", 1.0) + options.get("shift", 0.0)


# -- arithmetic and operators ----------------------------------------------------------


@program(t(3, 4), t(3, 4))
def binary_ops(x, y):
    return x + y, x - y, x * y, x / (y.abs() + 1), x**2, x // 1.5, x % 2.0


@program(t(3, 4))
def unary_ops(x):
    return -x, +x, abs(x), ~(x > 0)


@program(t(4, 4))
def inplace_operators(x):
    y = x.clone()
    y += 1
    y *= 2
    y -= 0.5
    y /= 3
    return y


@program(t(3, 4), t(3, 4))
def comparisons(x, y):
    return x < y, x <= y, x > y, x >= y, x == y, x != y


@program(t(2, 3), t(3, 5))
def matmul_operator(x, w):
    return x @ w


@program(t(2, 3), t(2, 3))
def bitwise_on_bools(x, y):
    a, b = x > 0, y > 0
    return a & b, a | b, a ^ b


@program(t(5))
def python_number_arithmetic(x):
    n = 3
    k = n * 2 + 1 - n // 2 % 3
    return x * k + 2**n - math.sqrt(16)


@program(t(5))
def float_int_mix(x):
    return x * 1 + 2.5 - 1


@program(t(4))
def chained_comparison_constants(x):
    n = 3
    return x * (1 if 0 < n < 5 else 2)


@program(t(3))
def reversed_operand_order(x):
    return 2 - x, 3 / (x.abs() + 1), 2**x


# -- locals, globals, closures ---------------------------------------------------------


@program(t(3))
def global_constant(x):
    return x * SCALE


@program(t(3))
def global_tuple(x):
    return x + OFFSETS[0] + OFFSETS[-1]


@program(t(3))
def global_function(x):
    return helper_square(x) + 1


@program(t(3))
def closure_over_constant(x):
    k = 4

    def inner(y):
        return y * k

    return inner(x)


@program(t(3))
def closure_over_tensor(x):
    y = x * 2

    def inner(z):
        return z + y

    return inner(x)


@program(t(3))
def nonlocal_counter(x):
    total = 0

    def bump():
        nonlocal total
        total += 1

    bump()
    bump()
    return x * total


@program(t(3))
def lambda_call(x):
    f = lambda v: v * 3  # noqa: E731
    return f(x)


@program(t(3))
def lambda_with_default(x):
    f = lambda v, k=2: v * k  # noqa: E731
    return f(x), f(x, 5)


@program(t(3))
def nested_closures(x):
    a = 2

    def outer(y):
        b = 3

        def inner(z):
            return z * a + b

        return inner(y)

    return outer(x)


@program(t(3))
def reassigned_local(x):
    y = x
    y = y + 1
    y = y * 2
    return y


@program(t(3))
def deleted_local(x):
    y = x + 1
    z = y * 2
    del y
    return z


@program(t(3))
def builtin_names(x):
    return x * len([1, 2, 3]) + abs(-2)


# -- calls -----------------------------------------------------------------------------


@program(t(3))
def call_with_keywords(x):
    return helper_kw(x, alpha=3.0), helper_kw(x, beta=0.0, alpha=1.0)


@program(t(3), t(3), t(3))
def call_with_star_args(a, b, c):
    return helper_star(a, b, c)


@program(t(3))
def call_with_unpacked_list(x):
    parts = [x, x * 2, x * 3]
    return helper_star(*parts)


@program(t(3))
def call_with_unpacked_dict(x):
    opts = {"alpha": 0.5, "beta": 2.0}
    return helper_kw(x, **opts)


@program(t(3))
def call_into_kwargs_function(x):
    return helper_kwargs(x, scale=2.0), helper_kwargs(x)


@program(t(3))
def call_mixed_star(x):
    args = (x,)
    kw = {"shift": 1.0}
    return helper_kwargs(*args, scale=3.0, **kw)


def _recursive(x, n):
    if n == 0:
        return x
    return _recursive(x * 2, n - 1)


@program(t(3))
def recursion_unrolled(x):
    return _recursive(x, 4)


@program(t(2, 3), const((4, 5)))
def default_argument_used(x, size=(1, 1)):
    return x.sum() * size[0] * size[1]


@program(t(4, 4))
def torch_functions(x):
    return (
        torch.sin(x),
        torch.exp(x),
        torch.clamp(x, -0.5, 0.5),
        torch.where(x > 0, x, 0),
    )


@program(t(4, 6))
def functional_calls(x):
    return F.relu(x), F.gelu(x), F.silu(x), F.softmax(x, dim=-1), F.layer_norm(x, (6,))


@program(t(2, 3, 4))
def tensor_methods(x):
    return (
        x.sum(-1),
        x.mean(dim=(0, 2)),
        x.permute(2, 0, 1),
        x.reshape(6, 4),
        x.flatten(1),
    )


@program(t(2, 3))
def torch_tensor_method_unbound(x):
    return torch.Tensor.add(x, 1), torch.Tensor.mul(x, x)


@program(t(2, 3))
def operator_functions(x):
    return operator.add(x, 1), operator.mul(x, 2), operator.neg(x)


@program(t(6))
def math_functions_on_constants(x):
    return x * math.cos(0.0) + math.floor(2.7) + math.log(math.e)


@program(t(4, 4))
def factory_functions(x):
    return x + torch.ones(4, 4), x * torch.zeros_like(x), torch.arange(4) + x.shape[0]


@program(t(3, 4))
def factory_with_dtype_device(x):
    z = torch.full((3, 4), 2.0, dtype=x.dtype, device=x.device)
    return x * z


@program(t(4, 5))
def multi_output_ops(x):
    values, indices = torch.max(x, dim=1)
    a, b = torch.chunk(x, 2, dim=0)
    return values, indices, a, b


@program(t(4, 5))
def split_into_list(x):
    parts = torch.split(x, 2, dim=1)
    return [p.sum() for p in parts]


@program(t(3, 4), t(3, 4))
def cat_and_stack(x, y):
    return torch.cat([x, y], dim=0), torch.stack((x, y), dim=1)


@program(t(5, 5))
def tensor_properties(x):
    return x.T, x.mT, x.shape, x.dtype, x.ndim, x.device


@program(t(2, 3))
def tensor_to_dtype(x):
    return x.to(torch.float64), x.double(), x.int(), x.to(dtype=torch.float16)


@program(t(3, 3))
def tensor_in_place_methods(x):
    y = x.clone()
    y.add_(1).mul_(2)
    y.clamp_(min=0.5)
    return y


@program(t(3, 3))
def setitem_on_local_tensor(x):
    y = torch.zeros(3, 3)
    y[0] = x[0]
    y[:, 1] = 5.0
    return y


# -- shapes and metadata as constants --------------------------------------------------


@program(t(4, 6))
def shape_arithmetic(x):
    b, n = x.shape
    return x.view(b * n // 2, 2), x.size(-1) * 2, x.numel()


@program(t(4, 6))
def shape_in_branch(x):
    if x.shape[0] > 2:
        return x * 2
    return x


@program(t(4, 6))
def ndim_in_branch(x):
    if x.ndim == 2:
        x = x.unsqueeze(0)
    return x


@program(t(4, 6, dtype=torch.float64))
def dtype_in_branch(x):
    if x.dtype == torch.float64:
        return x.float()
    return x


@program(t(3))
def device_in_branch(x):
    if x.device.type == "cpu":
        return x + 1
    return x - 1


@program(t(3, 4))
def is_floating_point_branch(x):
    return x * 2 if x.is_floating_point() else x


@program(t(3, 4))
def requires_grad_branch(x):
    return x.detach() if x.requires_grad else x * 3


@program(t(2, 3, 4))
def size_tuple_ops(x):
    shape = x.shape
    new = shape[:-1] + (2, 2)  # noqa: RUF005 (the construct under test)
    return x.reshape(new), len(shape), shape[-1]


@program(t(3, 8))
def contiguous_and_stride(x):
    y = x.t()
    return y.contiguous() if not y.is_contiguous() else y, y.stride()


# -- control flow ----------------------------------------------------------------------


@program(t(3), const(True))
def if_on_bool_argument(x, flag):
    if flag:
        return x + 1
    return x - 1


@program(t(3), const(2))
def if_elif_else(x, mode):
    if mode == 0:
        y = x
    elif mode == 1:
        y = x * 2
    else:
        y = x * 3
    return y


@program(t(3), const(None))
def if_none(x, bias):
    if bias is None:
        return x
    return x + bias


@program(t(3), t(3))
def if_not_none(x, bias):
    if bias is not None:
        return x + bias
    return x


@program(t(3), const(1))
def ternary(x, k):
    return x * 2 if k > 0 else x / 2


@program(t(3), const(True), const(False))
def boolean_operators(x, a, b):
    y = x if a and not b else -x
    z = x if a or b else -x
    return y, z


@program(t(3), const(5))
def while_loop(x, n):
    i = 0
    while i < n:
        x = x + i
        i += 1
    return x


@program(t(3))
def while_with_break(x):
    i = 0
    while True:
        x = x * 1.5
        i += 1
        if i >= 3:
            break
    return x


@program(t(3))
def for_range(x):
    for i in range(4):
        x = x + i
    return x


@program(t(3))
def for_range_step(x):
    acc = x
    for i in range(10, 0, -3):
        acc = acc * 0.9 + i
    return acc


@program(t(3))
def for_with_continue(x):
    for i in range(6):
        if i % 2:
            continue
        x = x + i
    return x


@program(t(3))
def for_else(x):
    for i in range(3):
        if i == 10:
            break
    else:
        x = x + 100
    return x


@program(t(3))
def nested_loops(x):
    for i in range(3):
        for j in range(2):
            x = x + i * j
    return x


@program(t(3))
def for_over_list(x):
    for w in [0.5, 1.5, 2.5]:
        x = x * w
    return x


@program(t(3), t(3), t(3))
def for_over_tensor_list(a, b, c):
    total = torch.zeros(3)
    for item in [a, b, c]:
        total = total + item
    return total


@program(t(3))
def for_over_tuple_unpacking(x):
    for scale, shift in ((1.0, 2.0), (3.0, 4.0)):
        x = x * scale + shift
    return x


@program(t(3))
def for_over_dict_items(x):
    weights = {"a": 1.0, "b": 2.0}
    for name, w in weights.items():
        x = x * w if name == "a" else x + w
    return x


@program(t(3))
def for_over_dict_keys_values(x):
    d = {"p": 2.0, "q": 3.0}
    for k in d:
        x = x + d[k]
    for v in d.values():
        x = x * v
    return x, list(d.keys())


@program(t(3), t(3))
def for_zip(x, y):
    out = []
    for a, b in zip([x, y], [1.0, 2.0]):
        out.append(a * b)
    return out


@program(t(3))
def for_enumerate(x):
    for i, w in enumerate([1.0, 2.0, 3.0], start=1):
        x = x + i * w
    return x


@program(t(3))
def for_reversed(x):
    order = []
    for i in reversed(range(3)):
        order.append(i)
        x = x * (i + 1)
    return x, order


@program(t(4, 3))
def for_over_tensor_rows(x):
    rows = []
    for row in x:
        rows.append(row.sum())
    return torch.stack(rows)


@program(t(3))
def iter_and_next(x):
    it = iter([1.0, 2.0, 3.0])
    first = next(it)
    second = next(it)
    return x * first + second, next(it, None)


# -- comprehensions and generators -----------------------------------------------------


@program(t(3))
def list_comprehension(x):
    return [x * i for i in range(3)]


@program(t(3))
def list_comprehension_with_condition(x):
    return [x + i for i in range(6) if i % 2 == 0]


@program(t(3))
def nested_comprehension(x):
    return [[x * i * j for j in range(2)] for i in range(2)]


@program(t(3))
def dict_comprehension(x):
    return {f"k{i}": x * i for i in range(3)}


@program(t(3))
def set_comprehension_of_constants(x):
    s = {i % 3 for i in range(10)}
    return x * len(s)


@program(t(3))
def generator_into_sum(x):
    return sum(x * i for i in range(4))


@program(t(3))
def generator_into_tuple(x):
    return tuple(x + i for i in range(3))


@program(t(2, 2), t(2, 2))
def generator_into_cat(a, b):
    return torch.cat(list(t * 2 for t in (a, b)))


@program(t(3))
def any_all_over_constants(x):
    flags = [True, False, True]
    return x * (2 if any(flags) else 1) * (3 if all(flags) else 1)


@program(t(3))
def comprehension_reads_closure(x):
    k = 3
    return [x * k + i for i in range(2)]


@program(t(3))
def min_max_over_constants(x):
    sizes = [4, 1, 3]
    return x * min(sizes) + max(sizes) + max(2, 5)


@program(t(3))
def sum_of_constants(x):
    return x * sum([1, 2, 3])


@program(t(3))
def sorted_constants(x):
    order = sorted([3, 1, 2], reverse=True)
    return x * order[0], order


# -- containers ------------------------------------------------------------------------


@program(t(3))
def tuple_building_and_unpacking(x):
    a, b, c = x, x * 2, x * 3
    return c, b, a


@program(t(3))
def starred_unpacking(x):
    first, *middle, last = [x, x + 1, x + 2, x + 3]
    return first, middle, last


@program(t(3))
def list_mutation_local(x):
    items = [x]
    items.append(x * 2)
    items.extend([x * 3, x * 4])
    items.insert(0, x - 1)
    last = items.pop()
    items.reverse()
    return items, last


@program(t(3))
def list_slicing(x):
    items = [x * i for i in range(5)]
    return items[1:3], items[::-2], items[-1]


@program(t(3))
def list_concat_and_repeat(x):
    a = [x] + [x * 2]  # noqa: RUF005 (the construct under test)
    return a * 2


@program(t(3))
def dict_building_and_access(x):
    d = {"a": x, "b": x * 2}
    d["c"] = d["a"] + d["b"]
    return d["c"], d.get("missing", 5), len(d), "a" in d


@program(t(3))
def dict_update_and_pop(x):
    d = dict(a=x, b=x + 1)
    d.update({"c": x + 2})
    d.setdefault("e", x * 0)
    popped = d.pop("a")
    return popped, d


@program(t(3))
def dict_constructor_from_pairs(x):
    d = dict([("u", x), ("v", x * 2)])
    return d


@program(t(3))
def set_membership(x):
    allowed = {"relu", "gelu"}
    return x * (2 if "relu" in allowed else 1), x * (2 if "tanh" not in allowed else 1)


@program(t(3))
def tuple_methods(x):
    names = ("a", "b", "c", "b")
    return x * names.index("c") + names.count("b")


@program(t(3))
def nested_containers(x):
    cfg = {"layers": [(1.0, "a"), (2.0, "b")]}
    for scale, _ in cfg["layers"]:
        x = x * scale
    return x


@program(t(3))
def slice_objects(x):
    s = slice(0, 2)
    return x[s], x[1:], x[::2], x[None], x[..., 0]


@program(t(4, 5))
def advanced_indexing(x):
    return x[1:3, ::2], x[[0, 2]], x[:, -1], x[torch.tensor([1, 0])]


@program(t(2, 3))
def list_arg_in_op(x):
    return x.permute([1, 0]), x.repeat([2, 1]), torch.tensor([1.0, 2.0, 3.0]) * x


# -- strings ---------------------------------------------------------------------------


@program(t(3), const("mean"))
def string_argument(x, reduction):
    if reduction == "mean":
        return x.mean()
    return x.sum()


@program(t(3))
def fstrings(x):
    name = f"layer_{2}_{'x'!r}"
    width = f"{3.14159:.2f}"
    return x * len(name), name, width


@program(t(3))
def string_methods(x):
    mode = "Reduce_Mean"
    parts = mode.lower().split("_")
    return x * len(parts), "-".join(parts), mode.startswith("Red")


@program(t(2, 3))
def string_format_shape(x):
    return f"{x.shape[0]}x{x.shape[1]}", x.dtype == torch.float32


# -- with-blocks and grad mode ---------------------------------------------------------


@program(t(3))
def no_grad_block(x):
    with torch.no_grad():
        y = x * 2
    return y + 1, y.requires_grad


@program(t(3))
def enable_grad_inside_no_grad(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 2
        z = x * 3
    return y, z


@program(t(3))
def set_grad_enabled_block(x):
    with torch.set_grad_enabled(False):
        y = x.exp()
    return y, torch.is_grad_enabled()


@program(t(3))
def grad_enabled_query(x):
    return x * (2 if torch.is_grad_enabled() else 3)


# -- assert ----------------------------------------------------------------------------


@program(t(3, 4))
def assert_on_shape(x):
    assert x.shape[-1] == 4, "expected 4 features"
    assert x.ndim == 2
    return x * 2


@program(t(3), const(2))
def assert_on_argument(x, n):
    assert n > 0
    return x * n


# -- returning structures --------------------------------------------------------------


@program(t(3))
def return_namedtuple(x):
    return Pair(x, x * 2)


@program(t(3, 4))
def return_types_by_field(x):
    top = x.max(1)
    values, indices = torch.min(x, 0)
    ranked = x.sort(dim=1, descending=True)
    return top.values * 2, top.indices, top, ranked, values + indices, ranked[0]


@program(t(3))
def return_namedtuple_keywords(x):
    p = Pair(second=x + 1, first=x)
    return p, p.first, p[1]


@program(t(3))
def return_dataclass(x):
    return Out(loss=x.sum(), logits=x * 2)


@program(t(3))
def return_dataclass_fields(x):
    o = Out(x.mean(), x, tag="custom")
    return o.loss, o.tag


@program(t(3))
def return_dict_of_tensors(x):
    return {"double": x * 2, "square": x * x, "n": 3}


@program(t(3))
def return_nested_mixed(x):
    return {"pairs": [(x, 1), (x + 1, "two")], "none": None}


@program(t(3))
def return_input_unchanged(x):
    return x


@program(t(3))
def return_constant_only(x):
    return 42


@program(t(3))
def return_none(x):
    x = x + 1
    return None


@program(t(3))
def return_same_tensor_twice(x):
    y = x * 2
    return y, y, [y]


@program(t(3))
def namedtuple_asdict(x):
    return Pair(x, 1)._asdict()


# -- builtins --------------------------------------------------------------------------


@program(t(3), const([1, 2]))
def isinstance_checks(x, items):
    a = isinstance(x, torch.Tensor)
    b = isinstance(items, (list, tuple))
    c = isinstance(3, float)
    return x * (a + b + c)


@program(t(3))
def getattr_hasattr(x):
    f = getattr(torch, "sigmoid")  # noqa: B009
    ok = hasattr(x, "shape")
    return f(x), ok, getattr(x, "missing_attr", None) is None


@program(t(3))
def type_checks(x):
    return x * (1 if type(3) is int else 0), type(x) is torch.Tensor  # noqa: UP003


@program(t(3))
def int_float_bool_of_constants(x):
    return x * int(2.7) + float("1.5") + bool(0)


@program(t(3))
def round_divmod(x):
    q, r = divmod(17, 5)
    return x * q + r + round(2.6)


@program(t(3))
def abs_of_python_and_tensor(x):
    return abs(x) + abs(-3)


@program(t(3), t(3))
def sum_of_tensors(a, b):
    return sum([a, b]), sum((a, b), torch.ones(3))


@program(t(3))
def torch_size_and_finfo(x):
    s = torch.Size([3])
    eps = torch.finfo(torch.float32).eps
    return x.view(s) + eps


@program(t(3))
def len_of_things(x):
    return x * len((1, 2)) + len({"a": 1}) + len("abc")


# -- lists and dicts from the frame ----------------------------------------------------


@program(lambda: [torch.randn(3) for _ in range(3)])
def list_of_tensors_argument(xs):
    return torch.stack(xs).sum(0), len(xs)


@program(lambda: {"a": torch.randn(3), "b": torch.randn(3), "scale": 2.0})
def dict_argument(batch):
    return (batch["a"] + batch["b"]) * batch["scale"]


@program(lambda: (torch.randn(2), (torch.randn(2), 3)))
def nested_tuple_argument(nested):
    a, (b, k) = nested
    return a * b * k


@program(lambda: Pair(torch.randn(3), torch.randn(3)))
def namedtuple_argument(pair):
    return pair.first - pair.second, pair[0]


@program(lambda: {"x": torch.randn(2), "y": [torch.randn(2), torch.randn(2)]})
def dict_iteration_argument(batch):
    total = 0
    for key, value in batch.items():
        if key == "y":
            for v in value:
                total = total + v
        else:
            total = total + value
    return total


# -- user objects, methods, properties, super ------------------------------------------


class Scaler:
    factor = 3.0

    def __init__(self, bias):
        self.bias = bias

    @property
    def doubled_bias(self):
        return self.bias * 2

    def apply(self, x):
        return x * self.factor + self.bias

    @staticmethod
    def static_shift(x):
        return x - 1

    @classmethod
    def class_scale(cls, x):
        return x * cls.factor


@program(t(3), const(Scaler(0.5)))
def user_object_methods(x, s):
    return s.apply(x), s.doubled_bias, s.static_shift(x), s.class_scale(x)


class Base:
    def transform(self, x):
        return x + 1


class Child(Base):
    def transform(self, x):
        return super().transform(x) * 2


class GrandChild(Child):
    def transform(self, x):
        return super().transform(x) - 3


@program(t(3), const(GrandChild()))
def super_calls(x, obj):
    return obj.transform(x)


@program(t(3), const(Scaler(1.0)))
def bound_method_as_value(x, s):
    f = s.apply
    return f(x)


# -- nn.Module -------------------------------------------------------------------------


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 2)
        self.act = torch.nn.GELU()

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Stack(torch.nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(n))
        self.norms = torch.nn.ModuleDict({"pre": torch.nn.LayerNorm(4)})
        self.head = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())

    def forward(self, x):
        x = self.norms["pre"](x)
        for i, layer in enumerate(self.layers):
            x = x + layer(x) * (i + 1)
        for _name, norm in self.norms.items():
            x = norm(x)
        return self.head(x), len(self.layers)


class WithBuffersAndFlags(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("running", torch.ones(4))
        self.use_bias = True
        self.bias = torch.nn.Parameter(torch.zeros(4))
        self.scale = 0.5
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        y = x * self.running * self.scale
        if self.use_bias:
            y = y + self.bias
        if self.training:
            y = y * 0
        return self.drop(y)


class SubclassedModule(MLP):
    def forward(self, x):
        return super().forward(x) * 2


@program(t(2, 4), const(MLP()))
def module_mlp(x, m):
    return m(x)


@program(t(2, 4), const(Stack()))
def module_containers(x, m):
    return m(x)


@program(t(2, 4), const(WithBuffersAndFlags().eval()))
def module_buffers_flags(x, m):
    return m(x)


@program(t(2, 4), const(SubclassedModule()))
def module_super_forward(x, m):
    return m(x)


@program(t(2, 4), const(Stack(2)))
def module_list_indexing(x, m):
    return m.layers[0](x), m.layers[-1](x), m.head[0](x)


@program(t(2, 4), const(MLP()))
def module_parameters_direct(x, m):
    return F.linear(x, m.fc1.weight, m.fc1.bias), m.fc1.weight.shape


@program(t(2, 4), const(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())))
def sequential_call(x, m):
    return m(x)


@program(t(1, 3, 8, 8), const(torch.nn.Conv2d(3, 4, 3, padding=1)))
def conv_module(x, conv):
    return F.relu(conv(x))


@program(t(2, 4, 8), const(torch.nn.MultiheadAttention(8, 2, batch_first=True)))
def torch_attention_module(x, attn):
    out, _ = attn(x, x, x, need_weights=False)
    return out


@program(t(2, 4), const(Stack(2)))
def module_iteration_methods(x, m):
    total = 0
    for p in m.parameters():
        total = total + p.sum()
    names = [name for name, _ in m.named_parameters()]
    children = [type(c).__name__ for c in m.children()]
    n_modules = len(list(m.modules()))
    return total, names, children, n_modules, [b for b in m.buffers()]


@program(t(2, 5, 16), const(torch.nn.TransformerEncoderLayer(16, 2, 32).eval()))
def torch_transformer_encoder_layer(x, layer):
    return layer(x)


@program(
    t(2, 5, 16),
    t(2, 3, 16),
    const(torch.nn.TransformerDecoderLayer(16, 2, 32, batch_first=True).eval()),
)
def torch_transformer_decoder_layer(x, memory, layer):
    return layer(x, memory)


@program(t(3))
def autocast_and_inference_queries(x):
    scale = 2 if torch.is_autocast_enabled() or torch.is_inference_mode_enabled() else 3
    return x * scale


@program(t(3))
def generator_interleaves_with_its_consumer(x):
    state = [1.0]

    def scaled():
        for _ in range(3):
            yield x * state[0]

    out = []
    for v in scaled():
        out.append(v)
        state[0] = 0.0
    return out


@program(t(3))
def any_stops_at_the_first_true(x):
    seen = []

    def flags():
        for i in range(5):
            seen.append(i)
            yield i >= 1

    return x * any(flags()), seen


@pytest.mark.parametrize("fn, make_args", PROGRAMS)
def test_program_matches_eager(fn, make_args):
    cache = CaptureCache(fn)
    with torch.no_grad():
        for _ in range(2):  # capture, then fresh data on the same entry
            args = [make() for make in make_args]
            expected = fn(*args)
            assert_tree_equal(cache(*args), expected)
    assert cache.captures == 1


def test_corpus_is_large():
    assert len(PROGRAMS) >= 150

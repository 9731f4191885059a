"""What capture knows about torch's own callables and tensor attributes.

Which tensor attributes and methods are metadata (constants), views (graph nodes)
or autograd changes (breaks); which torch functions change global state, answer
from metadata, or are operators to put in the graph; which Python functions fold
on constants. The value kinds read these tables; nothing here interprets code.
"""

from __future__ import annotations

import builtins
import functools
import math
import operator
import types
from collections.abc import Callable

import torch

from .variables import TensorValue

# Tensor attributes that are facts about metadata: captured as constants.
TENSOR_META_ATTRS = frozenset(
    {
        "shape",
        "dtype",
        "ndim",
        "requires_grad",
        "layout",
        "is_sparse",
        "is_sparse_csr",
        "is_quantized",
        "is_nested",
        "is_mkldnn",
    }
)
# Tensor attributes that compute a new tensor: captured as graph nodes.
TENSOR_VIEW_ATTRS = frozenset({"T", "mT", "H", "mH", "real", "imag"})
# Tensor methods whose answer depends only on metadata: evaluated on the meta tensor.
TENSOR_META_METHODS = frozenset(
    {
        "size",
        "dim",
        "ndimension",
        "numel",
        "nelement",
        "stride",
        "is_contiguous",
        "is_floating_point",
        "is_complex",
        "element_size",
    }
)
# Tensor methods that change a tensor's autograd identity, which a graph cannot
# express (a graph's intermediate never becomes a new leaf): they break the graph,
# so the tensor that comes out is the graph input of the next one.
TENSOR_AUTOGRAD_METHODS = {
    "requires_grad_": (
        "turning on gradients of a tensor with requires_grad_() inside the "
        "compiled function",
        "the graph breaks here; call requires_grad_() before the compiled "
        "function to keep one graph",
    ),
    "retain_grad": (
        "retain_grad() inside the compiled function",
        "call it outside the compiled function",
    ),
}
# torch functions that change global state or leave the program: never traced.
_TORCH_SIDE_EFFECTS = frozenset(
    {
        "manual_seed",
        "seed",
        "set_rng_state",
        "get_rng_state",
        "set_default_dtype",
        "set_default_device",
        "set_default_tensor_type",
        "use_deterministic_algorithms",
        "set_printoptions",
        "set_num_threads",
        "save",
        "load",
        "compile",
        # autocast switches: a with-block over torch.autocast is captured instead
        "set_autocast_enabled",
        "set_autocast_dtype",
        "set_autocast_cache_enabled",
        "autocast_increment_nesting",
        "autocast_decrement_nesting",
        "clear_autocast_cache",
    }
)
# torch functions answered from metadata or guarded global state.
TORCH_META_FUNCTIONS: dict[Callable, Callable] = {
    torch.is_tensor: lambda v: isinstance(v, TensorValue),
    torch.is_floating_point: lambda v: v.meta.is_floating_point(),
    torch.is_complex: lambda v: v.meta.is_complex(),
    torch.numel: lambda v: v.meta.numel(),
    torch.is_grad_enabled: lambda: torch.is_grad_enabled(),
    torch.get_default_dtype: lambda: torch.get_default_dtype(),
    torch.are_deterministic_algorithms_enabled: (
        lambda: torch.are_deterministic_algorithms_enabled()
    ),
    torch.is_inference_mode_enabled: lambda: torch.is_inference_mode_enabled(),
    torch.is_autocast_enabled: lambda *device: torch.is_autocast_enabled(
        *(d.value for d in device)
    ),
    torch._C._is_any_autocast_enabled: lambda: torch._C._is_any_autocast_enabled(),
    torch._C._len_torch_dispatch_stack: lambda: torch._C._len_torch_dispatch_stack(),
    # Inputs are plain tensors (checked when wrapped): no __torch_function__.
    torch._C._has_torch_function: lambda *args: False,
    torch._C._has_torch_function_unary: lambda *args: False,
    torch._C._has_torch_function_variadic: lambda *args: False,
    # What library code asks to choose its compile-friendly path: ember is
    # compiling while it captures (eager calls still answer False), and is
    # neither exporting nor being traced by the TorchScript tracer.
    torch.compiler.is_compiling: lambda: True,
    torch.compiler.is_exporting: lambda: False,
    torch._C._is_tracing: lambda: False,
    # Renamed at most once, before any device of that backend is used.
    torch._C._get_privateuse1_backend_name: torch._C._get_privateuse1_backend_name,
    torch._C._get_tracing_state: lambda: None,
}
# Without a CUDA (XPU) device no stream can be capturing a CUDA graph (torch's
# CPU build raises instead of answering); with one, the answer changes during
# a capture, so the call is left alone.
for _backend in (torch.cuda, torch.xpu):
    if not _backend.is_available():
        TORCH_META_FUNCTIONS[_backend.is_current_stream_capturing] = lambda: False

# Tensor methods that return the tensor's values as Python objects: a graph
# cannot hold them, so they end it (a graph break with this reason).
READS_VALUES = frozenset({"item", "tolist", "numpy"})

# BINARY_OP / unary operators that have a tensor meaning.
TENSOR_OPERATORS = frozenset(
    {
        operator.add, operator.sub, operator.mul, operator.truediv,
        operator.floordiv, operator.mod, operator.pow, operator.matmul,
        operator.and_, operator.or_, operator.xor, operator.lshift, operator.rshift,
        operator.iadd, operator.isub, operator.imul, operator.itruediv,
        operator.ifloordiv, operator.imod, operator.ipow, operator.imatmul,
        operator.iand, operator.ior, operator.ixor, operator.ilshift,
        operator.irshift, operator.neg, operator.pos, operator.invert, operator.abs,
        operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne,
        operator.getitem,
    }
)  # fmt: skip

# Python functions that are pure on constants: folded at capture time.
PURE_FUNCTIONS = frozenset(
    {
        *(v for v in vars(operator).values() if callable(v)),
        *(v for v in vars(math).values() if callable(v)),
        builtins.abs, builtins.round, builtins.divmod, builtins.int, builtins.float,
        builtins.bool, builtins.str, builtins.len, builtins.range, builtins.pow,
        builtins.repr, builtins.format, builtins.slice, builtins.set,
        builtins.frozenset, builtins.chr, builtins.ord, torch.Size,
        torch.device, torch.finfo, torch.iinfo,
    }
)  # fmt: skip

# Constant types whose methods are pure and may be folded (str.join, tuple.index...).
FOLDABLE_METHOD_TYPES = (
    str, int, float, bool, complex, tuple, bytes, frozenset, set, torch.Size,
    torch.dtype, torch.device, slice, range,
)  # fmt: skip

# Constant types that iteration unpacks into their items.
ITERABLE_CONSTANT_TYPES = (
    tuple, list, range, str, bytes, set, frozenset, dict, torch.Size,
    type({}.keys()),
    types.MappingProxyType,
)  # fmt: skip

# Containers whose length decides truthiness and iteration: guarded by length.
MODULE_CONTAINERS = (
    torch.nn.ModuleList,
    torch.nn.Sequential,
    torch.nn.ModuleDict,
    torch.nn.ParameterList,
    torch.nn.ParameterDict,
)


def changes_global_state(fn: object) -> bool:
    # By name, not identity: torch re-wraps some of these functions at run time.
    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__name__", None)
    return name in _TORCH_SIDE_EFFECTS and module.startswith("torch")


@functools.cache
def _torch_callables() -> frozenset[int]:
    """ids of the callables in torch's public operator namespaces."""
    ids = set()
    for namespace in (
        torch,
        torch.nn.functional,
        torch.special,
        torch.linalg,
        torch.fft,
        torch.Tensor,
        torch._C.TensorBase,
    ):
        # vars(), not dir()+getattr(): torch loads some submodules lazily on
        # attribute access (its export submodule imports torch's own compiler).
        for name, obj in vars(namespace).items():
            if name.startswith("_") or name in _TORCH_SIDE_EFFECTS:
                continue
            if callable(obj) and not isinstance(obj, (type, types.ModuleType)):
                ids.add(id(obj))
    # The C bindings of aten ops, private names included (torch._native_...).
    for namespace in (
        torch._C._VariableFunctions,
        torch._C._nn,
        torch._C._linalg,
        torch._C._fft,
        torch._C._special,
    ):
        for name in dir(namespace):
            if not name.startswith("__") and name not in _TORCH_SIDE_EFFECTS:
                ids.add(id(getattr(namespace, name)))
    return frozenset(ids)


def is_torch_op(fn: object) -> bool:
    return id(fn) in _torch_callables() or isinstance(
        fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)
    )

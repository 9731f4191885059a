"""Autocast in capture: the ambient state a graph depends on, ``with
torch.autocast(...)`` blocks as graph regions, and example outputs in the dtypes
eager's autocast gives each op.

torch's autocast casts only tensors of its own device type, so an op on meta
tensors never sees it. ``call`` runs the op on meta tensors that report their real
device (``OnDevice``), under the autocast state capture is in, and torch's own
dispatcher applies exactly eager's casts. A block becomes a region between
``torch.amp._enter_autocast`` and ``torch.amp._exit_autocast`` nodes; a graph
captured under ambient autocast is enclosed in one such region per device type
(``enclose``), so the graph itself says which autocast each op runs under (see
docs/capture.md, "Autocast").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import TYPE_CHECKING

import torch
import torch.fx
from torch.utils import _pytree as pytree

from . import behaviour, builtin_calls
from .checks import AUTOCAST_DEVICES as DEVICE_TYPES
from .checks import AutocastState
from .variables import AutocastExitValue, AutocastValue, Value

if TYPE_CHECKING:
    from .bytecode_interp import Interpreter

_META = torch.device("meta")
on = torch._C._is_any_autocast_enabled


@contextlib.contextmanager
def restored() -> Iterator[None]:
    """Puts back, on leaving, the autocast state that capture switches while it
    interprets the function's autocast blocks."""
    saved = [
        (d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d))
        for d in DEVICE_TYPES
    ]
    cache = torch.is_autocast_cache_enabled()
    try:
        yield
    finally:
        for device, enabled, dtype in saved:
            _switch(device, enabled, dtype)
        torch.set_autocast_cache_enabled(cache)


def _switch(device: str, enabled: bool, dtype: torch.dtype) -> None:
    torch.set_autocast_enabled(device, enabled)
    torch.set_autocast_dtype(device, dtype)


# -- example outputs -------------------------------------------------------------


class OnDevice(torch.Tensor):
    """A meta tensor that reports ``device``: autocast casts it as eager casts a
    real tensor there; every op on it runs on the meta tensor inside."""

    inner: torch.Tensor
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, inner: torch.Tensor, device: torch.device) -> OnDevice:
        out = torch.Tensor._make_wrapper_subclass(
            cls,
            inner.shape,
            inner.stride(),
            storage_offset=inner.storage_offset(),
            dtype=inner.dtype,
            layout=inner.layout,
            device=device,
            requires_grad=inner.requires_grad,
        )
        out.inner = inner
        return out

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if torch.Tag.inplace_view in func.tags:
            # The wrapper's own sizes would go stale.
            raise NotImplementedError(f"{func} on a meta tensor under autocast")
        given: dict[int, OnDevice] = {}
        device = None

        def unwrap(t: OnDevice) -> torch.Tensor:
            nonlocal device
            given[id(t.inner)] = t
            device = t.device
            return t.inner

        args, kwargs = pytree.tree_map_only(cls, unwrap, (args, kwargs or {}))
        # A tensor made on the reported device inside a composite op stays meta.
        args, kwargs = pytree.tree_map_only(
            torch.device, lambda d: _META if d == device else d, (args, kwargs)
        )
        out = func(*args, **kwargs)

        def wrap(t: torch.Tensor) -> torch.Tensor:
            if t.device.type != "meta":
                return t
            same = given.get(id(t))  # an in-place op returns its input
            return same if same is not None else cls(t, device)

        return pytree.tree_map_only(torch.Tensor, wrap, out)


# torch calls whose eager CPU kernel calls matmuls through the dispatcher, where
# autocast casts them (pinv of a float32 matrix comes back bfloat16): a meta
# kernel cannot see that, so under autocast they break the graph and run eagerly.
CAST_INSIDE = frozenset({torch.linalg.pinv})


def casts_inside(target: object) -> bool:
    """Whether ``target`` is in CAST_INSIDE and autocast is on."""
    return on() and isinstance(target, Hashable) and target in CAST_INSIDE


def call(
    fn: Callable, args: tuple, kwargs: dict, devices: Mapping[int, torch.device]
) -> object:
    """``fn(*args, **kwargs)`` on meta tensors, in the dtypes eager's autocast
    gives: a meta tensor whose real device (``devices``, by id) has autocast on
    runs as a tensor of that device. Results are plain meta tensors again."""
    if not on():
        return fn(*args, **kwargs)
    enabled = {d for d in DEVICE_TYPES if torch.is_autocast_enabled(d)}
    lifted: dict[int, OnDevice] = {}

    def lift(t: torch.Tensor) -> torch.Tensor:
        device = devices.get(id(t))
        if device is None or device.type not in enabled or t.device.type != "meta":
            return t
        if id(t) not in lifted:
            lifted[id(t)] = OnDevice(t, device)
        return lifted[id(t)]

    run_args, run_kwargs = pytree.tree_map_only(torch.Tensor, lift, (args, kwargs))
    if not lifted:
        return fn(*args, **kwargs)
    cache = torch.is_autocast_cache_enabled()
    torch.set_autocast_cache_enabled(False)  # keeps these out of torch's cast cache
    try:
        out = fn(*run_args, **run_kwargs)
    finally:
        torch.set_autocast_cache_enabled(cache)
    return pytree.tree_map_only(OnDevice, _lower, out)


def _lower(t: OnDevice) -> torch.Tensor:
    inner = t.inner
    if t.requires_grad != inner.requires_grad:
        inner = inner.detach().requires_grad_(t.requires_grad)
    return inner


# -- blocks ------------------------------------------------------------------------


def _construct(cls: type) -> Callable[..., Value]:
    def handler(tx: Interpreter, *args: Value, **kwargs: Value) -> Value:
        # The real object resolves defaults and refuses what eager refuses.
        real = cls(
            *(behaviour.constant(tx, a) for a in args),
            **{k: behaviour.constant(tx, v) for k, v in kwargs.items()},
        )
        return value_of(real)

    return handler


for _cls in (torch.amp.autocast, torch.cpu.amp.autocast, torch.cuda.amp.autocast):
    builtin_calls.handles(_cls)(_construct(_cls))


def value_of(real: torch.amp.autocast, source=None) -> AutocastValue:
    """The AutocastValue for a real autocast object (made here or read from the
    frame, such as the one a ``@torch.autocast(...)`` decorator holds)."""
    return AutocastValue(
        real.device,
        real.fast_dtype,
        bool(real._enabled),
        bool(real._cache_enabled),
        source,
    )


def build_code(v: AutocastValue, constant: Callable[[object], str]) -> str:
    """Python that makes a real autocast object like the one ``v`` (made in the
    function) stands for: a fresh one per call, as an autocast object keeps the
    state it restores on exit."""
    return (
        f"{constant(torch.amp.autocast)}({v.device_type!r}, "
        f"dtype={constant(v.dtype)}, enabled={v.enabled}, "
        f"cache_enabled={v.cache_enabled})"
    )


def enter(tx: Interpreter, ctx: AutocastValue, offset: int) -> AutocastExitValue:
    """Enter the block now (so example outputs follow it) and in the graph."""
    device = ctx.device_type
    restore = (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
    _switch(device, ctx.enabled, ctx.dtype)
    args = (device, ctx.dtype, ctx.enabled, ctx.cache_enabled)
    node = _node(tx, torch.amp._enter_autocast, args)
    return AutocastExitValue(node, device, restore, offset)


def exit_block(tx: Interpreter, exit_value: AutocastExitValue) -> None:
    """Leave the block now and in the graph."""
    _switch(exit_value.device_type, *exit_value.restore)
    _node(tx, torch.amp._exit_autocast, (exit_value.mode,))


def _node(tx: Interpreter, target: Callable, args: tuple) -> torch.fx.Node:
    node = tx.output.graph.call_function(target, args)
    filename, lineno = tx.output.location()
    node.meta["user_loc"] = f"{filename}:{lineno}"
    return node


def enclose(graph: torch.fx.Graph, state: AutocastState, cache: bool) -> None:
    """Put every op of ``graph`` (not yet given its output) inside the ambient
    autocast it was captured under, so the graph runs the same under any."""
    if not state:
        return
    first = next((n for n in graph.nodes if n.op != "placeholder"), None)
    if first is None:
        return
    with graph.inserting_before(first):
        modes = [
            graph.call_function(torch.amp._enter_autocast, (d, dtype, True, cache))
            for d, dtype in state
        ]
    for mode in reversed(modes):
        graph.call_function(torch.amp._exit_autocast, (mode,))


def open_blocks(stack: list[Value]) -> frozenset[int]:
    """The offsets of the with-statements whose autocast blocks ``stack`` is
    inside (their ``__exit__`` values are on it)."""
    return frozenset(v.offset for v in stack if isinstance(v, AutocastExitValue))

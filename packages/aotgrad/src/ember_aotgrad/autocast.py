"""Tracing under autocast, so that the aten graph carries autocast's casts as ops.

A torch-level graph says which autocast each op runs under with
``torch.amp._enter_autocast`` / ``_exit_autocast`` nodes. The trace runs with no
autocast of its own (``no_autocast``), so only those regions count, and the
compiled graphs run with autocast off: every dtype in them is explicit.

torch's autocast casts only tensors of its own device type, so an op on meta
tensors never sees it. Where a graph has regions, the traced values are meta
tensors that report the graph's device (``OnDevice``); the dispatcher then makes
exactly eager's casts (``aten._to_copy`` before each op that autocast changes),
and the recorder records them like any op.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.fx
from torch.utils import _pytree as pytree

from .errors import AotGradError

ENTER = torch.amp._enter_autocast
EXIT = torch.amp._exit_autocast

_META = torch.device("meta")
any_enabled = torch._C._is_any_autocast_enabled


# Ops whose eager CPU kernel calls matmuls through the dispatcher, where autocast
# casts them (pinv of a float32 matrix comes back bfloat16): the meta kernel, and
# a trace, cannot see that, so under autocast the graph runs eagerly instead.
CAST_INSIDE = frozenset(
    getattr(torch.ops.aten.linalg_pinv, name)
    for name in torch.ops.aten.linalg_pinv.overloads()
)


def refuse_cast_inside(func: torch._ops.OpOverload) -> None:
    """Raise AotGradError for an op in CAST_INSIDE (call under autocast)."""
    if func in CAST_INSIDE:
        raise AotGradError(
            f"{func} under autocast: its kernel's own matmuls are autocast in "
            "eager, which a trace cannot see; the graph runs eagerly"
        )


def has_regions(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` switches autocast on or off anywhere."""
    return any(n.op == "call_function" and n.target is ENTER for n in gm.graph.nodes)


@contextlib.contextmanager
def no_autocast(graph_has_regions: bool) -> Iterator[None]:
    """Autocast off while the trace runs, whatever the caller's, so the graph's
    own regions are all that count. Afterwards torch's cast cache is emptied when
    the graph used it, so no traced value stays in it."""
    try:
        with torch._C._DisableAutocast():
            yield
    finally:
        if graph_has_regions:
            torch.clear_autocast_cache()


@contextlib.contextmanager
def off_if_on() -> Iterator[None]:
    """Autocast off, for running compiled graphs: their casts are all explicit,
    and torch's ops inside them must not cast again. Free when autocast is off."""
    if not any_enabled():
        yield
        return
    with torch._C._DisableAutocast():
        yield


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
            # The wrapper's own sizes would go stale: trace on real tensors.
            raise NotImplementedError(f"{func} on a meta tensor under autocast")
        given: dict[int, OnDevice] = {}
        device = None

        def unwrap(t: OnDevice) -> torch.Tensor:
            nonlocal device
            given[id(t.inner)] = t
            device = t.device
            return t.inner

        args, kwargs = pytree.tree_map_only(cls, unwrap, (args, kwargs or {}))
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


def lift(value: object, device: torch.device | None) -> object:
    """Plain meta tensors in ``value`` as OnDevice on ``device`` (None: as they are)."""
    if device is None:
        return value

    def one(t: torch.Tensor) -> torch.Tensor:
        if t.device.type != "meta" or isinstance(t, OnDevice):
            return t
        return OnDevice(t, device)

    return pytree.tree_map_only(torch.Tensor, one, value)


def lower(t: torch.Tensor) -> torch.Tensor:
    """The plain meta tensor an OnDevice holds (other tensors as they are)."""
    return t.inner if isinstance(t, OnDevice) else t

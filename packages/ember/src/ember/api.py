"""``ember.compile`` and ``ember.reset``: the one-line entry for users.

compile() wraps a function, method or nn.Module; the first call with real inputs
goes through the runtime Dispatcher, which converts it (capture, then the backend)
and caches the entry behind its guards.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import types
import weakref
from collections.abc import Callable
from typing import Any

import torch

import ember_capture
from ember_runtime import Counters, Dispatcher

from .backends import Backend, CompileLog, resolve_backend
from .cache import DynamicDimsCache, MetaResultsCache, trusted_cache
from .config import Config
from .convert import BreakReason, make_convert
from .distributed import DDPForward, is_ddp, split_at_buckets
from .dynamic import DynamicPolicy, Remembered
from .saved_entries import SavedEntries

_MODES = (None, "default", "reduce-overhead", "max-autotune")

# Every dispatcher made by compile(), so reset() can clear them all.
_DISPATCHERS: weakref.WeakSet[Dispatcher] = weakref.WeakSet()
# Called as listener(name, log, breaks) for each compile() of a function or
# module (report.py records them).
COMPILE_LISTENERS: list[Callable[[str, CompileLog, list[BreakReason]], None]] = []


def compile(
    model: Any = None,
    *,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    backend: str | Backend = "ember",
    mode: str | None = None,
    options: dict[str, Any] | None = None,
) -> Any:
    """Compile ``model`` (a function, method or nn.Module) with ember.

    Use as ``ember.compile(fn)``, ``@ember.compile`` or ``@ember.compile(...)``.
    ``backend`` is "eager", "aot_eager", "ember" or ``backend(gm, inputs)``.
    ``fullgraph=True`` raises on anything capture cannot put in a graph instead of
    running it eagerly. ``options`` keys are the fields of ember.config.Config.
    """
    config = Config.from_options(options)
    if dynamic not in (None, True, False):
        raise ValueError(f"dynamic must be None, True or False, not {dynamic!r}")
    if mode not in _MODES:
        raise ValueError(f"unknown mode {mode!r}; valid modes: {_MODES}")
    if mode == "max-autotune":
        config = dataclasses.replace(config, autotune=True)
    log = CompileLog()
    resolve_backend(backend, config, log)  # an unknown name fails here, not later
    # How a copy (deepcopy, pickle) of what this call compiles compiles its own.
    again = functools.partial(
        compile,
        fullgraph=fullgraph,
        dynamic=dynamic,
        backend=backend,
        mode=mode,
        options=options,
    )
    context = _Context(backend, fullgraph, config, log, again, dynamic)

    def wrap(target: Any) -> Any:
        if isinstance(target, (CompiledFunction, CompiledModule)):
            target = target.original  # compile afresh from the user's own object
        for listener in COMPILE_LISTENERS:
            listener(_describe(target), context.log, context.breaks)
        if isinstance(target, torch.nn.Module):
            return context.compile_module(target)
        if isinstance(target, (types.FunctionType, types.MethodType)):
            return context.compile_callable(target)
        raise TypeError(
            f"ember.compile takes a function, method or nn.Module, not "
            f"{type(target).__name__}"
        )

    return wrap if model is None else wrap(model)


def _describe(target: Any) -> str:
    """How a report names what ``ember.compile`` was given."""
    if isinstance(target, torch.nn.Module):
        return f"{type(target).__qualname__} (module)"
    if getattr(target, "__func__", None) is torch.nn.Module._call_impl:
        owner = type(target.__self__).__qualname__  # compile_module_
        return f"{owner} (module, compiled in place)"
    code = getattr(getattr(target, "__func__", target), "__code__", None)
    if code is None:
        return repr(target)
    return f"{target.__qualname__} ({code.co_filename}:{code.co_firstlineno})"


class _Context:
    """What one ember.compile call shares with the functions it compiles later:
    the resume functions after a graph break and the calls that broke."""

    def __init__(
        self,
        backend: str | Backend,
        fullgraph: bool,
        config: Config,
        log: CompileLog,
        recompile: Callable[[Any], Any],
        dynamic: bool | None = None,
    ) -> None:
        self.recompile = recompile
        self.dynamic = dynamic
        self.backend = backend
        self.fullgraph = fullgraph
        self.config = config
        self.log = log
        self.meta_cache = MetaResultsCache(trusted_cache(config))
        self.dynamic_dims_cache = DynamicDimsCache(trusted_cache(config))
        self.breaks: list[BreakReason] = []
        self._functions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._modules: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def compile_callable(self, fn: Callable) -> CompiledFunction:
        bound_self = None
        if isinstance(fn, types.MethodType):
            fn, bound_self = fn.__func__, fn.__self__
        counters = Counters()
        # Per function, so the backend's stage times and disk hits land in its
        # dispatcher's counters.
        resolved = resolve_backend(self.backend, self.config, self.log, counters)
        backend = split_at_buckets(resolved, self.log)
        # The graph cache's backends name their graphs by key: entries of
        # their functions are saved for later processes.
        saved = None
        if hasattr(resolved, "load_saved"):
            saved = SavedEntries(trusted_cache(self.config), resolved)
        convert = make_convert(
            fn,
            backend,
            fullgraph=self.fullgraph,
            log=self.log,
            breaks=self.breaks,
            hook=self.hook,
            counters=counters,
            meta_cache=self.meta_cache,
            saved=saved,
            dynamic=DynamicPolicy(
                self.dynamic,
                self.log.dynamic_reasons,
                Remembered(self.dynamic_dims_cache, fn),
            ),
        )
        dispatcher = Dispatcher(
            fn,
            convert,
            recompile_limit=self.config.recompile_limit,
            counters=counters,
        )
        _DISPATCHERS.add(dispatcher)
        self.log.dispatchers.append(dispatcher)
        return CompiledFunction(
            fn, dispatcher, self.log, self.breaks, bound_self, self.recompile
        )

    def hook(self, target: Callable) -> Callable:
        """What runs in place of ``target`` after a graph break: compiled Python
        functions, methods and modules; anything else as it is."""
        if ember_capture.never_captured(target):  # ember.disable
            return target
        if isinstance(target, types.FunctionType):
            if target not in self._functions:
                self._functions[target] = self.compile_callable(target)
            return self._functions[target]
        if isinstance(target, types.MethodType):
            return types.MethodType(self.hook(target.__func__), target.__self__)
        if isinstance(target, torch.nn.Module) and not isinstance(
            target, CompiledModule
        ):
            if target not in self._modules:
                self._modules[target] = self.compile_module(target)
            return self._modules[target]
        return target

    def compile_module(self, module: torch.nn.Module) -> CompiledModule:
        """``module`` compiled: its forward, or for a DistributedDataParallel,
        the module it wraps, with DDP's own forward run as it is around it."""
        if is_ddp(module):
            inner = self.compile_module(module.module)
            forward = DDPForward(module, inner)
            return CompiledModule(module, forward, self.recompile, runs_hooks=True)
        forward = self.compile_callable(module.forward)
        return CompiledModule(module, forward, self.recompile, self.compile_callable)


def _original(fn: types.FunctionType, bound_self: object) -> Callable:
    return fn if bound_self is None else types.MethodType(fn, bound_self)


class CompiledFunction:
    """A compiled function: calls go through its Dispatcher.

    Binds like a function when used as a method decorator. ``dispatcher`` holds the
    entries and counters; ``log`` and ``breaks`` what compiling found. Like a
    function, it is its own deep copy, and pickles by name; a compiled bound
    method copies its object and compiles again (``recompile``).
    """

    def __init__(
        self,
        fn: types.FunctionType,
        dispatcher: Dispatcher,
        log: CompileLog,
        breaks: list[BreakReason],
        bound_self: object = None,
        recompile: Callable[[Any], Any] | None = None,
    ) -> None:
        functools.update_wrapper(self, fn)
        self._recompile = recompile
        self.dispatcher = dispatcher
        self.log = log
        self.breaks = breaks
        self._self = bound_self
        self.original = _original(fn, bound_self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._self is None:
            return self.dispatcher(*args, **kwargs)
        return self.dispatcher(self._self, *args, **kwargs)

    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        return self if obj is None else types.MethodType(self, obj)

    def __reduce_ex__(self, protocol: Any) -> Any:
        if self._self is None or self._recompile is None:
            return self.__qualname__  # found again by name, as a function is
        return (self._recompile, (self.original,))

    def __deepcopy__(self, memo: dict) -> Any:
        if self._self is None or self._recompile is None:
            return self
        return self._recompile(copy.deepcopy(self.original, memo))


def stats() -> dict[str, object]:
    """Counters summed over every compiled function: calls, guard hits and misses,
    compiles, eager calls, disk-cache hits, and compile seconds per stage."""
    return Counters.total(d.counters for d in list(_DISPATCHERS)).as_dict()


def reset() -> None:
    """Clear every in-memory compiled entry; the next call of each compiles again."""
    for dispatcher in list(_DISPATCHERS):
        dispatcher.reset()


class CompiledModule(torch.nn.Module):
    """An nn.Module whose forward is compiled and whose state is the original's.

    Parameters, buffers and submodules are the original module's own dicts, so
    ``state_dict()`` keys, ``parameters()``, ``.to()`` and optimizers see the same
    tensors. A module with forward hooks or pre-hooks is called through a second
    compiled function that calls the module, so its hooks are captured with its
    forward (``compile_call`` makes it, on the first such call); one with
    backward or global hooks runs eagerly, so those hooks always run.
    ``copy.deepcopy`` and pickling give a compiled module over a copy of the
    module, with the same compile settings, that compiles on its first call
    (``recompile``; without one, the copy is the plain module).
    """

    def __init__(
        self,
        module: torch.nn.Module,
        forward: Callable,
        recompile: Callable[[torch.nn.Module], Any] | None = None,
        compile_call: Callable[[Callable], Callable] | None = None,
        *,
        runs_hooks: bool = False,
    ) -> None:
        super().__init__()
        self.__dict__["_orig_mod"] = module  # not a submodule: keeps state_dict keys
        self.__dict__["_compiled_forward"] = forward
        self.__dict__["original"] = module
        self.__dict__["_recompile"] = recompile
        self.__dict__["_compile_call"] = compile_call
        self.__dict__["_compiled_call"] = None  # made on the first hooked call
        self.__dict__["_runs_hooks"] = runs_hooks  # forward calls the module itself
        self._parameters = module._parameters
        self._buffers = module._buffers
        self._modules = module._modules
        self._non_persistent_buffers_set = module._non_persistent_buffers_set
        for hooks in _HOOK_DICTS:  # hooks registered on the wrapper land on module
            setattr(self, hooks, getattr(module, hooks))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Not nn.Module.__call__: the original module's call runs the hooks, once.
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        module = self._orig_mod
        if self._runs_hooks or not _has_hooks(module):
            return self._compiled_forward(*args, **kwargs)
        if self._compile_call is None or not (
            ember_capture.module_has_only_forward_hooks(module)
        ):
            return module(*args, **kwargs)
        if self._compiled_call is None:
            hooked = types.MethodType(_call_module, module)
            self.__dict__["_compiled_call"] = self._compile_call(hooked)
        return self._compiled_call(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._orig_mod, name)

    def train(self, mode: bool = True) -> CompiledModule:
        self._orig_mod.train(mode)
        self.training = mode
        return self

    def state_dict(self, *args: Any, **kwargs: Any) -> dict:
        return self._orig_mod.state_dict(*args, **kwargs)

    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self._orig_mod.load_state_dict(*args, **kwargs)

    def __repr__(self) -> str:
        return f"CompiledModule({self._orig_mod!r})"

    # A copy never carries compiled entries (locks, guard checkers and kernels
    # belong to this process and to this module's tensors): it holds a copy of the
    # module and compiles again on its first call.
    def __reduce_ex__(self, protocol: Any) -> tuple:
        if self._recompile is None:
            return (_identity, (self._orig_mod,))
        return (self._recompile, (self._orig_mod,))

    def __deepcopy__(self, memo: dict) -> Any:
        module = copy.deepcopy(self._orig_mod, memo)
        return module if self._recompile is None else self._recompile(module)


def _identity(module: torch.nn.Module) -> torch.nn.Module:
    return module


_HOOK_DICTS = (
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_backward_hooks",
    "_backward_pre_hooks",
)


def _call_module(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
    """Calls ``module`` as Python does, hooks and all: what a compiled module
    with forward hooks compiles. Spelled as nn.Module's own ``__call__`` (torch's
    function): where capture refuses the call and it runs eagerly, its call
    sites are routed to compiled code, and ``module(...)`` would reach this
    compiled module again, without end."""
    return torch.nn.Module.__call__(module, *args, **kwargs)


def _has_hooks(module: torch.nn.Module) -> bool:
    return not ember_capture.module_has_no_hooks(module)

"""The dispatcher every compiled call goes through.

Per function: an ordered list of guarded entries. A call binds its arguments to the
function's locals, runs the first entry whose guards hold, or converts the call into
a new entry. Entries compiled for fixed sizes are tried before symbolic ones (a
symbolic entry would compile those sizes again), and within each group the most
recently hit first. A convert that gives up (returns
None, or a Fallback saying what to run instead) and a miss past the recompile limit
run the function without an entry; the limit also warns once, naming the guard
that kept failing. The stance (stance.py) can run every call eagerly, or turn a
miss that would compile again into an eager call or an error.
"""

from __future__ import annotations

import inspect
import logging
import sys
import threading
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from .counters import Counters
from .stance import STATE, THREAD, RecompileError, Stance

# The recompiles channel of ember's logs (EMBER_LOGS=recompiles).
recompiles = logging.getLogger("ember.recompiles")


class Entry(Protocol):
    """What ``convert`` returns: a guarded way to run the function."""

    def check(self, f_locals: dict) -> bool:
        """Whether this entry may run for a frame with these locals."""

    def failure(self, f_locals: dict) -> str | None:
        """The first failing guard, in words (``L['x']: dtype changed ...``)."""

    def run(self, *args: object, **kwargs: object) -> object:
        """Run the function on the call's own arguments."""

    @property
    def symbolic(self) -> bool:
        """Whether its guards admit sizes other than those it was compiled for
        (an entry without the attribute counts as fixed)."""


def _symbolic(entry: Entry) -> bool:
    return getattr(entry, "symbolic", False)


@dataclass(frozen=True, slots=True, eq=False)
class Fallback:
    """What ``convert`` returns when the function cannot be compiled: later
    misses run ``run`` (say, the function with the user code it calls routed to
    compilation) instead of the plain function. It is not an entry: the entries
    compiled before keep serving the calls they match."""

    run: Callable[..., object]


@dataclass(frozen=True, slots=True, eq=False)
class GuardedEntry:
    """A plain Entry made of three callables."""

    check: Callable[[dict], bool]
    failure: Callable[[dict], str | None]
    run: Callable[..., object]
    symbolic: bool = False


def _first_of_its_group(entry: Entry, others: tuple[Entry, ...]) -> tuple[Entry, ...]:
    """``others`` with ``entry`` put first among the entries as symbolic as it
    (fixed-size entries all come before symbolic ones)."""
    at = 0
    if _symbolic(entry):
        at = next((i for i, e in enumerate(others) if _symbolic(e)), len(others))
    return (*others[:at], entry, *others[at:])


@dataclass(eq=False)
class Dispatcher:
    """Guarded dispatch for one function.

    ``convert(args, kwargs) -> Entry | Fallback | None`` is called on a miss (under
    a lock, so two threads missing at once compile once). None or a Fallback means
    the function cannot be compiled: later misses run it as it is (or the
    Fallback's ``run``), while existing entries keep serving the calls they match.
    ``recompile_reasons`` records why each later convert happened.
    ``counters`` may be passed in, so that ``convert`` can add stage times to the
    same object (``counters.timed("codegen")``); each convert is timed as
    ``compile_seconds["convert"]``.
    """

    fn: types.FunctionType
    convert: Callable[[tuple, dict], Entry | Fallback | None]
    recompile_limit: int = 8
    counters: Counters = field(default_factory=Counters)
    recompile_reasons: list[str] = field(default_factory=list)
    _entries: tuple[Entry, ...] = ()
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _warned: bool = False
    _gave_up: bool = False  # convert gave up: misses run _fallback or the function
    _fallback: Callable[..., object] | None = None
    _code: types.CodeType | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._bind = binder(self.fn)
        self._code = self.fn.__code__  # the code its entries were made from

    @property
    def entries(self) -> tuple[Entry, ...]:
        return self._entries

    def __call__(self, *args: object, **kwargs: object) -> object:
        if STATE.maybe_eager and (STATE.force_eager or THREAD.depth):
            return self.fn(*args, **kwargs)
        if self.fn.__code__ is not self._code:
            self._code_replaced()
        counters = self.counters
        counters.calls += 1
        f_locals = self._bind(args, kwargs)
        entries = self._entries
        for i, entry in enumerate(entries):
            if entry.check(f_locals):
                counters.hits += 1
                if i and not (_symbolic(entry) and not _symbolic(entries[i - 1])):
                    self._promote(entry)  # (not already first of its group)
                return entry.run(*args, **kwargs)
        return self._miss(args, kwargs, f_locals)

    def reset(self) -> None:
        """Forget every entry, count and reason; the next call converts afresh.

        The Counters object is cleared in place, so a caller holding it (to fill
        stage times) keeps seeing this dispatcher's counts."""
        with self._lock:
            self._forget_entries()
            self.counters.clear()
            self.recompile_reasons = []

    def _forget_entries(self) -> None:
        """No entry, and a miss converts again (call with the lock held)."""
        self._entries = ()
        self._gave_up, self._fallback, self._warned = False, None, False

    def _code_replaced(self) -> None:
        """``fn.__code__ = ...`` keeps the function object: every entry was
        made from the old code, so none may run; the next call converts."""
        with self._lock:
            if self.fn.__code__ is self._code:
                return  # another thread saw it first
            self._forget_entries()
            self._bind = binder(self.fn)
            self._code = self.fn.__code__
            self.recompile_reasons.append("the function's __code__ was replaced")

    def _promote(self, entry: Entry) -> None:
        with self._lock:
            if entry in self._entries:
                rest = tuple(e for e in self._entries if e is not entry)
                self._entries = _first_of_its_group(entry, rest)

    def _miss(self, args: tuple, kwargs: dict, f_locals: dict) -> object:
        with self._lock:
            for entry in self._entries:  # another thread may have just compiled
                if entry.check(f_locals):
                    self.counters.hits += 1
                    return entry.run(*args, **kwargs)
            self.counters.misses += 1
            entry = None
            # Naming the failing guard costs more than the call itself: only
            # for a recompile, or the limit's one warning.
            at_limit = len(self._entries) >= self.recompile_limit
            wanted = not self._warned if at_limit else not self._gave_up
            # the stance changes only a miss that would compile again
            would_compile = bool(self._entries) and not at_limit and not self._gave_up
            stance = STATE.stance if would_compile else Stance.DEFAULT
            wanted = wanted or stance is Stance.FAIL_ON_RECOMPILE
            reason = (
                self._most_general().failure(f_locals)
                if wanted and self._entries
                else None
            )
            if stance is Stance.FAIL_ON_RECOMPILE:
                raise RecompileError(
                    f"{self._where()} would compile again (stance "
                    f"'fail_on_recompile'): {reason}"
                )
            # eager_on_recompile: the miss runs eagerly below, nothing compiles
            compiles = stance is not Stance.EAGER_ON_RECOMPILE
            if compiles and at_limit:
                self._warn_limit(reason)
            elif compiles and not self._gave_up:
                if reason is not None:
                    self.recompile_reasons.append(reason)
                    recompiles.info("recompiling %s: %s", self._where(), reason)
                with self.counters.timed("convert"):
                    entry = self.convert(args, kwargs)
                if isinstance(entry, Fallback):
                    self._fallback, entry = entry.run, None
                self._gave_up = entry is None
            if entry is None:
                self.counters.eager_calls += 1
            else:
                self.counters.compiles += 1
                self._entries = _first_of_its_group(entry, self._entries)
        if entry is None:
            return (self._fallback or self.fn)(*args, **kwargs)
        return entry.run(*args, **kwargs)

    def _most_general(self) -> Entry:
        """The entry whose failing guard says most about a miss: the symbolic
        one hit or added most recently, else the fixed one."""
        return next((e for e in self._entries if _symbolic(e)), self._entries[0])

    def _where(self) -> str:
        code = self.fn.__code__
        return f"{self.fn.__qualname__} ({code.co_filename}:{code.co_firstlineno})"

    def _warn_limit(self, reason: str | None) -> None:
        if self._warned:
            return
        self._warned = True
        warnings.warn(
            f"ember: {self._where()} reached the recompile limit "
            f"({self.recompile_limit}); calls that match no compiled entry now "
            f"run eagerly. The guard that kept failing: "
            f"{reason}. Raise options={{'recompile_limit': N}} or make the input "
            f"that changes a tensor.",
            stacklevel=user_stacklevel(),
        )


def user_stacklevel() -> int:
    """The ``stacklevel`` that attributes a warning to the first caller outside
    ember's packages (for warnings.warn called by this function's caller)."""
    frame, level = sys._getframe(2), 2
    while frame is not None and _in_ember(frame):
        frame, level = frame.f_back, level + 1
    return level


def _in_ember(frame: types.FrameType) -> bool:
    """ember's own modules, and the transformed functions it writes (they run in
    the user's module but are ember's code: ``<ember transformed ...>``)."""
    return frame.f_globals.get("__name__", "").startswith(
        "ember"
    ) or frame.f_code.co_filename.startswith("<ember")


def binder(fn: types.FunctionType) -> Callable[[tuple, dict], dict]:
    """``bind(args, kwargs)``: a call's arguments as the function's initial
    locals (the dict guards read as ``L``), fast for plain signatures."""
    sig = inspect.signature(fn, follow_wrapped=False)
    code = fn.__code__
    plain = code.co_kwonlyargcount == 0 and code.co_posonlyargcount == 0
    names = code.co_varnames[: code.co_argcount]
    n = len(names)
    # ``*args`` and ``**kwargs`` follow the positional names when there are no
    # keyword-only ones (a decorator's ``wrapper(*args, **kwargs)``, as around
    # every optimizer's ``step``, where ``Signature.bind`` cost 4 us a call).
    star = code.co_varnames[n] if code.co_flags & inspect.CO_VARARGS else None
    starstar = (
        code.co_varnames[n + (star is not None)]
        if code.co_flags & inspect.CO_VARKEYWORDS
        else None
    )

    def bind(args: tuple, kwargs: dict) -> dict:
        if plain and not kwargs and (len(args) == n or (star and len(args) > n)):
            f_locals = dict(zip(names, args))
            if star is not None:
                f_locals[star] = args[n:]
            if starstar is not None:
                f_locals[starstar] = {}
            return f_locals
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.arguments

    return bind

"""CompiledGraph: the callable result of codegen, inspectable and storable.

It holds the generated sources and everything needed to rebuild the callable from
bytes, so a cache can store ``to_bytes()`` and rebuild it with ``from_bytes``; the
C++ target's shared object is reloaded from the kernel cache, or recompiled. A
rebuilt graph can be told where its code is now (``locations``), so its sources
name the current program's lines.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .locations import replace_locations
from .profile_state import ACTIVE
from .render import KERNEL_BREAKS, KernelInfo, load_kernels
from .render.cpp.build import KERNEL_BREAK, Signer
from .source import run_source
from .wrapper_globals import WRAPPER_GLOBALS, WRAPPER_HELPERS

log = logging.getLogger("ember.output_code")

FORMAT_VERSION = 7
_any_autocast = torch._C._is_any_autocast_enabled


# Whether the log has shown the C++ preamble (the text before the first
# kernel) once; later graphs' sources are logged without it.
_preamble_logged = [False]


def _without_repeated_preamble(source: str) -> str:
    head, found, kernels = source.partition(KERNEL_BREAK)
    if not found or "#include" not in head:
        return source
    if not _preamble_logged[0]:
        _preamble_logged[0] = True
        return source
    wrapper, _, title = head.partition("\n// ")
    title = title.splitlines()[0] if title else ""
    return (
        f"{wrapper}\n// {title}\n// (the C++ preamble, as logged with the first "
        f"graph)\n{found}{kernels}"
    )


def _exec(source: str, namespace: dict, kind: str) -> Callable:
    return run_source(source, namespace, kind)["call"]


class _Fallback:
    """The plain torch wrapper, compiled from its source on its first call:
    only inputs unlike the compiled ones run it, and most processes never
    see one (compiling it took 1-2 ms of each graph's load)."""

    def __init__(self, source: str, namespace: dict) -> None:
        self._source = source
        self._namespace = namespace
        self._call: Callable | None = None

    def __call__(self, *inputs: object) -> object:
        if self._call is None:
            self._call = _exec(self._source, self._namespace, "torch wrapper")
        return self._call(*inputs)


@dataclass(frozen=True, eq=False)
class CompiledGraph:
    """A compiled aten graph: ``compiled(*inputs)`` returns the flat output tuple.

    ``wrapper_source`` is the generated Python that runs the graph; for the "cpp"
    target ``cpp_source`` holds the kernels it calls and ``torch_source`` the
    plain torch wrapper run for inputs unlike the compiled ones. ``kernels``
    lists, in call order, each generated loop, library call and fallback op;
    ``fallback_ops`` names the aten ops run through torch's own kernels;
    ``locations`` the user ``file:line`` strings the sources' comments name.
    """

    wrapper_source: str
    target: str
    fallback_ops: tuple[str, ...]
    constants: dict[str, torch.Tensor] = field(default_factory=dict)
    cpp_source: str = ""
    kernels: tuple[KernelInfo, ...] = ()
    torch_source: str = ""
    cache_dir: Path | None = None
    locations: tuple[str, ...] = ()
    signer: Signer | None = field(default=None, repr=False)
    # Indices (in ``find_literals`` order) of the C++ number literals this size
    # reads at run time from a library other sizes share
    # (render/cpp/literals.py); none: built as is.
    lifted: tuple[int, ...] = ()
    # Triton kernels launched with the fastest of a few warp counts, timed at
    # their first launch and kept in ``cache_dir`` (render/triton/tuning.py).
    autotune: bool = False
    library_path: Path | None = field(init=False, default=None)
    _call: Callable = field(init=False, repr=False)
    _namespace: dict = field(init=False, repr=False)  # what the wrapper names
    # The instrumented wrapper and its rows, made on the first profiled call.
    _timed: tuple | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        namespace = dict(WRAPPER_GLOBALS, **WRAPPER_HELPERS, **self.constants)
        if self.torch_source:
            fallback_ns = dict(WRAPPER_GLOBALS, **self.constants)
            namespace["fallback"] = _Fallback(self.torch_source, fallback_ns)
        if self.cpp_source:
            found, path = load_kernels(self.target)(self)
            object.__setattr__(self, "library_path", path)
            namespace.update(found)
        object.__setattr__(self, "_namespace", namespace)
        object.__setattr__(
            self, "_call", _exec(self.wrapper_source, dict(namespace), "wrapper")
        )
        if log.isEnabledFor(logging.INFO):
            log.info("generated code:\n%s", _without_repeated_preamble(self.source))

    @property
    def source(self) -> str:
        """The wrapper, followed by the kernels' source (a C++ translation unit,
        or a Triton module) when there is one."""
        if not self.cpp_source:
            return self.wrapper_source
        return f"{self.wrapper_source}\n{self.cpp_source}"

    def loops(self) -> list[KernelInfo]:
        """The generated loop kernels, in call order."""
        return [k for k in self.kernels if k.kind == "loop"]

    def kernel_source(self, name: str) -> str:
        """The source of the generated loop kernel ``name`` (one of
        ``loops()``: C++, or Triton's Python), without the preamble the
        graph's source starts with. KeyError if the graph has no such kernel."""
        split = f"\n{KERNEL_BREAKS.get(self.target, KERNEL_BREAK)}\n"
        # the line that defines it: a C++ function with its body (not the
        # declaration a repeat's part holds), a Triton function, or a repeat
        key = re.escape(name)
        defines = re.compile(
            rf'^(extern "C" \w+ {key}\(.*\{{|def {key}\(|{key} = )', re.M
        )
        for part in self.cpp_source.split(split)[1:]:
            if defines.search(part):
                return part.strip() + "\n"
        raise KeyError(f"no generated kernel named {name!r}")

    def externs(self) -> list[KernelInfo]:
        """The library calls (matmul, convolution), in call order."""
        return [k for k in self.kernels if k.kind == "extern"]

    def __call__(self, *inputs: object) -> tuple:
        # The graph's dtypes are explicit (autocast's casts are ops in it): the
        # caller's autocast must not change what an op through torch returns,
        # or a kernel would read that buffer in the wrong dtype.
        run = self._profiled if ACTIVE else self._call
        if _any_autocast():
            with torch._C._DisableAutocast():
                return run(*inputs)
        return run(*inputs)

    def _profiled(self, *inputs: object) -> tuple:
        """The call, timed statement by statement into the active profile."""
        from .profile import instrument  # only profiled calls need it

        if self._timed is None:
            timed = instrument(self.wrapper_source, self.kernels)
            call = _exec(timed.source, dict(self._namespace), "profiled wrapper")
            object.__setattr__(self, "_timed", (call, timed.rows))
        call, rows = self._timed
        title = self.wrapper_source.split("\n", 1)[0].removeprefix("# ember codegen: ")
        profile = ACTIVE[-1].profile_of(
            self, title, [dataclasses.replace(row) for row in rows]
        )
        counted = profile.rows

        def add(row: int, seconds: float) -> None:
            counted[row].seconds += seconds

        clock = time.perf_counter
        start = clock()
        result = call(clock, add, *inputs)
        profile.seconds += clock() - start
        profile.calls += 1
        return result

    def to_bytes(self) -> bytes:
        """A self-contained serialized form; ``from_bytes`` rebuilds the callable."""
        buffer = io.BytesIO()
        torch.save(
            {
                "format": FORMAT_VERSION,
                "wrapper_source": self.wrapper_source,
                "target": self.target,
                "fallback_ops": list(self.fallback_ops),
                "constants": self.constants,
                "cpp_source": self.cpp_source,
                "kernels": [asdict(k) for k in self.kernels],
                "torch_source": self.torch_source,
                "locations": list(self.locations),
                "lifted": list(self.lifted),
                "autotune": self.autotune,
            },
            buffer,
        )
        return buffer.getvalue()

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        cache_dir: Path | None = None,
        locations: Mapping[str, str] | None = None,
        signer: Signer | None = None,
    ) -> CompiledGraph:
        """Rebuild from ``to_bytes()``; the C++ is loaded from ``cache_dir`` when
        its tag verifies with ``signer`` (see ``load_library``), or compiled again.

        ``locations`` maps each stored location to the one the sources name
        instead (where the code is now); the kernels are still the stored ones,
        as only comments change."""
        state = torch.load(io.BytesIO(data), weights_only=True)
        if state.get("format") != FORMAT_VERSION:
            raise ValueError(f"unsupported CompiledGraph format {state.get('format')}")
        new = dict(locations or {})

        def moved(source: str) -> str:
            return replace_locations(source, new)

        return cls(
            moved(state["wrapper_source"]),
            state["target"],
            tuple(state["fallback_ops"]),
            state["constants"],
            moved(state["cpp_source"]),
            tuple(
                KernelInfo(
                    k["kind"],
                    k["name"],
                    tuple(k["ops"]),
                    k["arity"],
                    k["checks_indices"],
                    k["bytes"],
                )
                for k in state["kernels"]
            ),
            moved(state["torch_source"]),
            cache_dir,
            tuple(dict.fromkeys(new.get(loc, loc) for loc in state["locations"])),
            signer,
            tuple(state["lifted"]),
            state["autotune"],
        )

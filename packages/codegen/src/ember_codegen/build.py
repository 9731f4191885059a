"""Compile a C++ translation unit with the system compiler, cache the shared
object on disk under a hash of (source, flags, compiler version, CPU), and load it
with ctypes. Writers go through temporary files and atomic renames; a checksum file
beside each shared object vouches for it, and one that does not match (a crash or a
full disk left it short, or something changed it) is removed with a warning and
compiled again, never loaded. docs/codegen.md ("Build and cache") has the reasons.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

from .errors import CodegenError
from .locations import replace_locations

# -fno-math-errno and -fno-trapping-math change no result (torch never reads
# errno or FP traps) but let loops with sqrt and selects vectorize (without the
# latter, softmax ran 8x slower). -fwrapv gives integer overflow torch's
# two's-complement wrap. No -ffast-math: NaN and inf stay exact.
# -fno-tree-fre works around GCC 12.2 miscompiles at -O3: a relu compared and
# selected on (ReLU's backward) over rows of 9 read the wrong elements
# (test_relu_mask_select_over_odd_rows), and, with -fno-tree-dominator-opts
# (the first workaround), a gradient written into rows 2-3 of 5x6 planes and
# added read zeros (test_slice_backward_added_over_rows_of_six). Every loop
# the benchmarks vectorize still vectorizes, and their times did not change.
CXX_FLAGS = (
    "-O3",
    "-march=native",
    "-std=c++17",
    "-fPIC",
    "-shared",
    "-fopenmp",
    "-fwrapv",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fno-tree-fre",
)

# GCC and clang default to 256-bit vectors even where the CPU has 512-bit ones;
# on such a CPU the wider vectors halve the instructions of a vectorized loop
# (measured: softmax rows 1.2x faster).
WIDE_VECTOR_FLAGS = ("-mprefer-vector-width=512",)

_loaded: dict[str, ctypes.CDLL] = {}


def default_cache_dir() -> Path:
    """$EMBER_CACHE_DIR/kernels, else ~/.cache/ember/kernels."""
    root = os.environ.get("EMBER_CACHE_DIR")
    return (Path(root) if root else Path.home() / ".cache" / "ember") / "kernels"


@functools.cache
def find_compiler() -> tuple[str, str] | None:
    """(path, version line) of the C++ compiler ($CXX, else g++, c++, clang++),
    or None when none runs."""
    candidates = [os.environ.get("CXX"), "g++", "c++", "clang++"]
    for name in filter(None, candidates):
        path = shutil.which(name)
        if not path:
            continue
        try:
            done = subprocess.run(
                [path, "--version"], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return path, done.stdout.splitlines()[0] if done.stdout else path
    return None


@functools.cache
def _cpu() -> str:
    """The first processor's model name and flags lines of /proc/cpuinfo (the
    machine code -march=native gives depends on both)."""
    found: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key = line.split(":")[0].strip()
                if key in ("model name", "flags") and key not in found:
                    found[key] = line.strip()
    except OSError:
        pass
    return "\n".join(found.values()) or platform.processor() or platform.machine()


@functools.cache
def cxx_flags() -> tuple[str, ...]:
    """The compiler flags: ``CXX_FLAGS``, plus ``WIDE_VECTOR_FLAGS`` on a CPU
    with AVX-512 (read from /proc/cpuinfo)."""
    flags = set(_cpu().split())
    return CXX_FLAGS + (WIDE_VECTOR_FLAGS if "avx512f" in flags else ())


def cache_key(source: str, locations: Sequence[str] = ()) -> str:
    """The hash naming a translation unit's shared object.

    ``locations`` are user ``file:line`` strings that ``source`` names in comments
    only; each is hashed as its position in the list, so code that moved to other
    lines or files keeps its kernels."""
    compiler = find_compiler()
    version = compiler[1] if compiler else "none"
    placeholders = {loc: f"\0location {i}\0" for i, loc in enumerate(locations)}
    code = replace_locations(source, placeholders)
    text = "\0".join([code, " ".join(cxx_flags()), version, _cpu()])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def load_library(
    source: str, cache_dir: Path | None = None, locations: Sequence[str] = ()
) -> tuple[ctypes.CDLL, Path]:
    """The loaded shared object for ``source``, compiled unless on disk already.

    ``locations``: see ``cache_key``. A shared object on disk is loaded only if it
    matches its checksum file; a damaged one is removed with a warning and compiled
    again. Raises CodegenError naming the source file and the compiler's message
    when compilation fails, and when the cache folder cannot be written.
    """
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    key = cache_key(source, locations)
    so_path = cache_dir / f"{key}.so"
    if str(so_path) in _loaded:
        return _loaded[str(so_path)], so_path
    for compiled_now in (False, True):
        if compiled_now or not _verified(so_path):
            _compile(source, cache_dir, key)
        try:
            lib = ctypes.CDLL(str(so_path))
            break
        except OSError as e:
            # Whole, yet it does not load (a library it links is gone): once
            # more from the source, then give up.
            if compiled_now:
                raise CodegenError(
                    f"the compiled kernels {so_path} cannot be loaded: {e}"
                ) from e
            with _locked(cache_dir):
                _remove(so_path, f"it cannot be loaded: {e}")
    _loaded[str(so_path)] = lib
    return lib, so_path


# -- the files of one shared object -------------------------------------------
#   <key>.cpp     the source last compiled under <key> (named by compiler errors)
#   <key>.so      the shared object
#   <key>.sha256  its SHA-256, as `sha256sum` writes it (`sha256sum -c` checks it)
#   .lock         writers, and removers of damaged files, hold an flock on it

_ABSENT = "absent"


def _checksum_path(so_path: Path) -> Path:
    return so_path.with_suffix(".sha256")


def _verified(so_path: Path) -> bool:
    """Whether ``so_path`` holds a whole shared object that this cache wrote.

    The one place that checks a kernel file before it is loaded. A damaged one
    is removed, with its checksum file, and a warning; False then, as when there
    is none."""
    problem = _damage(so_path)
    if problem is None or problem == _ABSENT:
        return problem is None
    with _locked(so_path.parent):
        problem = _damage(so_path)  # a writer may have just replaced both files
        if problem is None or problem == _ABSENT:
            return problem is None
        _remove(so_path, problem)
    return False


def _damage(so_path: Path) -> str | None:
    """None when ``so_path`` matches its checksum file, else what is wrong
    (``_ABSENT`` when there is no shared object)."""
    try:
        data = so_path.read_bytes()
    except FileNotFoundError:
        return _ABSENT
    except OSError as e:
        return f"it cannot be read: {e}"
    try:
        recorded = _checksum_path(so_path).read_text(errors="replace").split()
    except FileNotFoundError:
        return "its checksum file is missing"
    except OSError as e:
        return f"its checksum file cannot be read: {e}"
    if recorded[:1] != [hashlib.sha256(data).hexdigest()]:
        return f"{len(data)} bytes that do not match their checksum"
    return None


def _remove(so_path: Path, problem: str) -> None:
    """Deletes a damaged shared object and its checksum file (the caller holds
    the lock), and warns once, naming what was removed."""
    removed = []
    for path in (so_path, _checksum_path(so_path)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(str(path))
    if removed:
        warnings.warn(
            f"ember: the compiled kernels {so_path} are damaged ({problem}); "
            f"removed {', '.join(removed)}; they will be compiled again",
            stacklevel=_user_stacklevel(),
        )


def _user_stacklevel() -> int:
    """The ``stacklevel`` that attributes a warning, issued by this function's
    caller, to the first frame outside ember's packages."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_globals.get("__name__", "").startswith("ember"):
        frame, level = frame.f_back, level + 1
    return level


@contextlib.contextmanager
def _locked(cache_dir: Path) -> Iterator[None]:
    # flock locks belong to the open file description, so each holder opens the
    # file itself: threads of one process exclude each other as processes do.
    # Closing the file releases the lock.
    try:
        with open(cache_dir / ".lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield
    except OSError as e:
        raise _unwritable(cache_dir, e) from e


def _unwritable(cache_dir: Path, e: OSError) -> CodegenError:
    return CodegenError(
        f"the kernel cache folder {cache_dir} cannot be written ({e}); point "
        f"cache_dir (EMBER_CACHE_DIR for ember) at a writable folder"
    )


def _temp_file(folder: Path, key: str, suffix: str, data: bytes = b"") -> str:
    """A new file ``<key>.<random><suffix>`` in ``folder`` holding ``data``;
    removed again if writing it fails."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f"{key}.", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def _compile(source: str, cache_dir: Path, key: str) -> None:
    """Compiles ``source`` into ``<key>.so`` and its checksum file, each written
    whole under a temporary name and renamed into place."""
    compiler = find_compiler()
    if compiler is None:
        raise CodegenError(
            "no C++ compiler found (set $CXX or install g++); use target='torch'"
        )
    so_path = cache_dir / f"{key}.so"
    cpp_path = cache_dir / f"{key}.cpp"
    temps: list[str] = []
    try:
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
            temps.append(_temp_file(cache_dir, key, ".cpp.tmp", source.encode()))
            os.replace(temps[-1], cpp_path)
            temps.append(_temp_file(cache_dir, key, ".so.tmp"))
        except OSError as e:
            raise _unwritable(cache_dir, e) from e
        done = subprocess.run(
            [compiler[0], *cxx_flags(), str(cpp_path), "-o", temps[-1]],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise CodegenError(
                f"C++ compilation of {cpp_path} failed ({compiler[1]}):\n"
                f"{done.stderr.strip()}"
            )
        try:
            digest = hashlib.sha256(Path(temps[-1]).read_bytes()).hexdigest()
            line = f"{digest}  {so_path.name}\n".encode()
            temps.append(_temp_file(cache_dir, key, ".sha256.tmp", line))
            # Both renames under the lock: a reader that finds the pair
            # mismatched takes the lock and looks again before it calls the
            # file damaged.
            with _locked(cache_dir):
                os.replace(temps[-2], so_path)
                os.replace(temps[-1], _checksum_path(so_path))
        except OSError as e:
            raise _unwritable(cache_dir, e) from e
    finally:
        for tmp in temps:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

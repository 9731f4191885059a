"""Compile a C++ translation unit with the system compiler, cache the shared
object on disk under a hash of (source, flags, compiler version, CPU), and load it
with ctypes. Writers go through a temporary file and an atomic rename, so two
processes compiling the same graph at once both end up loading a whole file.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from .errors import CodegenError

# -fno-math-errno and -fno-trapping-math change no result (torch never reads
# errno or FP traps) but let loops with sqrt and selects vectorize (without the
# latter, softmax ran 8x slower). -fwrapv gives integer overflow torch's
# two's-complement wrap. No -ffast-math: NaN and inf stay exact.
# -fno-tree-dominator-opts works around a GCC 12.2 miscompile at -O3: a relu
# compared and selected on (ReLU's backward) over rows of 9 read the wrong
# elements. It changed no benchmark here (test_relu_mask_select_over_odd_rows).
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
    "-fno-tree-dominator-opts",
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


def cache_key(source: str) -> str:
    """The hash naming a translation unit's shared object."""
    compiler = find_compiler()
    version = compiler[1] if compiler else "none"
    text = "\0".join([source, " ".join(cxx_flags()), version, _cpu()])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def load_library(
    source: str, cache_dir: Path | None = None
) -> tuple[ctypes.CDLL, Path]:
    """The loaded shared object for ``source``, compiled unless on disk already.

    Raises CodegenError naming the source file and the compiler's message when
    compilation fails.
    """
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    key = cache_key(source)
    so_path = cache_dir / f"{key}.so"
    if str(so_path) in _loaded:
        return _loaded[str(so_path)], so_path
    if not so_path.exists():
        _compile(source, cache_dir, key)
    lib = ctypes.CDLL(str(so_path))
    _loaded[str(so_path)] = lib
    return lib, so_path


def _atomic_write(path: Path, data: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(data)
    os.replace(tmp, path)


def _compile(source: str, cache_dir: Path, key: str) -> None:
    compiler = find_compiler()
    if compiler is None:
        raise CodegenError(
            "no C++ compiler found (set $CXX or install g++); use target='torch'"
        )
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CodegenError(
            f"the kernel cache folder {cache_dir} cannot be created ({e}); point "
            f"cache_dir (EMBER_CACHE_DIR for ember) at a writable folder"
        ) from e
    cpp_path = cache_dir / f"{key}.cpp"
    _atomic_write(cpp_path, source)
    fd, tmp_so = tempfile.mkstemp(dir=cache_dir, prefix=f"{key}.", suffix=".so.tmp")
    os.close(fd)
    try:
        done = subprocess.run(
            [compiler[0], *cxx_flags(), str(cpp_path), "-o", tmp_so],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise CodegenError(
                f"C++ compilation of {cpp_path} failed ({compiler[1]}):\n"
                f"{done.stderr.strip()}"
            )
        os.replace(tmp_so, cache_dir / f"{key}.so")
    finally:
        if os.path.exists(tmp_so):
            os.unlink(tmp_so)

"""Compile a C++ translation unit with the system compiler, cache the shared
object on disk under a hash of (source, flags, compiler version, CPU), and load it
with ctypes. Compiling and loading happen in a folder private to the process; the
cache holds copies, each with a checksum file (a crash or a full disk left it
short) and a tag file (a MAC only the cache's writers can make), and one that
fails either is removed with a warning and compiled again, never loaded.
docs/codegen.md ("Build and cache") has the reasons.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import fcntl
import functools
import hashlib
import hmac
import itertools
import logging
import os
import platform
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ...errors import CodegenError
from ...locations import replace_locations
from .. import KERNEL_BREAKS

log = logging.getLogger("ember.kernel_cache")

# -ffp-contract=off: each op rounds as torch's own kernel for it does (a fused
# a * b + c would differ from eager's two kernels in the last bit); the
# multiply-adds torch's kernels make are written as explicit fma calls.
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
# -fno-tree-dce works around a third: dropout after ReLU, backward (the relu
# recomputed, compared, a select on that over rows of 5) wrote zeros everywhere
# (test_relu_mask_select_of_a_dropout_gradient). -fno-tree-loop-if-convert and
# -fno-tree-dominator-opts fixed it too, but the first stopped 20 of 90 loops
# vectorizing in the benchmarks' kernels and the second broke the slice test;
# with -fno-tree-dce all 90 still vectorize.
# -fno-ipa-icf: with the two flags above, GCC 12.2 folded the second of two
# kernels with the same loops into the first and emitted it as a bare return,
# so it wrote nothing (test_two_kernels_with_the_same_loops_both_run; wrong
# ResNet gradients). Identical kernels are already forwarded by name
# (kernels.py), so the folding saved nothing.
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
    "-fno-tree-dce",
    "-fno-ipa-icf",
    "-ffp-contract=off",
)

# GCC and clang default to 256-bit vectors even where the CPU has 512-bit ones;
# on such a CPU the wider vectors halve the instructions of a vectorized loop
# (measured: softmax rows 1.2x faster).
WIDE_VECTOR_FLAGS = ("-mprefer-vector-width=512",)

_loaded: dict[str, ctypes.CDLL] = {}
# In every key: files written before tag files existed are never looked up.
_FILES_FORMAT = "so+sha256+tag"


class Signer(Protocol):
    """What vouches for the kernel files in a cache folder: ``tag(name, data)``
    is a MAC (HMAC-SHA256) made with a secret that only the folder's writers
    hold; ``file_mode`` the permission bits of the files written there.
    ``ember_runtime``'s CacheTrust is one."""

    file_mode: int

    def tag(self, name: str, data: bytes) -> bytes: ...


@dataclass(frozen=True)
class KeySigner:
    """A Signer over ``secret``. The default one's secret lives as long as the
    process, so kernels compiled by other processes are never loaded; give
    processes that share a folder one secret (or ember_runtime's CacheTrust)."""

    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    file_mode: int = 0o600

    def tag(self, name: str, data: bytes) -> bytes:
        mac = hmac.new(self.secret, name.encode() + b"\0", hashlib.sha256)
        mac.update(data)
        return mac.digest()


PROCESS_SIGNER = KeySigner()


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
    text = "\0".join([_FILES_FORMAT, code, " ".join(cxx_flags()), version, _cpu()])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def load_library(
    source: str,
    cache_dir: Path | None = None,
    locations: Sequence[str] = (),
    signer: Signer | None = None,
) -> tuple[ctypes.CDLL, Path]:
    """The loaded shared object for ``source`` and its file in ``cache_dir``,
    compiled unless the cache holds it already.

    ``locations``: see ``cache_key``. ``cache_dir`` None is a folder private to
    this process. A shared object in the cache is loaded only if it matches its
    checksum file (else it is damaged) and its tag file (``signer``'s tag; else
    someone without the secret wrote it), and only from a private copy of the
    bytes that were checked; one that fails is removed with a warning and
    compiled again. Compiling happens in a private folder too, so nothing another
    user can write is compiled or loaded. Raises CodegenError naming the source
    file and the compiler's message when compilation fails.
    """
    signer = signer if signer is not None else PROCESS_SIGNER
    cache_dir = Path(cache_dir) if cache_dir is not None else _private() / "kernels"
    key = cache_key(source, locations)
    so_path = cache_dir / f"{key}.so"
    if str(so_path) in _loaded:
        return _loaded[str(so_path)], so_path
    data = _verified(so_path, signer)
    if data is not None:
        log.info("kernels %s: loaded from the kernel cache", so_path)
    for compiled_now in (False, True):
        if compiled_now or data is None:
            start = time.perf_counter()
            data = _compile(source, cache_dir, key, signer)
            seconds = time.perf_counter() - start
            _build_seconds[0] += seconds
            log.info("kernels %s: compiled in %.2f s", so_path, seconds)
        try:
            lib = _load(data, key)
            break
        except OSError as e:
            # Whole, yet it does not load (a library it links is gone): once
            # more from the source, then give up.
            if compiled_now:
                raise CodegenError(
                    f"the compiled kernels {so_path} cannot be loaded: {e}"
                ) from e
            with contextlib.suppress(OSError), _locked(cache_dir, signer):
                _remove(so_path, f"it cannot be loaded: {e}")
    _loaded[str(so_path)] = lib
    return lib, so_path


# -- the files of one shared object -------------------------------------------
#   <key>.cpp     the source last compiled under <key> (named by compiler errors)
#   <key>.so      the shared object
#   <key>.sha256  its SHA-256, as `sha256sum` writes it (`sha256sum -c` checks it)
#   <key>.tag     the signer's tag over the key and the shared object, in hex
#   .lock         writers, and removers of damaged files, hold an flock on it

_SIDECARS = (".sha256", ".tag")
_UNTRUSTED = (
    "its tag does not verify: it was not compiled with this cache's secret "
    "(by another user, or with another EMBER_CACHE_KEY)"
)


# Seconds this process spent compiling C++ (``build_seconds``).
_build_seconds = [0.0]


def build_seconds() -> float:
    """Seconds this process has spent in the C++ compiler so far: a caller
    reads it before and after a compile to tell the build from the rest."""
    return _build_seconds[0]


def _verified(so_path: Path, signer: Signer) -> bytes | None:
    """The bytes of ``so_path`` if they are whole and tagged by ``signer``.

    The one place that checks a kernel file before it is loaded. One that fails
    is removed, with its checksum and tag files, and a warning; None then, as
    when there is none."""
    found = _check(so_path, signer)
    if not isinstance(found, str):
        return found
    try:
        with _locked(so_path.parent, signer):
            found = _check(so_path, signer)  # a writer may have just replaced it
            if isinstance(found, str):
                _remove(so_path, found)
    except OSError:  # a folder we cannot lock: compile privately instead
        return None
    return found if isinstance(found, bytes) else None


def _check(so_path: Path, signer: Signer) -> bytes | str | None:
    """The bytes of ``so_path`` when its checksum and tag files vouch for them,
    None when there is no shared object, else what is wrong."""
    try:
        data = _read(so_path)
        recorded = _read(so_path.with_suffix(".sha256")).decode(errors="replace")
        tag = _read(so_path.with_suffix(".tag")).decode(errors="replace").strip()
    except FileNotFoundError as e:
        return None if str(e.filename) == str(so_path) else f"{e.filename} is missing"
    except OSError as e:
        if e.errno == errno.ELOOP:
            return f"{e.filename} is a symbolic link, which is never followed"
        return f"{e.filename} cannot be read as a file: {e.strerror or e}"
    if recorded.split()[:1] != [hashlib.sha256(data).hexdigest()]:
        return f"{len(data)} bytes that do not match their checksum"
    if not hmac.compare_digest(signer.tag(_tag_name(so_path), data).hex(), tag):
        return _UNTRUSTED
    return data


def _read(path: Path) -> bytes:
    """A regular file's bytes, never through a symbolic link (ELOOP)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EISDIR, "not a regular file", str(path))
        return f.read()


def _tag_name(so_path: Path) -> str:
    return f"kernel {so_path.name}"


def _remove(so_path: Path, problem: str) -> None:
    """Deletes a rejected shared object and its checksum and tag files (the
    caller holds the lock), and warns once, naming what was removed."""
    removed = []
    for path in (so_path, *(so_path.with_suffix(s) for s in _SIDECARS)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(str(path))
    if removed:
        state = "not trusted" if problem == _UNTRUSTED else "damaged"
        warnings.warn(
            f"ember: the compiled kernels {so_path} are {state} ({problem}); "
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
def _locked(cache_dir: Path, signer: Signer) -> Iterator[None]:
    # flock locks belong to the open file description, so each holder opens the
    # file itself: threads of one process exclude each other as processes do.
    # Closing the file releases the lock. O_RDONLY suffices for flock, so every
    # member of a shared cache's group can take it.
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(cache_dir / ".lock", flags, signer.file_mode)
    try:
        st = os.fstat(fd)  # the umask narrowed the mode of one made just now
        if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != signer.file_mode:
            os.fchmod(fd, signer.file_mode)
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


_private_folders: dict[int, Path] = {}


def _private() -> Path:
    """This process's own folder (0700, removed at exit): kernels compile and
    load here, where no other user can change a file between check and use. A
    forked child makes its own, and never removes its parent's."""
    pid = os.getpid()
    folder = _private_folders.get(pid)
    if folder is None or not folder.is_dir():
        folder = _private_folders[pid] = Path(tempfile.mkdtemp(prefix="ember-kernels-"))
        atexit.register(_remove_private, pid, folder)
    return folder


def _remove_private(pid: int, folder: Path) -> None:
    if os.getpid() == pid:
        shutil.rmtree(folder, ignore_errors=True)


_copies = itertools.count()


def _load(data: bytes, key: str) -> ctypes.CDLL:
    """Loads checked bytes from a private copy. Each copy has a new name: the
    dynamic loader returns an already loaded library for a name it has seen."""
    path = _private() / f"{key}.{next(_copies)}.so"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o700)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return ctypes.CDLL(str(path))


def _compile(source: str, cache_dir: Path, key: str, signer: Signer) -> bytes:
    """Compiles ``source`` in a private folder and returns the shared object;
    stores it in ``cache_dir`` (source, shared object, checksum and tag, each
    written whole under a temporary name and renamed into place) when the
    folder can be written."""
    compiler = find_compiler()
    if compiler is None:
        raise CodegenError(
            "no C++ compiler found (set $CXX or install g++); use target='torch'"
        )
    work = Path(tempfile.mkdtemp(dir=_private(), prefix=f"{key}."))
    try:
        cpp_path = work / f"{key}.cpp"
        cpp_path.write_text(source)
        shown = _publish(cache_dir, {".cpp": source.encode()}, key, signer)
        out = work / f"{key}.so"
        units = split_units(source, _jobs())
        if len(units) == 1 or not _build_in_parallel(compiler[0], units, work, out):
            done = subprocess.run(
                [compiler[0], *cxx_flags(), str(cpp_path), "-o", str(out)],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise CodegenError(
                    f"C++ compilation of {shown.get('.cpp', cpp_path)} failed "
                    f"({compiler[1]}):\n{done.stderr.strip()}"
                )
        data = out.read_bytes()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    so_name = f"{key}.so"
    files = {
        ".so": data,
        ".sha256": f"{hashlib.sha256(data).hexdigest()}  {so_name}\n".encode(),
        ".tag": signer.tag(_tag_name(Path(so_name)), data).hex().encode(),
    }
    _publish(cache_dir, files, key, signer)
    return data


# The C++ emitter puts this line before each kernel of a graph's source, so
# the build can compile groups of kernels side by side (``split_units``).
KERNEL_BREAK = KERNEL_BREAKS["cpp"]
# Kernel text below this many characters compiles in one unit: a second
# compiler process and the link cost more than they save.
PARALLEL_BUILD_CHARS = 16_000


def split_units(source: str, jobs: int) -> list[str]:
    """``source`` as up to ``jobs`` translation units that compile to the same
    shared object: each is the text before the first ``KERNEL_BREAK`` (the
    preamble) and a share of the kernels, balanced by length; one unit (the
    source itself) for fewer than two kernels or little kernel text."""
    head, *kernels = source.split(f"\n{KERNEL_BREAK}\n")
    if jobs < 2 or len(kernels) < 2 or sum(map(len, kernels)) < PARALLEL_BUILD_CHARS:
        return [source]
    shares: list[list[str]] = [[] for _ in range(min(jobs, len(kernels)))]
    for kernel in sorted(kernels, key=len, reverse=True):
        min(shares, key=lambda share: sum(map(len, share))).append(kernel)
    return [head + "\n" + "\n".join(share) + "\n" for share in shares]


# At most this many compiler processes for one graph, whatever the CPU count
# (each takes about 100 MB; several processes may compile at once).
MAX_BUILD_JOBS = 8


def _jobs() -> int:
    """Compiler processes to run side by side: the CPUs this process may use."""
    if not hasattr(os, "sched_getaffinity"):
        return 1
    return min(len(os.sched_getaffinity(0)), MAX_BUILD_JOBS)


def _build_in_parallel(compiler: str, units: list[str], work: Path, out: Path) -> bool:
    """Compiles ``units`` to objects side by side and links them into ``out``;
    False if any step fails (the caller then compiles the whole source, whose
    error message names the file the user can read). Every compiler started
    has finished when it returns."""
    flags = [f for f in cxx_flags() if f != "-shared"]
    objects, running = [], []
    try:
        for i, unit in enumerate(units):
            path, obj = work / f"unit{i}.cpp", work / f"unit{i}.o"
            path.write_text(unit)
            command = [compiler, *flags, "-c", str(path), "-o", str(obj)]
            running.append(subprocess.Popen(command, stderr=subprocess.DEVNULL))
            objects.append(str(obj))
    except OSError:
        for process in running:
            process.kill()
            process.wait()
        return False
    codes = [process.wait() for process in running]
    if any(codes):
        return False
    link = [compiler, "-shared", "-fopenmp", *objects, "-o", str(out)]
    return subprocess.run(link, stderr=subprocess.DEVNULL).returncode == 0


def _publish(
    cache_dir: Path, files: dict[str, bytes], key: str, signer: Signer
) -> dict[str, Path]:
    """Writes ``<key><suffix>`` files into ``cache_dir``, renamed into place
    together under the lock (a reader that finds them mismatched takes the lock
    and looks again before it calls them damaged). Returns what was written:
    nothing when the folder cannot be written, as the cache only saves time."""
    temps: dict[str, str] = {}
    try:
        if not cache_dir.is_dir():
            os.makedirs(cache_dir, 0o700, exist_ok=True)
        for suffix, data in files.items():
            fd, temps[suffix] = tempfile.mkstemp(
                dir=cache_dir, prefix=f"{key}.", suffix=f"{suffix}.tmp"
            )
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), signer.file_mode)
                f.write(data)
        with _locked(cache_dir, signer):
            for suffix, tmp in temps.items():
                os.replace(tmp, cache_dir / f"{key}{suffix}")
    except OSError as e:
        log.debug("kernels not stored in %s: %s", cache_dir, e)
        return {}
    finally:
        for tmp in temps.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    return {suffix: cache_dir / f"{key}{suffix}" for suffix in files}

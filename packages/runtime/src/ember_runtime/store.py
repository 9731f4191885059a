"""The persistent artifact store: bytes on disk, content-addressed, shared by processes.

Writes are atomic (temporary file, then os.replace), writers and evictors serialize
on an fcntl lock file, every entry carries a SHA-256 of its payload (a truncated or
corrupted file is deleted instead of loaded) and a tag made with the cache's secret
(an entry someone else wrote is never returned), and a size cap evicts the least
recently used entries. docs/runtime.md has the layout and the reasons.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import importlib.metadata
import os
import platform
import re
import struct
import subprocess
import sys
import time
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from .dispatcher import user_stacklevel
from .trust import CacheTrust, locked, new_file, open_cache, read_file

# Entry file: magic, format version, payload length, SHA-256 of the payload, the
# tag (CacheTrust.tag over the key and the payload), payload.
_MAGIC = b"EMBERART"
_FORMAT = 2
_HEADER = struct.Struct("<8sHQ32s32s")
_SUFFIX = ".art"
_TMP_PREFIX = ".tmp-"
_STALE_TMP_SECONDS = 3600  # a writer that died mid-write leaves its temp file
_KEY = re.compile(r"[0-9a-f]{16,128}")
UNTRUSTED = (
    "its tag does not verify: it was not written with this cache's secret "
    "(by another user, or with another EMBER_CACHE_KEY)"
)

DEFAULT_MAX_BYTES = 1 << 30


class ArtifactStore:
    """Bytes under ``root/artifacts``, one file per key, at most ``max_bytes`` in all.

    ``get``/``put`` are safe across threads and processes sharing ``root``. Keys are
    lowercase hex strings (``cache_key`` makes them). ``trust`` is the cache that
    ``root`` lies in (it tags the entries and names the modes of what is created);
    without it ``root`` itself is opened with ``open_cache``, and a root that fails
    the trust rules is replaced by a private one, with a warning.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        max_bytes: int = DEFAULT_MAX_BYTES,
        trust: CacheTrust | None = None,
    ):
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, not {max_bytes!r}")
        if trust is None:
            trust = open_cache(root)
            root = trust.root
        self.trust = trust
        self.root = Path(root)
        self.max_bytes = max_bytes
        self._dir = self.root / "artifacts"

    def path(self, key: str) -> Path:
        """The file that holds ``key`` (it may not exist)."""
        if not _KEY.fullmatch(key):
            raise ValueError(f"artifact keys are 16-128 lowercase hex digits: {key!r}")
        return self._dir / f"{key}{_SUFFIX}"

    def get(self, key: str) -> bytes | None:
        """The payload stored under ``key``, or None if absent or damaged.

        A damaged entry (truncated, wrong checksum, not an entry at all, a
        symbolic link) or one whose tag does not verify is deleted with a warning,
        so the caller compiles and stores it again. A hit marks the entry as
        recently used.
        """
        path = self.path(key)
        payload = self._read(key)
        if payload is None:
            return None
        if isinstance(payload, str):
            with self._locked():  # a writer may have replaced it since the read
                payload = self._read(key)
                if isinstance(payload, str):
                    path.unlink(missing_ok=True)
                    _warn_damaged(path, payload)
                    return None
            if payload is None:
                return None
        _touch(path)
        return payload

    def discard(self, key: str, payload: bytes, why: str) -> None:
        """Delete the entry under ``key`` with the damaged-entry warning, for a
        caller whose own check of ``payload`` (what ``get`` returned) failed.
        An entry that a writer has replaced since is kept."""
        path = self.path(key)
        with self._locked():
            if self._read(key) != payload:
                return
            path.unlink(missing_ok=True)
        _warn_damaged(path, why)

    def put(self, key: str, data: bytes) -> bool:
        """Store ``data`` under ``key`` (replacing any entry), then evict down to
        ``max_bytes``. Returns False, storing nothing, when the entry alone would
        exceed the cap."""
        path = self.path(key)
        digest = hashlib.sha256(data).digest()
        tag = self.trust.tag(_tag_name(key), data)
        blob = _HEADER.pack(_MAGIC, _FORMAT, len(data), digest, tag)
        if len(blob) + len(data) > self.max_bytes:
            return False
        self._make_dir()
        mode = self.trust.file_mode
        with new_file(self._dir, _TMP_PREFIX, "", mode) as (f, tmp):
            f.write(blob)
            f.write(data)
            f.close()
            _touch(tmp)
            with self._locked():
                os.replace(tmp, path)
                self._evict_locked()
        return True

    def stored_keys(self) -> list[str]:
        """Every stored key, least recently used first."""
        return [p.name.removesuffix(_SUFFIX) for p, _, _ in self._entries()]

    def size(self) -> int:
        """Bytes used by the entries (headers included)."""
        return sum(size for _, size, _ in self._entries())

    def evict(self) -> None:
        """Delete least recently used entries until the total fits ``max_bytes``."""
        with self._locked():
            self._evict_locked()

    def _evict_locked(self) -> None:
        entries = self._entries()
        total = sum(size for _, size, _ in entries)
        for path, size, _ in entries:
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size
        cutoff = time.time() - _STALE_TMP_SECONDS
        for tmp in self._dir.glob(f"{_TMP_PREFIX}*"):
            with contextlib.suppress(FileNotFoundError):
                if tmp.stat().st_mtime < cutoff:
                    tmp.unlink()

    def _entries(self) -> list[tuple[Path, int, int]]:
        """(path, size, last use in ns) per entry, least recently used first."""
        entries = []
        if not self._dir.is_dir():
            return entries
        for path in self._dir.glob(f"*{_SUFFIX}"):
            with contextlib.suppress(FileNotFoundError):  # evicted meanwhile
                st = path.lstat()
                entries.append((path, st.st_size, st.st_mtime_ns))
        entries.sort(key=lambda e: (e[2], e[0].name))
        return entries

    def _read(self, key: str) -> bytes | str | None:
        """The payload; None if there is no file; why not if it is damaged or
        its tag does not verify."""
        found = _read(self.path(key))
        if not isinstance(found, tuple):
            return found
        payload, tag = found
        if not self.trust.verify(_tag_name(key), payload, tag):
            return UNTRUSTED
        return payload

    def _make_dir(self) -> None:
        for folder in (self.root, self._dir):
            if not folder.is_dir():
                self.trust.folder(*folder.relative_to(self.trust.root).parts)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self._make_dir()
        with locked(self.root, self.trust.file_mode):
            yield


def cache_key(**parts: str | bytes) -> str:
    """A SHA-256 hex key over named parts (order-independent, unambiguous).

    The umbrella passes the graph's structural hash, the input metadata, the
    options and ``environment_versions(...)`` rendered as text.
    """
    h = hashlib.sha256()
    for name in sorted(parts):
        value = parts[name]
        data = value.encode() if isinstance(value, str) else bytes(value)
        for field in (name.encode(), data):
            h.update(len(field).to_bytes(8, "little"))
            h.update(field)
    return h.hexdigest()


def environment_versions(distributions: Iterable[str] = ()) -> dict[str, str]:
    """Versions that an artifact depends on: Python, torch, the C++ compiler, the
    platform, and each named installed distribution (e.g. ``"ember-codegen"``)."""
    versions = {
        "python": sys.version,
        "torch": f"{torch.__version__} ({torch.version.git_version})",
        "cxx": compiler_version(),
        "platform": platform_text(),
    }
    for name in distributions:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def platform_text() -> str:
    """The operating system, its release, the machine and the C library.
    ``platform.platform()`` says the same but finds the C library's version by
    reading the Python executable, 2 ms of every new process's first call."""
    libc = ""
    with contextlib.suppress(ValueError, OSError, AttributeError):
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    return "-".join(
        filter(None, (platform.system(), platform.release(), platform.machine(), libc))
    )


@functools.cache
def compiler_version(cxx: str | None = None) -> str:
    """First line of ``$CXX --version`` (default ``c++``), or "none" if it fails."""
    command = cxx or os.environ.get("CXX", "c++")
    try:
        out = subprocess.run(
            [command, "--version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return "none"
    line = out.stdout.splitlines()[0] if out.stdout else ""
    return f"{command}: {line}" if out.returncode == 0 else "none"


def _tag_name(key: str) -> str:
    return f"artifact {key}"


def _read(path: Path) -> tuple[bytes, bytes] | str | None:
    """(payload, tag); None if there is no file; why not if it is damaged."""
    try:
        raw = read_file(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "it is a symbolic link, which is never followed"
        return f"it cannot be read as a file: {e.strerror or e}"
    if len(raw) < _HEADER.size:
        return f"{len(raw)} bytes, shorter than the header"
    magic, fmt, length, digest, tag = _HEADER.unpack_from(raw)
    if magic != _MAGIC or fmt != _FORMAT:
        return "not an ember artifact of this format"
    payload = raw[_HEADER.size :]
    if len(payload) != length:
        return f"payload is {len(payload)} bytes, the header says {length}"
    if hashlib.sha256(payload).digest() != digest:
        return "checksum mismatch"
    return payload, tag


def _warn_damaged(path: Path, why: str) -> None:
    state = "is not trusted" if why == UNTRUSTED else "is damaged"
    warnings.warn(
        f"ember: the cache entry {path} {state} ({why}); it was deleted and "
        f"will be compiled again",
        stacklevel=user_stacklevel(),
    )


def _touch(path: Path) -> None:
    # Explicit times: kernels stamp files from a coarse clock (milliseconds), too
    # coarse to order uses that follow each other closely.
    now = time.time_ns()
    with contextlib.suppress(FileNotFoundError):
        os.utime(path, ns=(now, now), follow_symlinks=False)

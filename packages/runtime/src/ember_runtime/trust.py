"""Which cache folders ember may load code from, and the tags that vouch for entries.

What ember keeps on disk runs in the user's process (kernel libraries are loaded,
graph entries unpickled), so a folder is used only when nobody else can write it,
and every entry carries an HMAC made with a secret that only its writers hold.
docs/security.md gives the rules and the reasons.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import grp
import hashlib
import hmac
import os
import pwd
import secrets
import shutil
import stat
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .dispatcher import user_stacklevel

SECRET_FILE = "secret.key"
_SECRET_BYTES = 32


@dataclass(frozen=True)
class Modes:
    """Permission bits for what ember creates in a cache folder."""

    folder: int
    file: int


# A private cache: only its owner may read or write anything in it.
PRIVATE = Modes(folder=0o700, file=0o600)
# A team's cache (a shared key): the group writes folders, reads files; setgid
# keeps each new folder in the cache's group.
SHARED = Modes(folder=0o2770, file=0o640)


class UnusableFolder(Exception):
    """A cache folder that cannot be used (absent and not creatable, not a
    folder); the message says why."""


class UnsafeFolder(UnusableFolder):
    """A cache folder that fails the trust rules; the message says why."""


@dataclass(frozen=True)
class CacheTrust:
    """A cache root that passed the trust rules, and the secret its entries are
    tagged with (the per-user secret, or the team's key when ``shared``).

    ``tag``/``verify`` bind an entry's bytes to its name, so an entry cannot be
    passed off under another key. ``modes`` are what ember creates inside.
    """

    root: Path
    secret: bytes = field(repr=False)
    shared: bool = False

    @property
    def modes(self) -> Modes:
        return SHARED if self.shared else PRIVATE

    @property
    def file_mode(self) -> int:
        return self.modes.file

    def tag(self, name: str, data: bytes) -> bytes:
        """HMAC-SHA256 with this cache's secret over ``name`` and ``data``."""
        mac = hmac.new(self.secret, digestmod=hashlib.sha256)
        mac.update(len(name.encode()).to_bytes(8, "little") + name.encode())
        mac.update(data)
        return mac.digest()

    def verify(self, name: str, data: bytes, tag: bytes) -> bool:
        """Whether ``tag`` is ``tag(name, data)`` (compared in constant time)."""
        return hmac.compare_digest(self.tag(name, data), tag)

    def folder(self, *parts: str) -> Path:
        """``root/<parts>``, created with this cache's folder mode when absent.
        Raises UnsafeFolder when it exists and fails the rules (a symbolic link,
        not a folder, someone else's, writable by others)."""
        path = self.root.joinpath(*parts)
        make_folder(path, self.modes, self.shared)
        return path


def open_cache(
    root: str | os.PathLike,
    key: bytes | None = None,
    fallback: str | os.PathLike | None = None,
    folders: Sequence[str] = (),
) -> CacheTrust:
    """The trusted cache at ``root``: created private (0700) if absent, its
    ``folders`` checked or created, and its per-user secret read or made.

    With ``key`` (a team's secret) the folder may be group-writable and entries
    are tagged with the key. A root that fails the rules gets one warning saying
    why and what to do, and ``fallback`` is used instead (checked the same way),
    else a private folder that lives as long as the process: the unsafe one never.
    Checked once per process per argument set.
    """
    return _open_cache(
        Path(root), key, Path(fallback) if fallback else None, tuple(folders)
    )


@functools.cache
def _open_cache(
    root: Path, key: bytes | None, fallback: Path | None, folders: tuple[str, ...]
) -> CacheTrust:
    try:
        return _trusted(root, key, folders)
    except UnusableFolder as e:
        problem = e
    why = str(problem)
    trust = None
    if fallback is not None and fallback != root:
        try:
            trust = _trusted(fallback, None, folders)
        except UnusableFolder as e:
            why += f"; nor can the fallback {fallback} be used: {e}"
    if trust is None:  # no disk cache: one that lives as long as the process
        trust = CacheTrust(_process_folder(), secrets.token_bytes(_SECRET_BYTES))
    if isinstance(problem, UnsafeFolder):
        message = (
            f"is not safe to use: {why}. Code placed there by others would run "
            f"in this process, so ember uses {trust.root} instead. "
            f"{_advice(root, key)}"
        )
    else:
        message = f"cannot be used: {why}. ember uses {trust.root} instead."
    warnings.warn(
        f"ember: the cache folder {root} {message}", stacklevel=user_stacklevel()
    )
    return trust


def _advice(root: Path, key: bytes | None) -> str:
    if key is not None:
        return (
            f"To share {root} with a team, it must not be writable by every user, "
            f"nor by a group you are not in (see docs/security.md)."
        )
    return (
        f"To use {root}, make it yours and private (chown $USER {root}; "
        f"chmod 700 {root}), or, for a folder shared by a team, set the same "
        f"EMBER_CACHE_KEY everywhere (see docs/security.md)."
    )


def _trusted(root: Path, key: bytes | None, folders: tuple[str, ...]) -> CacheTrust:
    shared = key is not None
    modes = SHARED if shared else PRIVATE
    if not root.exists() and not root.is_symlink():
        try:
            root.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UnusableFolder(f"it cannot be created ({e.strerror})") from e
    make_folder(root, modes, shared)
    trust = CacheTrust(root, key if shared else _secret(root), shared)
    for name in folders:
        try:
            trust.folder(name)
        except UnusableFolder as e:
            raise type(e)(f"its folder {name}: {e}") from e
    return trust


def make_folder(path: Path, modes: Modes, shared: bool) -> None:
    """Creates ``path`` with ``modes.folder`` (whatever the umask) unless it
    exists; raises UnsafeFolder when what is there fails the rules."""
    try:
        os.mkdir(path, modes.folder)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, modes.folder)
        finally:
            os.close(fd)
    except FileExistsError:
        pass
    except OSError as e:
        raise UnusableFolder(f"it cannot be created ({e.strerror})") from e
    problem = folder_problem(path, shared)
    if problem:
        raise UnsafeFolder(problem)


def folder_problem(path: Path, shared: bool) -> str | None:
    """Why ``path`` may not hold a cache, or None. A private cache folder must be
    a real folder (not a symbolic link), owned by this user and writable by no
    one else; a shared one (``shared``) must not be writable by every user nor
    by a group this user is not in. Raises UnusableFolder for a path that cannot
    be examined or is a file."""
    try:
        st = os.lstat(path)
    except OSError as e:
        raise UnusableFolder(f"it cannot be examined ({e.strerror})") from e
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        raise UnusableFolder("it is not a folder")
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_IWOTH:
        return f"every user can write it (mode {mode:o})"
    if shared:
        if mode & stat.S_IWGRP and st.st_gid not in _my_groups():
            return (
                f"its group {_group_name(st.st_gid)}, which you are not in, "
                f"can write it (mode {mode:o})"
            )
        return None
    if st.st_uid != os.geteuid():
        return f"it belongs to {_user_name(st.st_uid)}, not to you"
    if mode & stat.S_IWGRP:
        return f"its group {_group_name(st.st_gid)} can write it (mode {mode:o})"
    return None


def read_file(path: Path) -> bytes:
    """The bytes of the regular file at ``path``, never through a symbolic link
    (OSError: ELOOP for one, as for any other failure to read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IsADirectoryError(f"{path} is not a regular file")
        return f.read()


@contextlib.contextmanager
def new_file(folder: Path, prefix: str, suffix: str, mode: int) -> Iterator[tuple]:
    """A fresh file in ``folder`` (made with O_EXCL, so nothing planted is
    reused), chmod'ed to ``mode`` whatever the umask: yields (file, path) and
    removes the file if the body raises."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=suffix)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            yield f, Path(tmp)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def locked(folder: Path, mode: int) -> Iterator[None]:
    """Holds an exclusive flock on ``folder/.lock`` (created with ``mode``, never
    opened through a symbolic link). Each holder opens the file itself, so
    threads of one process exclude each other as processes do."""
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(folder / ".lock", flags, mode)
    try:
        _set_mode(fd, mode)
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _set_mode(fd: int, mode: int) -> None:
    """Gives a file this user created ``mode`` whatever the umask was (one a
    teammate created is theirs to set)."""
    st = os.fstat(fd)
    if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != mode:
        os.fchmod(fd, mode)


def _secret(root: Path) -> bytes:
    """The per-user secret in ``root/secret.key``, made (0600) on first use.
    Raises UnsafeFolder for a secret file others could have read or written."""
    path = root / SECRET_FILE
    for _ in range(2):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            _make_secret(root, path)
            continue
        except OSError as e:
            raise UnsafeFolder(f"its {SECRET_FILE} cannot be read ({e})") from e
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            data = f.read()
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise UnsafeFolder(f"its {SECRET_FILE} is not a file of yours")
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise UnsafeFolder(
                f"its {SECRET_FILE} can be read by others (mode "
                f"{stat.S_IMODE(st.st_mode):o}); delete it to make a new one"
            )
        if len(data) != _SECRET_BYTES:
            raise UnsafeFolder(f"its {SECRET_FILE} is not {_SECRET_BYTES} bytes")
        return data
    raise UnsafeFolder(f"its {SECRET_FILE} vanished while it was made")


def _make_secret(root: Path, path: Path) -> None:
    # Written whole under a temporary name, then linked into place: a process
    # that races this one either wins the link or reads the winner's secret.
    with new_file(root, ".secret-", ".tmp", PRIVATE.file) as (f, tmp):
        f.write(secrets.token_bytes(_SECRET_BYTES))
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)


@functools.cache
def _process_folder() -> Path:
    """A private folder for this process's cache, removed when it exits (not
    when a forked child does: the folder is the parent's)."""
    folder = Path(tempfile.mkdtemp(prefix="ember-cache-"))
    atexit.register(_remove_folder, os.getpid(), folder)
    return folder


def _remove_folder(pid: int, folder: Path) -> None:
    if os.getpid() == pid:
        shutil.rmtree(folder, ignore_errors=True)


def _my_groups() -> set[int]:
    return {os.getegid(), *os.getgroups()}


def _user_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"gid {gid}"

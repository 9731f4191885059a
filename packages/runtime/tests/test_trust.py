"""The trust rules for cache folders, the per-user secret, and the tags that the
artifact store checks before it returns an entry."""

import os
import stat
import warnings

import pytest

from ember_runtime import ArtifactStore, CacheTrust, cache_key, open_cache
from ember_runtime.trust import SECRET_FILE, folder_problem


def mode(path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_a_new_cache_is_private_and_keeps_its_secret(tmp_path):
    old = os.umask(0)
    try:
        trust = open_cache(tmp_path / "cache", folders=("graphs",))
    finally:
        os.umask(old)
    assert trust.root == tmp_path / "cache" and not trust.shared
    assert mode(trust.root) == 0o700 and mode(trust.root / "graphs") == 0o700
    assert mode(trust.root / SECRET_FILE) == 0o600
    # Another opening (as in another process) reads the same secret.
    again = open_cache(tmp_path / "cache", folders=())
    assert again.secret == trust.secret and len(trust.secret) == 32


def test_tags_bind_the_bytes_to_their_name_and_secret(tmp_path):
    trust = CacheTrust(tmp_path, b"s" * 32)
    tag = trust.tag("artifact 1", b"payload")
    assert trust.verify("artifact 1", b"payload", tag)
    assert not trust.verify("artifact 2", b"payload", tag)  # moved to another key
    assert not trust.verify("artifact 1", b"payload!", tag)
    assert not CacheTrust(tmp_path, b"t" * 32).verify("artifact 1", b"payload", tag)


@pytest.mark.parametrize(
    ("folder_mode", "shared", "problem"),
    [
        (0o700, False, None),
        (0o755, False, None),
        (0o775, False, "its group"),
        (0o777, False, "every user can write it"),
        (0o1777, False, "every user can write it"),  # sticky, as /tmp
        (0o2770, True, None),
        (0o777, True, "every user can write it"),
    ],
)
def test_folder_rules(tmp_path, folder_mode, shared, problem):
    folder = tmp_path / "f"
    folder.mkdir()
    os.chmod(folder, folder_mode)
    found = folder_problem(folder, shared)
    assert found is None if problem is None else problem in found


def test_a_symbolic_link_is_not_a_cache_folder(tmp_path):
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert folder_problem(tmp_path / "link", shared=False) == "it is a symbolic link"


def test_an_unsafe_root_warns_once_and_uses_the_fallback(tmp_path):
    unsafe = tmp_path / "unsafe"
    unsafe.mkdir()
    os.chmod(unsafe, 0o777)
    with pytest.warns(UserWarning, match="not safe to use") as caught:
        trust = open_cache(unsafe, fallback=tmp_path / "mine")
    assert trust.root == tmp_path / "mine"
    assert "chmod 700" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process
        assert open_cache(unsafe, fallback=tmp_path / "mine") is trust
    # No usable fallback: a folder for this process only, never the unsafe one.
    os.chmod(tmp_path / "mine", 0o777)
    with pytest.warns(UserWarning, match="nor can the fallback"):
        private = open_cache(unsafe, fallback=tmp_path / "mine", folders=("x",))
    assert private.root not in (unsafe, tmp_path / "mine")
    assert mode(private.root) == 0o700


def test_a_secret_others_could_read_makes_the_folder_unsafe(tmp_path):
    cache = tmp_path / "cache"
    open_cache(cache)
    os.chmod(cache / SECRET_FILE, 0o644)
    with pytest.warns(UserWarning, match=f"its {SECRET_FILE} can be read by others"):
        assert open_cache(cache, folders=("other",)).root != cache


def test_the_store_returns_only_entries_tagged_with_its_secret(tmp_path):
    store = ArtifactStore(tmp_path)
    key = cache_key(graph="g")
    store.put(key, b"compiled graph")
    stranger = ArtifactStore(tmp_path, trust=CacheTrust(tmp_path, b"x" * 32))
    with pytest.warns(UserWarning, match="not trusted.*tag does not verify"):
        assert stranger.get(key) is None
    assert not store.path(key).exists()  # deleted: compiled again by the caller
    # A symbolic link in place of an entry is not followed, even to a real one.
    store.put(key, b"compiled graph")
    target = tmp_path / "elsewhere.art"
    store.path(key).rename(target)
    store.path(key).symlink_to(target)
    with pytest.warns(UserWarning, match="damaged"):
        assert store.get(key) is None
    assert not store.path(key).is_symlink() and target.exists()

"""The cache folder runs code, so ember uses it only when it is safe: a folder
others can write is refused, a planted library or symbolic link never loads, an
entry tagged without the cache's secret is rebuilt, a team shares a folder
through EMBER_CACHE_KEY, and what ember creates is private whatever the umask.
Each case runs in new processes, as a warm start does."""

import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import run_mlp

_PLANTED = r"""
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen("%s", "w");
    if (f) { fputs("planted code ran", f); fclose(f); }
}
"""


@pytest.fixture
def home(tmp_path, monkeypatch):
    """The user's own cache (where ember goes instead of an unsafe folder)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("EMBER_CACHE_KEY", raising=False)
    return tmp_path / "xdg" / "ember"


def planted_library(tmp_path: Path) -> tuple[bytes, Path]:
    """A shared object whose constructor writes a marker file, and the marker."""
    marker = tmp_path / "planted-code-ran"
    source = tmp_path / "planted.c"
    source.write_text(_PLANTED % marker)
    out = tmp_path / "planted.so"
    subprocess.run(["gcc", "-shared", "-fPIC", str(source), "-o", str(out)], check=True)
    return out.read_bytes(), marker


def plant(folder: Path, library: bytes) -> list[Path]:
    """Replaces every kernel library in ``folder`` by ``library`` with a checksum
    file that matches it (anyone who can write a file can write its checksum)."""
    kernels = sorted((folder / "kernels").glob("*.so"))
    for so in kernels:
        so.write_bytes(library)
        digest = hashlib.sha256(library).hexdigest()
        so.with_suffix(".sha256").write_text(f"{digest}  {so.name}\n")
    return kernels


def test_a_planted_library_in_a_folder_others_can_write_never_runs(tmp_path, home):
    library, marker = planted_library(tmp_path)
    filled = tmp_path / "filled"
    assert run_mlp(filled)["cache"] == ["miss"]
    # A folder every user can write (a shared /tmp folder, a team drive): a
    # stranger copies the cache's layout into it and plants a library under
    # every kernel's name.
    unsafe = tmp_path / "unsafe"
    shutil.copytree(filled, unsafe, ignore=shutil.ignore_patterns("secret.key"))
    assert plant(unsafe, library)
    os.chmod(unsafe, 0o777)

    result = run_mlp(unsafe)
    assert not marker.exists()
    [message] = result["warnings"]
    assert f"the cache folder {unsafe} is not safe to use" in message
    assert "every user can write it (mode 777)" in message
    assert f"uses {home} instead" in message and "chmod 700" in message
    assert result["cache"] == ["miss"]  # compiled in the user's own cache
    assert list((home / "kernels").glob("*.so"))
    assert run_mlp(unsafe)["cache"] == ["hit"]  # the private cache serves later runs


def test_entries_with_right_checksums_but_wrong_tags_are_rebuilt(tmp_path, home):
    library, marker = planted_library(tmp_path)
    cache = tmp_path / "cache"
    run_mlp(cache)
    kernels = plant(cache, library)
    entries = sorted(cache.glob("*/artifacts/*.art"))
    for path in entries:  # a valid header and checksum; the tag is a guess
        raw = bytearray(path.read_bytes())
        raw[50:82] = bytes(32)
        path.write_bytes(bytes(raw))

    result = run_mlp(cache)
    assert not marker.exists()
    assert len(result["warnings"]) == len(kernels) + len(entries)
    for path in kernels + entries:
        [message] = [m for m in result["warnings"] if str(path) in m]
        assert "not trusted" in message and "tag does not verify" in message
    assert result["cache"] == ["miss"]
    again = run_mlp(cache)
    assert again["cache"] == ["hit"] and again["warnings"] == []


def test_symbolic_links_in_the_cache_are_not_followed(tmp_path, home):
    library, marker = planted_library(tmp_path)
    cache = tmp_path / "cache"
    run_mlp(cache)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "planted.so").write_bytes(library)
    links = []
    for so in sorted((cache / "kernels").glob("*.so")):
        tag = so.with_suffix(".tag")
        (elsewhere / tag.name).write_bytes(tag.read_bytes())
        so.unlink()
        so.symlink_to(elsewhere / "planted.so")
        links.append(so)
    for entry in sorted(cache.glob("*/artifacts/*.art")):
        (elsewhere / entry.name).write_bytes(entry.read_bytes())
        entry.unlink()
        entry.symlink_to(elsewhere / entry.name)  # even a genuine entry
        links.append(entry)

    result = run_mlp(cache)
    assert not marker.exists()
    assert len(result["warnings"]) == len(links)
    for path in links:
        [message] = [m for m in result["warnings"] if str(path) in m]
        assert "symbolic link, which is never followed" in message
        assert not path.is_symlink()  # the link was removed, its target kept
    assert (elsewhere / "planted.so").exists()
    assert run_mlp(cache)["warnings"] == []

    # A folder of the cache that is a link: the whole cache is refused.
    shutil.rmtree(cache / "kernels")
    (cache / "kernels").symlink_to(elsewhere)
    [message] = run_mlp(cache)["warnings"]
    assert "not safe to use: its folder kernels: it is a symbolic link" in message


def test_a_team_shares_a_group_writable_folder_through_its_key(tmp_path, home):
    team = tmp_path / "team"
    team.mkdir()
    os.chmod(team, 0o2770)
    key = "the team's secret, same on every machine"
    first = run_mlp(team, key=key)
    assert first["cache"] == ["miss"] and first["warnings"] == []
    kernels = {p: p.stat().st_mtime_ns for p in (team / "kernels").glob("*.so")}
    assert kernels and not (team / "secret.key").exists()  # the key is the secret
    second = run_mlp(team, key=key)
    assert second["cache"] == ["hit"] and second["warnings"] == []
    assert {p: p.stat().st_mtime_ns for p in kernels} == kernels  # loaded as is

    # Another key loads none of their entries: each is rejected and rebuilt.
    other = run_mlp(team, key="another team's secret, not ours")
    assert other["cache"] == ["miss"]
    assert other["warnings"] and all("not trusted" in m for m in other["warnings"])

    # Without a key, a folder the group can write is refused.
    [message] = run_mlp(team)["warnings"]
    assert "not safe to use: its group" in message and "EMBER_CACHE_KEY" in message


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_a_new_cache_is_private_whatever_the_umask(tmp_path, home, umask):
    cache = tmp_path / "new" / "cache"
    assert run_mlp(cache, umask)["cache"] == ["miss"]
    modes = {
        str(path.relative_to(cache)): stat.S_IMODE(path.lstat().st_mode)
        for path in cache.rglob("*")
    }
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    folders = {p for p in modes if (cache / p).is_dir()}
    assert folders >= {"kernels", "graphs", "meta", "graphs/artifacts"}
    wrong = {
        p: oct(m) for p, m in modes.items() if m != (0o700 if p in folders else 0o600)
    }
    assert wrong == {}
    # A team's folder: the group reads files and writes folders.
    team = tmp_path / "team"
    run_mlp(team, umask, key="the team's secret, same on every machine")
    for path in [team, *team.rglob("*")]:
        expected = 0o2770 if path.is_dir() else 0o640
        assert stat.S_IMODE(path.lstat().st_mode) == expected, path


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder away")
def test_a_folder_that_belongs_to_someone_else_is_refused(tmp_path, home):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    [message] = run_mlp(theirs)["warnings"]
    assert "belongs to" in message and "uid 65534" in message

"""Every kind of file ember reads back from EMBER_CACHE_DIR (graph entries, meta
results, saved entries, compiled kernels) survives being cut short, changed,
emptied or losing its sibling files: the next process warns once, naming what it
removed, rebuilds it, and matches eager; the one after that finds everything
whole."""

import json
import shutil
import warnings

import pytest
import torch
from conftest import run_mlp

import ember
from ember_runtime import ArtifactStore, open_cache


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A cache folder that one process filled."""
    folder = tmp_path_factory.mktemp("warm")
    result = run_mlp(folder)
    assert result["cache"] == ["miss"] and result["warnings"] == []
    return folder


def damage(path, how: str) -> None:
    raw = path.read_bytes()
    if how == "short":  # what a crash or a full disk leaves
        path.write_bytes(raw[:5])
    elif how == "changed":  # a shared object may still load, and run other code
        middle = len(raw) // 2
        path.write_bytes(raw[:middle] + bytes([raw[middle] ^ 0x10]) + raw[middle + 1 :])
    else:
        path.write_bytes(b"")


@pytest.mark.parametrize("how", ["short", "changed", "empty", "no siblings"])
def test_damaged_files_are_removed_with_one_warning_and_rebuilt(warm, tmp_path, how):
    shutil.copytree(warm, tmp_path, dirs_exist_ok=True)
    kernels = sorted((tmp_path / "kernels").glob("*.so"))
    entries = sorted(tmp_path.glob("*/artifacts/*.art"))  # graphs/, meta/, entries/
    folders = {p.parent.parent.name for p in entries}
    assert kernels and folders == {"graphs", "meta", "entries"}
    if how == "no siblings":
        damaged = kernels
        for sibling in (tmp_path / "kernels").iterdir():
            if sibling.suffix != ".so":  # checksums, sources, the lock
                sibling.unlink()
        for lock in tmp_path.glob("*/.lock"):
            lock.unlink()
    else:
        damaged = kernels + entries
        for path in damaged:
            damage(path, how)

    result = run_mlp(tmp_path)
    for path in damaged:
        [message] = [m for m in result["warnings"] if str(path) in m]
        assert "damaged" in message
    assert len(result["warnings"]) == len(damaged), result["warnings"]
    again = run_mlp(tmp_path)  # whole again: nothing to warn about (run checks eager)
    assert again["cache"] == ["hit"] and again["warnings"] == []


def double_then_sum(x):
    return (x * 2).sum(-1)


def test_an_entry_that_passes_its_checksum_but_does_not_load_is_removed(tmp_path):
    x = torch.randn(3, 4)
    compiled = ember.compile(double_then_sum, options={"cache_dir": tmp_path})
    compiled(x)
    trust = open_cache(tmp_path)  # the folder's own secret: tags that verify
    graphs = ArtifactStore(tmp_path / "graphs", trust=trust)
    meta = ArtifactStore(tmp_path / "meta", trust=trust)
    saved = ArtifactStore(tmp_path / "entries", trust=trust)
    # Whole, tagged files that hold no cached graph, no meta results and no
    # saved entries (a writer of another format): neither the checksum nor
    # the tag can tell.
    [graph_key], [meta_key] = graphs.stored_keys(), meta.stored_keys()
    [saved_key] = saved.stored_keys()
    graphs.put(graph_key, b"\x04\x00\x00\x00nope")
    meta.put(meta_key, json.dumps({"[]": ["new", "not a shape"]}).encode())
    saved.put(saved_key, b"[not json")
    for expected in ("miss", "hit"):
        compiled = ember.compile(double_then_sum, options={"cache_dir": tmp_path})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.testing.assert_close(compiled(x), double_then_sum(x))
        assert compiled.log.cache_results == [expected]
        messages = [str(w.message) for w in caught]
        if expected == "hit":
            assert messages == []  # warned once: the files were replaced
            continue
        assert len(messages) == 3, messages
        for store, key in ((graphs, graph_key), (meta, meta_key), (saved, saved_key)):
            [message] = [m for m in messages if str(store.path(key)) in m]
            assert "damaged" in message and "deleted" in message

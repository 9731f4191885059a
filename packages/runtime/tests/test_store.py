"""ArtifactStore: round trips, damaged entries, LRU eviction, and several processes
and threads sharing one folder."""

import hashlib
import multiprocessing
import sys
import threading
import warnings

import pytest
import torch

import ember_runtime
from ember_runtime import ArtifactStore, cache_key, environment_versions


def key(name: str) -> str:
    return cache_key(graph=name)


def payload(name: str, size: int = 100) -> bytes:
    seed = hashlib.sha256(name.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def test_round_trip_and_missing(tmp_path):
    store = ArtifactStore(tmp_path)
    assert store.get(key("a")) is None
    assert store.put(key("a"), b"compiled graph")
    assert store.get(key("a")) == b"compiled graph"
    assert ArtifactStore(tmp_path).get(key("a")) == b"compiled graph"  # a new handle
    with pytest.raises(ValueError, match="hex"):
        store.get("../escape")


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_damaged_entry_is_deleted_with_a_warning_and_never_loaded(tmp_path, damage):
    store = ArtifactStore(tmp_path)
    store.put(key("a"), payload("a", 1000))
    path = store.path(key("a"))
    raw = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(raw[:-10])
    elif damage == "flip":
        path.write_bytes(raw[:-1] + bytes([raw[-1] ^ 1]))
    else:
        path.write_bytes(b"")
    with pytest.warns(UserWarning, match="damaged"):
        assert store.get(key("a")) is None
    assert not path.exists()
    store.put(key("a"), payload("a", 1000))  # compiled again
    assert store.get(key("a")) == payload("a", 1000)


def test_least_recently_used_entries_are_evicted_first(tmp_path):
    store = ArtifactStore(tmp_path, max_bytes=900)  # three 200-byte entries fit
    for name in "abc":
        store.put(key(name), payload(name, 200))
    assert store.get(key("a")) is not None  # a is now the most recently used
    store.put(key("d"), payload("d", 200))
    assert store.get(key("b")) is None
    assert store.stored_keys() == [key("c"), key("a"), key("d")]
    assert store.size() <= store.max_bytes
    assert not store.put(key("huge"), payload("huge", store.max_bytes))
    assert store.get(key("huge")) is None and len(store.stored_keys()) == 3


def _writer(root: str, worker: int, names: list[str], errors) -> None:
    store = ArtifactStore(root, max_bytes=40_000)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a damaged read would raise here
            for round_ in range(3):
                for name in names:
                    data = store.get(key(name))
                    if data is not None and data != payload(name, 2000):
                        errors.put(f"worker {worker}: wrong bytes for {name}")
                    if data is None or round_ == worker % 3:
                        store.put(key(name), payload(name, 2000))
    except Exception as e:
        errors.put(f"worker {worker}: {type(e).__name__}: {e}")


def test_several_processes_writing_one_folder(tmp_path):
    ctx = multiprocessing.get_context("fork")
    errors = ctx.Queue()
    names = [f"graph{i}" for i in range(30)]  # 30 x 2 kB: more than the cap
    procs = [
        ctx.Process(
            target=_writer, args=(str(tmp_path), w, names[w::2] + names, errors)
        )
        for w in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * 4
    assert errors.empty(), errors.get()
    store = ArtifactStore(tmp_path, max_bytes=40_000)
    assert 0 < store.size() <= store.max_bytes
    for k in store.stored_keys():
        assert store.get(k) is not None
    leftovers = [
        p for p in (tmp_path / "artifacts").iterdir() if p.name.startswith(".")
    ]
    assert leftovers == []


def test_readers_never_see_a_partial_write(tmp_path):
    store = ArtifactStore(tmp_path)
    versions = [payload(f"v{i}", 50_000) for i in range(2)]
    store.put(key("a"), versions[0])
    stop = threading.Event()
    seen, bad = [], []

    def read():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            while not stop.is_set():
                data = store.get(key("a"))
                if data not in versions:
                    bad.append(data)
                seen.append(1)
        bad.extend(str(w.message) for w in caught)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for r in readers:
        r.start()
    for i in range(60):
        store.put(key("a"), versions[i % 2])
    stop.set()
    for r in readers:
        r.join()
    assert bad == [] and len(seen) > 0


def test_cache_key_is_order_independent_and_unambiguous():
    assert cache_key(a="1", b="2") == cache_key(b="2", a="1")
    assert cache_key(a="x", b="yz") != cache_key(a="xy", b="z")
    assert cache_key(a="1") != cache_key(b="1")
    assert cache_key(a=b"1") == cache_key(a="1")


def test_environment_versions_name_what_an_artifact_depends_on():
    versions = environment_versions(["ember-runtime", "no-such-distribution-xyz"])
    assert torch.__version__ in versions["torch"]
    assert versions["python"] == sys.version
    assert versions["ember-runtime"] == ember_runtime.__version__
    assert versions["no-such-distribution-xyz"] == "not installed"
    assert "cxx" in versions


def test_an_entry_its_reader_rejects_is_discarded_with_a_warning(tmp_path):
    store = ArtifactStore(tmp_path)
    store.put(key("a"), b"another format")
    with pytest.warns(UserWarning, match=r"damaged \(not a graph\); it was deleted"):
        store.discard(key("a"), b"another format", "not a graph")
    assert store.get(key("a")) is None
    # A writer replaced the entry after the reader read it: the new one stays.
    store.put(key("a"), b"new")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store.discard(key("a"), b"another format", "not a graph")
    assert store.get(key("a")) == b"new"

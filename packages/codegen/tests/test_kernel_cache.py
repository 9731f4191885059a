"""The kernel cache on disk: a damaged, unchecked, untagged or half-written shared
object is never loaded; it is removed with one warning and compiled again, in
every later process. Processes share kernels only through a common secret.
Kernels keep their file when only the user locations named in their comments
change, and their sources then name the new locations."""

import hashlib
import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.fx
from conftest import check

from ember_codegen import CompiledGraph, KeySigner, compile_graph, load_library

aten = torch.ops.aten

# Five tiny translation units, so that every kind of damage gets its own file.
_CHILD = r"""
import json, sys, warnings
from ember_codegen import KeySigner, load_library
source = 'extern "C" int answer() { return %d; }\n'
signer = KeySigner(sys.argv[2].encode())
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    answers = [
        load_library(source % n, sys.argv[1], signer=signer)[0].answer()
        for n in range(5)
    ]
print(json.dumps({"answers": answers, "warnings": [str(w.message) for w in caught]}))
"""


def start(cache_dir, secret="team secret"):
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(cache_dir), secret],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def warnings_of(child) -> list[str]:
    stdout, stderr = child.communicate(timeout=300)
    assert child.returncode == 0, stderr
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result["answers"] == list(range(5))
    return result["warnings"]


def test_damaged_kernels_are_removed_with_a_warning_and_compiled_again(tmp_path):
    # Two processes filling an empty folder at once: each loads whole files only.
    for child in [start(tmp_path) for _ in range(2)]:
        assert warnings_of(child) == []
    shared_objects = sorted(tmp_path.glob("*.so"))
    assert len(shared_objects) == 5
    assert not list(tmp_path.glob("*.tmp"))
    short, flipped, empty, unchecked, gone = shared_objects
    short.write_bytes(b"\x7fEL")  # what a crash or a full disk leaves
    raw = bytearray(flipped.read_bytes())
    raw[len(raw) // 2] ^= 0x10  # may still load, and run other code
    flipped.write_bytes(bytes(raw))
    empty.write_bytes(b"")
    unchecked.with_suffix(".sha256").unlink()  # the sibling that vouches for it
    gone.unlink()  # no shared object: compiled again, nothing to warn about
    # A writer that died mid-write leaves a temporary file, never loaded.
    (tmp_path / f"{gone.stem}.x1y2.so.tmp").write_bytes(b"\x7fELF half")

    messages = warnings_of(start(tmp_path))
    assert len(messages) == 4, messages
    for damaged in (short, flipped, empty, unchecked):
        [message] = [m for m in messages if str(damaged) in m]
        assert "removed" in message and "compiled again" in message
    assert warnings_of(start(tmp_path)) == []  # repaired for good: warned once


def test_kernels_tagged_with_another_secret_are_never_loaded(tmp_path):
    assert warnings_of(start(tmp_path)) == []
    assert warnings_of(start(tmp_path)) == []  # the same secret: loaded as they are
    # Right checksums, but tags made with another secret: each is removed with
    # a warning and compiled again, and the answers are still right.
    messages = warnings_of(start(tmp_path, secret="another secret"))
    assert len(messages) == 5
    assert all("not trusted" in m and "tag does not verify" in m for m in messages)
    # The default signer's secret is the process's own: nothing from before loads.
    [shared_object] = [
        p
        for p in tmp_path.glob("*.so")
        if "return 0;" in p.with_suffix(".cpp").read_text()
    ]
    tag = shared_object.with_suffix(".tag").read_text()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        source = shared_object.with_suffix(".cpp").read_text()
        lib, path = load_library(source, tmp_path)
    assert lib.answer() == 0 and path == shared_object
    assert len(caught) == 1 and "not trusted" in str(caught[0].message)
    assert shared_object.with_suffix(".tag").read_text() != tag  # stored anew


_PLANTED = r"""
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen("%s", "w");
    if (f) { fputs("planted code ran", f); fclose(f); }
}
extern "C" int answer() { return -1; }
"""


def plant(tmp_path, so_path, how):
    """Puts a library whose constructor writes a marker file where ``so_path``
    is, with a checksum file that matches it; returns the marker's path."""
    marker = tmp_path / "planted-code-ran"
    source = tmp_path / "planted.cpp"
    source.write_text(_PLANTED % marker)
    planted = tmp_path / "planted.so"
    subprocess.run(
        ["g++", "-shared", "-fPIC", str(source), "-o", str(planted)], check=True
    )
    so_path.unlink()
    if how == "symlink":
        so_path.symlink_to(planted)
    else:
        so_path.write_bytes(planted.read_bytes())
    digest = hashlib.sha256(planted.read_bytes()).hexdigest()
    so_path.with_suffix(".sha256").write_text(f"{digest}  {so_path.name}\n")
    return marker


@pytest.mark.parametrize("how", ["file", "symlink"])
def test_a_planted_library_with_a_right_checksum_never_runs(tmp_path, how):
    cache = tmp_path / "kernels"
    signer = KeySigner(b"the cache's secret")
    # The children compile answer() returning 0..4; plant over the one for 0.
    source = 'extern "C" int answer() { return 0; }\n'
    _, so_path = load_library(source, cache, signer=signer)
    marker = plant(tmp_path, so_path, how)
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(cache), "the cache's secret"],
        capture_output=True,
        text=True,
    )
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout.strip().splitlines()[-1])
    assert result["answers"] == list(range(5))  # 0's file: compiled again
    [message] = [m for m in result["warnings"] if str(so_path) in m]
    assert "not trusted" in message or "never followed" in message
    assert not marker.exists()
    assert not so_path.is_symlink()


def at_lines(fn, *locations):
    """``fn``'s aten graph, its call nodes at ``locations`` in turn."""
    gm = torch.fx.symbolic_trace(fn)
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    for i, node in enumerate(calls):
        node.meta["user_loc"] = locations[min(i, len(locations) - 1)]
    return gm


def test_moved_code_names_its_new_locations_and_keeps_its_kernels(tmp_path):
    def fn(x):
        y = aten.mul.Tensor(aten.sin.default(x), 2.0)
        return (aten.add.Tensor(y, 1.0), aten.sum.dim_IntList(y, [-1]))

    x = torch.randn(4, 8)
    # "model.py:3" is a prefix of "model.py:30": replacing one must not touch the
    # other.
    old = ("/projA/model.py:3", "/projA/model.py:30")
    new = ("/projB/other.py:7", "/projB/other.py:8")
    stored = compile_graph(at_lines(fn, *old), [x], target="cpp", cache_dir=tmp_path)
    assert stored.locations == old and stored.cpp_source
    moved = CompiledGraph.from_bytes(
        stored.to_bytes(), cache_dir=tmp_path, locations=dict(zip(old, new))
    )
    assert moved.locations == new
    for source in ("wrapper_source", "cpp_source", "torch_source"):
        text = getattr(stored, source)
        assert old[0] in text and old[1] in text, source
        # the longer location first, as it contains the shorter one
        expected = text.replace(old[1], new[1]).replace(old[0], new[0])
        assert getattr(moved, source) == expected, source
    assert moved.library_path == stored.library_path  # no C++ compiled again
    check(moved, fn, x)
    # Compiled afresh at the new locations, the same sources and kernels.
    fresh = compile_graph(at_lines(fn, *new), [x], target="cpp", cache_dir=tmp_path)
    assert fresh.source == moved.source and fresh.torch_source == moved.torch_source
    assert fresh.library_path == stored.library_path
    assert len(list(tmp_path.glob("*.so"))) == 1
    assert os.path.exists(stored.library_path)


def test_kernels_build_side_by_side_into_one_library(tmp_path, monkeypatch):
    """A graph's kernels split into translation units that compile at once and
    link into one shared object, which computes what the whole source does."""
    from ember_codegen.render.cpp import build

    def fn(x, y):
        return (
            aten.sum.dim_IntList(aten.exp.default(x), [1]),
            aten.amax.default(aten.mul.Tensor(y, y), [0]),
            aten.relu.default(aten.add.Tensor(x, 1)),
        )

    x, y = torch.randn(6, 40), torch.randn(30, 20)
    gm = torch.fx.symbolic_trace(fn)
    whole = compile_graph(gm, [x, y], target="cpp", cache_dir=tmp_path / "whole")
    units = build.split_units(whole.cpp_source, 2)
    assert len(units) == 1  # little kernel text: one unit
    monkeypatch.setattr(build, "PARALLEL_BUILD_CHARS", 0)
    monkeypatch.setattr(build, "_jobs", lambda: 2)
    units = build.split_units(whole.cpp_source, 2)
    assert len(units) == 2
    assert sum(u.count('extern "C"') for u in units) == len(whole.kernels)
    built, parallel = [], build._build_in_parallel
    monkeypatch.setattr(
        build, "_build_in_parallel", lambda *a: built.append(parallel(*a)) or built[-1]
    )
    split = compile_graph(gm, [x, y], target="cpp", cache_dir=tmp_path / "split")
    assert built == [True]
    check(split, fn, x, y)

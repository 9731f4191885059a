"""What the cache's trust checks cost: cold and warm first calls in new processes,
and the checks alone.

The demo block's first call in a new process with an empty cache folder (cold),
then in new processes with the folder it filled (warm), median of repeats; with
``--baseline SRC`` the same rows for another checkout of ember (its five
packages' src folders put first on PYTHONPATH), e.g. one from before the checks,
its warm runs taking turns with this checkout's. Then, in this process on the
warm folder, the checks alone: opening the cache (the trust rules and the
secret, once per process) and verifying every entry's tag.
Run: python benchmarks/cache_trust_bench.py [--baseline SRC]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from overhead_bench import _FIRST_CALL

import ember_runtime.trust
from ember.cache import CACHE_FOLDERS
from ember.config import default_cache_dir
from ember_runtime import ArtifactStore

PACKAGES = ("capture", "aotgrad", "codegen", "runtime", "ember")


def first_call_ms(cache_dir: str, pythonpath: str | None) -> float:
    """The demo block's first call in a new process, in milliseconds."""
    env = dict(os.environ, EMBER_CACHE_DIR=cache_dir)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_CALL, "plain"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]["first"] * 1e3


def first_calls(paths: dict[str, str | None], warm_repeats: int) -> list[list[str]]:
    """Per checkout: the cold first call, and the median warm one; the warm runs
    take turns between checkouts, so load on the machine falls on all alike."""
    with tempfile.TemporaryDirectory() as tmp:
        caches = {name: str(Path(tmp) / str(i)) for i, name in enumerate(paths)}
        cold = {name: first_call_ms(caches[name], paths[name]) for name in paths}
        warm: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(warm_repeats):
            for name in paths:
                warm[name].append(first_call_ms(caches[name], paths[name]))
    return [
        [name, f"{cold[name]:.0f}", f"{statistics.median(warm[name]):.1f}"]
        for name in paths
    ]


def checks_alone(repeats: int) -> list[list[str]]:
    """Opening the cache and verifying each entry's tag, timed in-process."""
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        first_call_ms(str(cache), None)  # fill it
        open_uncached = ember_runtime.trust._open_cache.__wrapped__
        args = (cache, None, default_cache_dir(), CACHE_FOLDERS)
        opened = []
        for _ in range(repeats):
            start = time.perf_counter()
            trust = open_uncached(*args)
            opened.append(time.perf_counter() - start)
        files = [
            (f"kernel {so.name}", so.read_bytes(), so.with_suffix(".tag").read_text())
            for so in (cache / "kernels").glob("*.so")
        ]
        stores = [ArtifactStore(cache / n, trust=trust) for n in ("graphs", "meta")]
        keys = [(store, key) for store in stores for key in store.stored_keys()]
        verified = []
        for _ in range(repeats):
            start = time.perf_counter()
            for name, data, tag in files:
                assert trust.verify(name, data, bytes.fromhex(tag))
            for store, key in keys:
                assert store.get(key) is not None
            verified.append(time.perf_counter() - start)
    nbytes = sum(len(data) for _, data, _ in files)
    return [
        ["open the cache: rules, folders, secret", f"{median_ms(opened):.2f}"],
        [
            f"tags of {len(files)} kernel libraries ({nbytes // 1024} KiB) "
            f"and read + check of {len(keys)} entries",
            f"{median_ms(verified):.2f}",
        ],
    ]


def median_ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="root of another ember checkout")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    print("| demo block, first call in a new process | cold ms | warm ms (median) |")
    print("|---|---|---|")
    paths: dict[str, str | None] = {"this checkout": None}
    if args.baseline:
        paths[f"baseline {args.baseline}"] = os.pathsep.join(
            str(Path(args.baseline) / "packages" / p / "src") for p in PACKAGES
        )
    rows = first_calls(paths, args.repeats)
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    print("| the checks alone, on the warm folder | ms (median) |")
    print("|---|---|")
    for row in checks_alone(args.repeats * 3):
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()

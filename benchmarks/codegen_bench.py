"""ember_codegen's speed and compile-time benchmarks, as ratios in one run.

Each workload is an aten graph compiled with ``compile_graph(target="cpp")``,
timed against the same aten calls run eagerly and against torch.compile of them
(the reference; skip it with --no-torch-compile): a pointwise chain, softmax and
layer norm rows, a plain copy of the same size (their memory floor), a full
reduction and a scatter (index_put with accumulate).
Steady-state times are medians of repeated calls after warm-up; compile times
are measured separately, cold (an empty kernel cache) and warm (a fresh process
loading from the disk cache).
The last table is the per-call cost of the generated wrapper on the demo block's
forward graph (small tensors, so calls are mostly overhead), with and without
``check_inputs``. Run with ``python benchmarks/codegen_bench.py``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.fx
from timing import steady_ms

from ember_codegen import KeySigner, compile_graph

aten = torch.ops.aten


def chain10(x):
    """Ten pointwise aten ops, as a model's activation/scale/shift code is."""
    y = aten.mul.Tensor(x, 1.5)
    y = aten.add.Tensor(y, 0.25)
    y = aten.relu.default(y)
    y = aten.sub.Tensor(y, x)
    y = aten.abs.default(y)
    y = aten.mul.Tensor(y, y)
    y = aten.minimum.default(y, x)
    y = aten.clamp.default(y, -2.0, 2.0)
    y = aten.div.Tensor(y, 3.0)
    y = aten.neg.default(y)
    return (y,)


def softmax(x):
    return (aten._softmax.default(x, -1, False),)


def layer_norm(x, w, b):
    out = aten.native_layer_norm.default(x, [1024], w, b, 1e-5)
    return (out[0],)


def copy(x):
    """Read every element once and write it once: what softmax and layer norm
    cannot do with less memory traffic, so their floor."""
    return (aten.clone.default(x),)


def full_sum(x):
    return (aten.sum.default(x),)


def index_put_accumulate(x, rows, values):
    """Rows added at indices with duplicates, as an embedding's backward does."""
    return (aten.index_put.default(x, [rows], values, True),)


def graph30(x, w):
    """A 30-node graph: a matmul, three layer-norm-like blocks of pointwise and
    reduction ops."""
    y = aten.mm.default(x, w)
    for _ in range(3):
        m = aten.mean.dim(y, [-1], True)
        d = aten.sub.Tensor(y, m)
        v = aten.mean.dim(aten.mul.Tensor(d, d), [-1], True)
        y = aten.mul.Tensor(d, aten.rsqrt.default(aten.add.Tensor(v, 1e-5)))
        y = aten.gelu.default(aten.add.Tensor(y, 0.5))
    return (aten.sum.dim_IntList(y, [-1]),)


WORKLOADS: dict[str, tuple[Callable, Callable[[], tuple]]] = {
    "10-op pointwise chain, 1M float32": (chain10, lambda: (torch.randn(1 << 20),)),
    "softmax (4096, 1024)": (softmax, lambda: (torch.randn(4096, 1024),)),
    "layer_norm (4096, 1024)": (
        layer_norm,
        lambda: (torch.randn(4096, 1024), torch.randn(1024), torch.randn(1024)),
    ),
    "copy (4096, 1024), the floor of the two rows above": (
        copy,
        lambda: (torch.randn(4096, 1024),),
    ),
    "sum to a scalar (4096, 1024)": (full_sum, lambda: (torch.randn(4096, 1024),)),
    "index_put accumulate, 2048 rows into (4096, 1024)": (
        index_put_accumulate,
        lambda: (
            torch.randn(4096, 1024),
            torch.randint(0, 4096, (2048,)),
            torch.randn(2048, 1024),
        ),
    ),
}


# The processes of the warm-start row share their kernels through one secret,
# as ember's processes do through the cache folder's (ember_codegen.KeySigner).
SECRET = b"codegen_bench warm start"
SIGNER = KeySigner(SECRET)


def compile_seconds(fn: Callable, args: tuple, cache_dir: Path) -> float:
    gm = torch.fx.symbolic_trace(fn)
    start = time.perf_counter()
    compile_graph(gm, list(args), target="cpp", cache_dir=cache_dir, signer=SIGNER)
    return time.perf_counter() - start


WARM = """
import sys, time, torch, torch.fx
sys.path.insert(0, {bench_dir!r})
from codegen_bench import graph30
from ember_codegen import CompiledGraph, KeySigner, compile_graph
signer = KeySigner({secret!r})
args = (torch.randn(64, 128), torch.randn(128, 256))
gm = torch.fx.symbolic_trace(graph30)
torch.empty(1, device="meta") + 1  # torch's one-time meta-kernel setup, paid by aotgrad
start = time.perf_counter()
compiled = compile_graph(
    gm, list(args), target="cpp", cache_dir={cache_dir!r}, signer=signer
)
middle = time.perf_counter()
CompiledGraph.from_bytes(
    open({blob!r}, "rb").read(), cache_dir={cache_dir!r}, signer=signer
)
print(middle - start, time.perf_counter() - middle)
"""


def demo_block_graph() -> tuple[torch.fx.GraphModule, list]:
    """The umbrella demo block's forward aten graph, as aotgrad hands it over."""
    import ember_aotgrad
    from ember.demo import Block

    graphs = []

    def capture(gm, inputs):
        graphs.append((gm, list(inputs)))
        return gm

    model = Block().eval()
    with torch.no_grad():
        ember_aotgrad.aot_compile(
            torch.fx.symbolic_trace(model), [torch.randn(8, 32, 64)], capture
        )
    return graphs[0]


def wrapper_overhead(repeats: int, cache_dir: str) -> None:
    gm, inputs = demo_block_graph()
    print("\n| demo block forward (8x32x64) | us per call | loops | library calls |")
    print("|---|---|---|---|")
    with torch.no_grad():
        eager = steady_ms(gm, inputs, repeats * 4)
        print(f"| eager aten graph | {eager * 1e3:.1f} | - | - |")
        for check in (True, False):
            compiled = compile_graph(
                gm, inputs, target="cpp", cache_dir=cache_dir, check_inputs=check
            )
            ms = steady_ms(compiled, inputs, repeats * 4)
            print(
                f"| ember, check_inputs={check} | {ms * 1e3:.1f} | "
                f"{len(compiled.loops())} | {len(compiled.externs())} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads\n")
    print(
        "| workload | eager ms | ember ms | eager/ember | torch.compile ms | tc/ember |"
    )
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (fn, make) in WORKLOADS.items():
            inputs = make()
            compiled = compile_graph(
                torch.fx.symbolic_trace(fn), list(inputs), target="cpp", cache_dir=tmp
            )
            for got, want in zip(compiled(*inputs), fn(*inputs)):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
            with torch.no_grad():
                eager = steady_ms(fn, inputs, args.repeats)
                ours = steady_ms(compiled, inputs, args.repeats)
                row = f"| {name} | {eager:.3f} | {ours:.3f} | {eager / ours:.2f}x |"
                if args.no_torch_compile:
                    row += " - | - |"
                else:
                    reference = torch.compile(fn)
                    tc = steady_ms(reference, inputs, args.repeats)
                    row += f" {tc:.3f} | {tc / ours:.2f}x |"
            print(row, flush=True)

        cache = Path(tmp) / "graph30"
        inputs = (torch.randn(64, 128), torch.randn(128, 256))
        nodes = sum(
            1
            for n in torch.fx.symbolic_trace(graph30).graph.nodes
            if n.op == "call_function"
        )
        cold = compile_seconds(graph30, inputs, cache)
        blob = Path(tmp) / "graph30.bin"
        blob.write_bytes(
            compile_graph(
                torch.fx.symbolic_trace(graph30),
                list(inputs),
                "cpp",
                cache_dir=cache,
                signer=SIGNER,
            ).to_bytes()
        )
        script = WARM.format(
            bench_dir=str(Path(__file__).parent),
            cache_dir=str(cache),
            blob=str(blob),
            secret=SECRET,
        )
        runs = [
            subprocess.run(
                [sys.executable, "-c", script],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            for _ in range(3)
        ]
        warm = statistics.median(float(r[0]) for r in runs) * 1e3
        loaded = statistics.median(float(r[1]) for r in runs) * 1e3
        print(
            f"\ncompile time, {nodes}-node graph: cold {cold:.3f} s; fresh process "
            f"with the kernel on disk: compile_graph {warm:.1f} ms, "
            f"CompiledGraph.from_bytes {loaded:.1f} ms"
        )
        wrapper_overhead(args.repeats, tmp)


if __name__ == "__main__":
    main()

"""Training code, side by side in one process: an AdamW step over the demo
block's parameters (eager foreach, ember, torch.compile of ``opt.step``) and a
whole training step of the demo block (eager; ember's one compiled entry with
forward, backward, step and zero_grad; torch.compile of the model with eager
backward and step); then a two-process DDP training step of the demo block on
gloo (eager DDP, DDP around ``ember.compile(model)``, ``ember.compile`` of the
DDP module, and torch.compile of it), one thread per process.
Steady-state medians, compile time apart; ratios are eager time / compiled time.
The single-process rows time each variant in rounds, taking turns
(``timing.interleaved_ms``), and report its median round.

    python benchmarks/training_bench.py [--repeats N] [--no-reference] [--no-ddp]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from timing import first_call_seconds, interleaved_ms

import ember
from ember.demo import Block

BATCH, SEQ, DIM = 8, 32, 64


def _model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = Block(DIM)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    return model, optimizer


def _with_gradients() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model, optimizer = _model_and_optimizer()
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    return model, optimizer


def train_step(model, optimizer, x, target):
    loss = F.mse_loss(model(x), target)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.detach()


def _row(name: str, eager_ms: float, ember_ms: float, ember_s: float, ref) -> str:
    row = (
        f"{name:38} eager {eager_ms:7.3f} ms | ember {ember_ms:7.3f} ms "
        f"({eager_ms / ember_ms:4.2f}x, compile {ember_s:5.2f} s)"
    )
    if ref is not None:
        ref_ms, ref_s = ref
        row += f" | torch.compile {ref_ms:7.3f} ms ({eager_ms / ref_ms:4.2f}x, "
        row += f"compile {ref_s:5.2f} s)"
    return row


def _report(name: str, calls: dict, compile_s: dict, repeats: int) -> str:
    ms = interleaved_ms(calls, repeats)
    ref = None
    if "torch.compile" in ms:
        ref = (ms["torch.compile"], compile_s["torch.compile"])
    return _row(name, ms["eager"], ms["ember"], compile_s["ember"], ref)


def optimizer_step(repeats: int, reference: bool) -> str:
    _, eager = _with_gradients()
    _, opt = _with_gradients()
    compiled = ember.compile(opt.step)
    compile_s = {"ember": first_call_seconds(compiled, ())}
    compile_s["ember"] += first_call_seconds(compiled, ())
    calls = {"eager": (eager.step, ()), "ember": (compiled, ())}
    if reference:
        _, ref_opt = _with_gradients()
        ref_step = torch.compile(ref_opt.step)
        compile_s["torch.compile"] = first_call_seconds(ref_step, ())
        compile_s["torch.compile"] += first_call_seconds(ref_step, ())
        calls["torch.compile"] = (ref_step, ())
    return _report("AdamW step, demo block parameters", calls, compile_s, repeats)


def whole_step(repeats: int, reference: bool) -> str:
    x = torch.randn(BATCH, SEQ, DIM)
    target = torch.randn(BATCH, SEQ, DIM)
    args = (*_model_and_optimizer(), x, target)
    compiled = ember.compile(train_step)
    compile_s = {"ember": first_call_seconds(compiled, args)}
    compile_s["ember"] += first_call_seconds(compiled, args)
    calls = {
        "eager": (train_step, (*_model_and_optimizer(), x, target)),
        "ember": (compiled, args),
    }
    if reference:
        model, opt = _model_and_optimizer()
        ref_args = (torch.compile(model), opt, x, target)
        compile_s["torch.compile"] = first_call_seconds(train_step, ref_args)
        compile_s["torch.compile"] += first_call_seconds(train_step, ref_args)
        calls["torch.compile"] = (train_step, ref_args)
    name = f"training step, demo block ({BATCH}, {SEQ}, {DIM})"
    return _report(name, calls, compile_s, repeats)


# A wider block for DDP (3 MB of parameters), in buckets of 1 MB (torch.compile
# wants no bucket smaller than its first, 1 MB), so that DDP all-reduces several
# buckets and a compiled graph is split at them.
DDP_DIM, BUCKET_MB = 256, 1


def _ddp_wrappings(reference: bool) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    def ddp(model):
        return DDP(model, bucket_cap_mb=BUCKET_MB)

    wrappings = {
        "eager": ddp,
        "DDP(ember.compile(model))": lambda model: ddp(ember.compile(model)),
        "ember.compile(DDP(model))": lambda model: ember.compile(ddp(model)),
    }
    if reference:
        wrappings["torch.compile(DDP(model))"] = lambda model: torch.compile(ddp(model))
    return wrappings


def _ddp_worker(rank: int, port: int, repeats: int, reference: bool, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    x = torch.randn(BATCH, SEQ, DDP_DIM)
    target = torch.randn(BATCH, SEQ, DDP_DIM)
    times = {}
    for name, wrap in _ddp_wrappings(reference).items():
        torch.manual_seed(0)
        model = Block(DDP_DIM)
        wrapped = wrap(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        step_times = []
        for i in range(repeats + 3):
            dist.barrier()
            start = time.perf_counter()
            train_step(wrapped, opt, x, target)
            if i >= 3:
                step_times.append(time.perf_counter() - start)
        times[name] = statistics.median(step_times) * 1e3
    if rank == 0:
        torch.save(times, out)
    dist.destroy_process_group()


def ddp_step(repeats: int, reference: bool) -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "times.pt")
        mp.spawn(_ddp_worker, args=(port, repeats, reference, out), nprocs=2, join=True)
        times = torch.load(out)
    eager_ms = times.pop("eager")
    rows = [
        f"DDP step, 2 processes, demo block ({BATCH}, {SEQ}, {DDP_DIM}), "
        f"{BUCKET_MB} MB buckets: "
        f"eager {eager_ms:7.3f} ms"
    ]
    rows += [
        f"  {name:28} {ms:7.3f} ms ({eager_ms / ms:4.2f}x)"
        for name, ms in times.items()
    ]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--no-ddp", action="store_true")
    args = parser.parse_args()
    reference = not args.no_reference
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(optimizer_step(args.repeats, reference))
    print(whole_step(args.repeats, reference))
    if not args.no_ddp:
        print(ddp_step(min(args.repeats, 50), reference))


if __name__ == "__main__":
    main()

"""DistributedDataParallel and ember, two processes on gloo (127.0.0.1, a free
port): ``DDP(ember.compile(model))`` and ``ember.compile(DDP(model))``, three
training steps of a small MLP and of the demo block, losses and parameters equal
to eager DDP's on every rank, with ``no_sync()`` gradient accumulation and
``find_unused_parameters``; graphs split at DDP's buckets, whose all-reduces
start between the pieces' backwards."""

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

WORLD = 2


def _exit_now() -> None:
    """Ends a worker that finished (its results saved) without the
    interpreter's teardown, where torch 2.13's gloo DDP with
    find_unused_parameters aborts about one run in two ("terminate called
    without an active exception"), with or without ember imported."""
    os._exit(0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Branchy(torch.nn.Module):
    """An MLP with a head the loss does not use: an unused parameter."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8)
        )
        self.unused = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.body(x)


def _make(name: str) -> torch.nn.Module:
    from ember.demo import Block

    torch.manual_seed(0)
    return Branchy() if name == "mlp" else Block(dim=8, heads=2)


SHAPES = {"mlp": (4, 8), "demo_block": (2, 3, 8)}
# Small buckets (bytes), so that these small models fill several.
BUCKET_MB = 500 / 2**20
PIECES = {"mlp": 2, "demo_block": 4}


def _train(model, shape, rank, accumulate):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(3):
        torch.manual_seed(100 * step + rank)  # each rank its own batch
        x, y = torch.randn(shape), torch.randn(shape)
        if accumulate:  # one micro-batch without all-reduce, then one with
            with model.no_sync():
                F.mse_loss(model(x * 0.5), y).backward()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()]


def _wrap(model, wrapping, unused):
    import ember

    if wrapping == "ddp_of_compiled":
        return DDP(
            ember.compile(model), find_unused_parameters=unused, bucket_cap_mb=BUCKET_MB
        )
    ddp = DDP(model, find_unused_parameters=unused, bucket_cap_mb=BUCKET_MB)
    return ember.compile(ddp)


def _compiled_forward(model):
    """The compiled forward of the module DDP wraps, in either wrapping."""
    if isinstance(model, DDP):
        return model.module._compiled_forward
    return model._compiled_forward


def _worker(rank, port, name, wrapping, accumulate, out_dir):
    import ember

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        unused = name == "mlp"
        eager = DDP(_make(name), find_unused_parameters=unused, bucket_cap_mb=BUCKET_MB)
        compiled = _wrap(_make(name), wrapping, unused)
        want = _train(eager, SHAPES[name], rank, accumulate)
        got = _train(compiled, SHAPES[name], rank, accumulate)
        stats = ember.stats()
        torch.save(
            {
                "want": want,
                "got": got,
                "compiles": stats["compiles"],
                "pieces": _compiled_forward(compiled).log.bucket_pieces,
            },
            os.path.join(out_dir, f"rank{rank}.pt"),
        )
    finally:
        dist.destroy_process_group()
    _exit_now()


@pytest.mark.parametrize("accumulate", [False, True], ids=["sync", "no_sync"])
@pytest.mark.parametrize("wrapping", ["ddp_of_compiled", "compiled_ddp"])
@pytest.mark.parametrize("name", ["mlp", "demo_block"])
def test_compiled_ddp_training_matches_eager_ddp(name, wrapping, accumulate, tmp_path):
    mp.spawn(
        _worker,
        args=(_free_port(), name, wrapping, accumulate, str(tmp_path)),
        nprocs=WORLD,
        join=True,
    )
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    for result in results:
        (want_losses, want_params), (got_losses, got_params) = (
            result["want"],
            result["got"],
        )
        assert got_losses == pytest.approx(want_losses, rel=1e-5, abs=1e-6)
        for a, b in zip(want_params, got_params):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        # One graph, split where the buckets end (the MLP: its second layer,
        # then its first; the unused head is in no graph).
        assert result["compiles"] == 1
        assert result["pieces"] == [PIECES[name]]
    # DDP keeps the replicas equal: both ranks hold the same parameters.
    for a, b in zip(results[0]["got"][1], results[1]["got"][1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def _fsdp_worker(rank, port, out_dir):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import ember

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        mesh = init_device_mesh("cpu", (WORLD,))
        results = []
        for compile_it in (False, True):
            model = _make("mlp")
            fully_shard(model, mesh=mesh)
            run = ember.compile(model) if compile_it else model
            opt = torch.optim.SGD(model.parameters(), lr=0.05)
            losses = []
            for step in range(3):
                torch.manual_seed(100 * step + rank)
                x, y = torch.randn(4, 8), torch.randn(4, 8)
                loss = F.mse_loss(run(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
                losses.append(loss.item())
            results.append(losses)
        stats = ember.stats()
        torch.save(
            {"losses": results, "compiles": stats["compiles"]},
            os.path.join(out_dir, f"rank{rank}.pt"),
        )
    finally:
        dist.destroy_process_group()
    _exit_now()


def test_fsdp2_module_compiled_trains_as_eager(tmp_path):
    """FSDP2 (``fully_shard``) runs on gloo on CPU. Its parameters are DTensors,
    which capture refuses (dense torch.Tensor inputs only), so the compiled
    module runs eagerly, with eager's losses: no graph yet."""
    mp.spawn(_fsdp_worker, args=(_free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    for rank in range(WORLD):
        result = torch.load(tmp_path / f"rank{rank}.pt")
        eager_losses, compiled_losses = result["losses"]
        assert compiled_losses == pytest.approx(eager_losses, rel=1e-6)
        assert result["compiles"] == 0


def _overlap_worker(rank, port, bucket_mb, out_dir):
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import (
        allreduce_hook,
    )

    import ember

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        ddp = DDP(_make("demo_block"), bucket_cap_mb=bucket_mb)
        events = []

        def record_bucket(state, bucket):
            events.append("all-reduce")
            return allreduce_hook(state, bucket)

        ddp.register_comm_hook(None, record_bucket)
        compiled = ember.compile(ddp)
        for _ in range(2):  # the last step's events are kept
            events.clear()
            x, y = torch.randn(SHAPES["demo_block"]), torch.randn(SHAPES["demo_block"])
            loss = F.mse_loss(compiled(x), y)
            for node in _compiled_nodes(loss):
                node.register_hook(lambda *grads: events.append("piece backward"))
            loss.backward()
        torch.save(events, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()
    _exit_now()


def _compiled_nodes(loss):
    """The autograd nodes of compiled graphs (pieces) that ``loss`` comes from."""
    seen, todo, found = set(), [loss.grad_fn], []
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if node.name() == "AotFunctionBackward":
            found.append(node)
        todo += [parent for parent, _ in node.next_functions]
    return found


@pytest.mark.parametrize("split", [True, False], ids=["small_buckets", "one_bucket"])
def test_all_reduce_starts_between_the_pieces_backwards(split, tmp_path):
    """``ember.compile(DDP(model))``: with buckets smaller than the model, a
    bucket's all-reduce starts before the backward of the first piece has run;
    with one bucket, the graph is one piece and the all-reduce comes last."""
    bucket_mb = BUCKET_MB if split else 25
    mp.spawn(
        _overlap_worker,
        args=(_free_port(), bucket_mb, str(tmp_path)),
        nprocs=WORLD,
    )
    for rank in range(WORLD):
        events = torch.load(tmp_path / f"rank{rank}.pt")
        last_piece = len(events) - 1 - events[::-1].index("piece backward")
        first_all_reduce = events.index("all-reduce")
        assert events.count("piece backward") == (PIECES["demo_block"] if split else 1)
        assert (first_all_reduce < last_piece) == split

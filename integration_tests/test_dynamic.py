"""Dynamic shapes end to end: sizes that change between calls share one
compiled entry (automatic dynamic, ``dynamic=True``, ``mark_dynamic``), every
call equal to eager; relations between sizes are guarded; sizes 0 and 1
specialize (docs/dynamic.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import types
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ember

transformers = pytest.importorskip("transformers")


class Block(nn.Module):
    """Pre-norm causal attention whose mask is built from the sequence length,
    and a GELU MLP."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (
            a.view(b, t, self.heads, d // self.heads).transpose(1, 2) for a in (q, k, v)
        )
        scores = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


def _compiles(fn) -> int:
    return fn.dispatcher.counters.compiles


def _compiles_of_module(module) -> int:
    return module._compiled_forward.dispatcher.counters.compiles


@pytest.mark.parametrize("backend", ["ember", "aot_eager"])
def test_block_over_many_sizes_compiles_twice(backend):
    torch.manual_seed(0)
    model = Block()
    compiled = ember.compile(model, backend=backend)
    sizes = [(2 + t % 7, t) for t in range(3, 41, 3 if backend == "ember" else 1)]
    for batch, seq in sizes:
        x = torch.randn(batch, seq, 32)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x))
    assert _compiles_of_module(compiled) == 2
    reasons = compiled._compiled_forward.dispatcher.recompile_reasons
    assert len(reasons) == 1 and "size changed" in reasons[0]
    (b0, t0), (b1, t1) = sizes[:2]
    assert compiled._compiled_forward.log.dynamic_reasons == [
        f"L['x'].size(0) is dynamic: it was {b0}, now {b1}",
        f"L['x'].size(1) is dynamic: it was {t0}, now {t1}",
    ]


def test_a_size_of_one_specializes():
    torch.manual_seed(0)
    model = Block()
    compiled = ember.compile(model, dynamic=True)
    with torch.no_grad():
        for batch, seq in [(2, 5), (3, 9), (1, 5), (1, 11), (4, 7)]:
            x = torch.randn(batch, seq, 32)
            torch.testing.assert_close(compiled(x), model(x))
    # dynamic from the first call; batch 1 is an entry of its own (its
    # sequence length still symbolic)
    assert _compiles_of_module(compiled) == 2
    # the LayerNorms' normalized_shape, ints read from attributes, stay
    # constants: no integer input keeps the graph from C++
    log = compiled._compiled_forward.log
    assert "normalized_shape" not in log.graphs[0].code
    assert all("target 'cpp'" in code for code in log.generated_code)


def test_a_branch_on_a_size_guards_the_relation():
    def fn(x):
        if x.shape[0] > 16:
            return x * 2
        return x - 1

    compiled = ember.compile(fn)
    for n in [8, 20, 30, 10, 12, 40]:
        x = torch.randn(n, 3)
        torch.testing.assert_close(compiled(x), fn(x))
    # 8 (fixed), 20 (dynamic, s0 > 16), 10 (dynamic, s0 <= 16); no more
    assert _compiles(compiled) == 3
    entries = compiled.dispatcher.entries
    assert len(entries) == 3


def test_a_reshape_and_a_reduction_over_a_dynamic_dim():
    def fn(x):
        b, t, c = x.shape
        pairs = x.reshape(b, t // 2, 2 * c)
        return pairs.sum(1), x.amax(1), x.mean(dim=(0, 1))

    compiled = ember.compile(fn, dynamic=True)
    for t in [4, 6, 10, 32]:
        x = torch.randn(3, t, 5)
        for got, want in zip(compiled(x), fn(x)):
            torch.testing.assert_close(got, want)
    assert _compiles(compiled) == 1


def test_a_size_read_in_python_becomes_a_specialization_only_where_needed():
    def fn(x):
        n = x.shape[1]
        steps = [x[:, i] for i in range(2)]  # constant indices: no guard on n
        return torch.stack(steps).sum(0) * n, n + 1

    compiled = ember.compile(fn, dynamic=True)
    for n in [3, 7, 12]:
        x = torch.randn(2, n)
        got, want = compiled(x), fn(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]  # a size returned to Python: computed per call
    assert _compiles(compiled) == 1


def test_training_steps_with_a_changing_batch_size():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    eager = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    eager.load_state_dict(model.state_dict())

    def step(m, x, y):
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        return loss

    compiled = ember.compile(step)
    for batch in [8, 12, 5, 30, 9]:
        x, y = torch.randn(batch, 16), torch.randint(0, 4, (batch,))
        for p in (*model.parameters(), *eager.parameters()):
            p.grad = None
        torch.testing.assert_close(compiled(model, x, y), step(eager, x, y))
        for a, b in zip(model.parameters(), eager.parameters()):
            torch.testing.assert_close(a.grad, b.grad)
    assert _compiles(compiled) == 2


def test_marks_and_policies():
    def fn(x):
        return x.sum(0) + x.shape[0]

    never = ember.compile(fn, dynamic=False)
    for n in [3, 4, 5]:
        torch.testing.assert_close(never(torch.ones(n, 2)), fn(torch.ones(n, 2)))
    assert _compiles(never) == 3

    marked = ember.compile(fn)
    x = torch.ones(3, 2)
    ember.mark_dynamic(x, 0)
    torch.testing.assert_close(marked(x), fn(x))
    torch.testing.assert_close(marked(torch.ones(6, 2)), fn(torch.ones(6, 2)))
    assert _compiles(marked) == 1
    assert marked.log.dynamic_reasons == [
        "L['x'].size(0) is dynamic: marked with mark_dynamic"
    ]

    static = ember.compile(fn, dynamic=True)
    for n in [3, 4]:
        y = torch.ones(n, 2)
        ember.mark_static(y, 0)
        torch.testing.assert_close(static(y), fn(y))
    assert _compiles(static) == 2

    # dynamic=True: a module's buffers keep their sizes (BatchNorm's running
    # statistics, read as _buffers['running_mean']), the input's are symbols
    norm = torch.nn.BatchNorm1d(8).eval()
    compiled = ember.compile(norm, dynamic=True)
    for n in [3, 5]:
        x = torch.randn(n, 8, 6)
        torch.testing.assert_close(compiled(x), norm(x))
    (record,) = compiled._compiled_forward.log.compiles
    guards = "\n".join(record.guards)
    assert "L['input'] is Tensor(float32, cpu, size=[s0, 8, s1]" in guards
    assert "L['self'].running_mean is Tensor(float32, cpu, size=[8]," in guards
    # ... while a tensor held by an argument's attribute is data: symbolic
    batch = types.SimpleNamespace(xs=[torch.ones(3)])
    doubled = ember.compile(lambda b: b.xs[0] * 2, dynamic=True)
    for n in (3, 5):
        batch.xs[0] = torch.ones(n)
        assert doubled(batch).shape == (n,)
    assert _compiles(doubled) == 1


# A tiny decoder's sizes, under the names Llama's and Mistral's configs share.
_TINY_DECODER = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    vocab_size=256,
)


def _llama():
    config = transformers.LlamaConfig(**_TINY_DECODER, attention_dropout=0.0)
    return transformers.LlamaForCausalLM(config)


@pytest.mark.parametrize("train", [False, True])
def test_causal_lm_over_five_sequence_lengths(train):
    torch.manual_seed(0)
    model = _llama().train(train)
    compiled = ember.compile(model)
    for seq in [5, 9, 12, 17, 30]:
        ids = torch.randint(0, 256, (2, seq))
        if train:
            model.zero_grad()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = compiled(input_ids=ids, labels=ids).loss
            got.backward()
            got_grads = [p.grad.clone() for p in model.parameters()]
            model.zero_grad()
            want = model(input_ids=ids, labels=ids).loss
            want.backward()
            for a, p in zip(got_grads, model.parameters()):
                torch.testing.assert_close(a, p.grad, rtol=1e-3, atol=1e-4)
        else:
            with torch.no_grad():
                got = compiled(input_ids=ids).logits
                want = model(input_ids=ids).logits
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)
    assert _compiles_of_module(compiled) == 2


_REMEMBER = """
import sys, torch, ember
def fn(x):  # the mask's fill is a constant of the aten graph
    mask = torch.ones(x.shape[0], 3, dtype=torch.bool).tril()
    return x.masked_fill(~mask, -1.0).sum(0) * x.shape[0]
compiled = ember.compile(fn)
for n in map(int, sys.argv[1:]):
    torch.testing.assert_close(compiled(torch.ones(n, 3)), fn(torch.ones(n, 3)))
print(compiled.dispatcher.counters.compiles, compiled.log.cache_results,
      len(compiled.log.generated_code), compiled.log.dynamic_reasons)
"""


def test_a_new_process_remembers_which_dims_are_dynamic(tmp_path):
    script = tmp_path / "remember.py"
    script.write_text(_REMEMBER)
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path / "cache"))

    def run(*sizes):
        out = subprocess.run(
            [sys.executable, str(script), *map(str, sizes)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        return out.stdout.strip()

    first = run(4, 5, 6)
    assert first.startswith("2 ['miss', 'miss'] 2")
    assert "L['x'].size(0) is dynamic: it was 4" in first
    # symbolic from its first call, and the stored entry serves sizes it never
    # saw; its generated code is shown as a compile's is
    second = run(7, 8)
    assert second.startswith("1 ['hit'] 1") and "earlier run" in second


def test_an_integer_argument_that_changes_becomes_a_symbol():
    def fn(x, n, scale):
        return (x[:, :n] * n).sum(1) + x.new_ones(n).sum() * scale

    compiled = ember.compile(fn)
    for n in [3, 4, 5, 7, 2, 9, 10]:
        x = torch.randn(3, 10)
        torch.testing.assert_close(compiled(x, n, 2.0), fn(x, n, 2.0))
    assert _compiles(compiled) == 2
    assert compiled.log.dynamic_reasons == ["L['n'] is dynamic: it was 3, now 4"]
    assert "target 'cpp'" in compiled.log.generated_code[-1]
    x = torch.randn(3, 10)
    torch.testing.assert_close(compiled(x, 1, 2.0), fn(x, 1, 2.0))  # 1 specializes
    assert compiled.dispatcher.recompile_reasons[-1] == (
        "sizes: no longer (L['n'] >= 2) and (L['n'] <= 10)"
    )
    assert _compiles(compiled) == 3


def _same_as_eager(fn, shapes, backend="ember"):
    compiled = ember.compile(fn, backend=backend, dynamic=True)
    for shape in shapes:
        x = torch.randn(*shape)
        got, want = compiled(x), fn(x)
        pairs = zip(got, want) if isinstance(want, tuple) else [(got, want)]
        for a, b in pairs:
            assert type(a) is type(b)
            if isinstance(b, torch.Tensor):
                torch.testing.assert_close(a, b)
            else:
                assert a == b


@pytest.mark.parametrize("backend", ["ember", "aot_eager"])
def test_cases_found_in_review(backend):
    def half_view(x):  # an output that views the input by a symbolic size
        return x[:, : x.size(1) // 2]

    def flat_view(x):
        return x.view(x.size(0) * x.size(1))

    def written_view(x):  # functionalization replays a symbolic view
        y = x.clone()
        v = y[:, : y.size(1) // 2]
        y.add_(1)
        return v * 1

    def squeezed(x):  # a size that is 1 only at some sizes
        y = x[1:].squeeze(0)
        return y * 2 if y.dim() == 2 else y * 3

    def fraction(x):  # a float relation rounds as Python does
        return x * 2 if x.size(1) / 5 > 3 / 5 else x * 3

    def shape_of(x):
        assert isinstance(x.shape, torch.Size)
        return x * x.shape.numel(), x.shape

    for fn, shapes in [
        (half_view, [(3, 8), (3, 12), (5, 6)]),
        (flat_view, [(3, 8), (4, 5)]),
        (written_view, [(3, 8), (4, 6)]),
        (squeezed, [(5, 3), (2, 3)]),
        (fraction, [(2, 8), (2, 3)]),
        (shape_of, [(2, 8), (3, 5)]),
    ]:
        _same_as_eager(fn, shapes, backend)


def test_a_source_read_again_with_another_rank():
    def fn(x):
        return x * 2

    compiled = ember.compile(fn)
    for shape in [(4, 8), (4, 12), (5,), (6,)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(compiled(x), fn(x))


def test_an_op_that_needs_a_size_as_a_number_compiles_once_per_size():
    """max_pool1d's kernel reads the length as an int: each length is its own
    entry, and no symbolic entry that only one length passes is stored."""
    pool = torch.nn.MaxPool1d(2)
    compiled = ember.compile(pool, dynamic=True)
    for t in [10, 13, 13, 10, 13]:
        x = torch.randn(2, 4, t)
        torch.testing.assert_close(compiled(x), pool(x))
    assert _compiles_of_module(compiled) == 2
    assert compiled._compiled_forward.log.dynamic_reasons == [
        "L['input'].size(2) stays fixed: an op of the graph needs it as a number "
        "(it was 10)"
    ]
    # the other dims stay symbolic: a new batch size is no new compile
    x = torch.randn(5, 3, 13)
    torch.testing.assert_close(compiled(x), pool(x))
    assert _compiles_of_module(compiled) == 2


def test_a_loop_over_a_symbolic_size_unrolls_at_each_size():
    """``range()`` of a size (or of an int argument) needs the number: the size
    is guarded to its value, the loop unrolls in one graph, nothing breaks."""

    def fn(x, n):
        for i in range(x.size(0)):
            x = x * 0.5 + i
        return sum(x[:, j] for j in range(n))

    compiled = ember.compile(fn, dynamic=True)
    for rows, n in [(2, 2), (3, 2), (3, 4)]:
        x = torch.randn(rows, 4)
        torch.testing.assert_close(compiled(x, n), fn(x, n))
    assert compiled.breaks == [] and _compiles(compiled) == 3


def test_a_shape_compared_with_a_tuple_keeps_its_sizes_symbolic():
    """``h.size() != (b, 4)``, as nn.RNN checks its hidden state: decided item
    by item, so the sizes stay symbolic and nothing breaks."""

    def fn(x):
        h = torch.zeros(x.size(0), 4)
        if h.size() != (x.size(0), 4) or h.shape == [x.size(0), 4]:
            raise RuntimeError("bad hidden state")
        return x.sum(1, keepdim=True) + h

    compiled = ember.compile(fn, dynamic=True)
    for n in (3, 5):
        x = torch.randn(n, 4)
        torch.testing.assert_close(compiled(x), fn(x))
    assert compiled.breaks == [] and _compiles(compiled) == 1

    def nested(x, names):  # nested sequences, and lists that hold no size
        same = [x.shape[0], (1, 2)] == [x.shape[0], (1, 2)]
        # a fixed size against a symbolic one (xglm checks a mask of fixed
        # sizes against (bsz, 1, tgt_len, src_len))
        fits = torch.zeros(2, 3).shape != (4, x.shape[0])
        fits = fits and ((x.shape[0], 4),) != ((1, 4),)  # nested
        return x + 1 if same and fits and names != None else x  # noqa: E711

    compiled = ember.compile(nested, dynamic=True)
    for n in (3, 5):
        x = torch.randn(n, 4)
        torch.testing.assert_close(compiled(x, ["a"]), nested(x, ["a"]))
    assert compiled.breaks == [] and _compiles(compiled) == 1
    lstm = torch.nn.LSTM(8, 16, batch_first=True)
    compiled = ember.compile(lstm, dynamic=True)
    for batch, t in [(2, 5), (3, 7)]:
        x = torch.randn(batch, t, 8)
        for got, want in zip(compiled(x), lstm(x)):
            torch.testing.assert_close(got, want)
    # no break any more; torch.lstm's kernel reads the sizes as numbers, so
    # they stay fixed (one compile per size), and the reasons say so
    forward = compiled._compiled_forward
    assert forward.breaks == [] and _compiles_of_module(compiled) == 2
    assert all("stays fixed" in r for r in forward.log.dynamic_reasons)


def test_many_sizes_share_one_kernel_library(tmp_path):
    """Every symbolic size runs one C++ library whose kernels read the sizes at
    run time (docs/dynamic.md, "Codegen"): 13 sizes, two builds (the static
    first call, and the template the first symbolic size builds after a probe
    at other sizes), where each size used to build its own."""
    torch.manual_seed(0)
    model = Block()
    compiled = ember.compile(model, options={"cache_dir": str(tmp_path)})
    for t in range(3, 41, 3):
        x = torch.randn(2 + t % 7, t, 32)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x))
    assert _compiles_of_module(compiled) == 2
    assert len(list((tmp_path / "kernels").glob("*.so"))) == 2


class _Window:
    """A sliding-window cache's bookkeeping, as transformers' layers keep it:
    a plain object whose token count grows by one int attribute per call."""

    def __init__(self, window: int) -> None:
        self.window, self.seen, self.start = window, 0, 0
        self.keys = torch.zeros(1, 0, 4)


def _attend(cache: _Window, k: torch.Tensor) -> torch.Tensor:
    full = cache.seen >= cache.window  # a relation of the count, guarded
    cache.seen += k.shape[1]
    cache.start = max(cache.seen - cache.window, 0)  # a size, written back
    keys = torch.cat([cache.keys, k], 1)
    cache.keys = keys[:, 1:] if full else keys
    return cache.keys.softmax(1).sum(1)


def test_a_counter_on_a_plain_object_becomes_a_symbol(monkeypatch):
    """An int attribute of a plain object (not a module) that changes between
    calls becomes a symbol, as an int argument does: a decode loop over a
    cache compiles a few entries while its window fills, then none per token
    (the graph does not use the count, so no size of it compiles either);
    ``max`` of sizes stays symbolic; the counts written back are eager's."""
    compiles = _count_size_compiles(monkeypatch)
    compiled = ember.compile(_attend)
    got_cache, want_cache = _Window(6), _Window(6)

    def step():
        k = torch.randn(1, 1, 4)
        torch.testing.assert_close(compiled(got_cache, k), _attend(want_cache, k))
        assert (got_cache.seen, got_cache.start) == (want_cache.seen, want_cache.start)

    for _ in range(7):  # past the window: the kept keys stop growing
        step()
    assert "L['cache'].seen is dynamic: it was 0, now 1" in (
        compiled.log.dynamic_reasons
    )
    # seen 0 and 1 (sizes 0 and 1 specialize), 2-4 symbolic, 5 (``max``
    # flips), 6 on (full: the other branch)
    assert _compiles(compiled) == 5
    entries, sized = _compiles(compiled), compiles[0]
    for _ in range(5):
        step()
    assert (_compiles(compiled), compiles[0]) == (entries, sized)
    # a module's int attribute is configuration: it stays a constant
    lin = torch.nn.Linear(4, 4)
    compiled = ember.compile(lambda m, x: m(x) * m.in_features)
    for _ in range(2):
        x = torch.randn(2, 4)
        torch.testing.assert_close(compiled(lin, x), lin(x) * 4)
    assert _compiles(compiled) == 1


def _count_size_compiles(monkeypatch) -> list[int]:
    """[how many graphs a PerSizeGraph compiled for a new set of sizes]."""
    from ember_codegen import specialize

    count = [0]
    original = specialize.PerSizeGraph._compile

    def counted(self, inputs):
        count[0] += 1
        return original(self, inputs)

    monkeypatch.setattr(specialize.PerSizeGraph, "_compile", counted)
    return count


def _sliding_mistral():
    config = transformers.MistralConfig(**_TINY_DECODER, sliding_window=6)
    return transformers.MistralForCausalLM(config)


@pytest.mark.parametrize("family", ["llama", "mistral"])
@pytest.mark.parametrize("cache", [None, "static"])
def test_generate_through_a_compiled_forward(family, cache, monkeypatch):
    """``model.forward = ember.compile(model.forward)`` under ``generate``, as
    the transformers docs show: the tokens are eager's; a dynamic cache grows
    by one symbolic size per step, a static one (and Mistral's sliding window,
    filled past its 6 tokens) by the int counts on its layers, so each run
    compiles a bounded number of entries. A length is called once a run: the
    first run compiles no length but the first of each symbolic graph (the
    rest run through torch), the second compiles each length it sees again,
    and a third compiles nothing."""
    torch.manual_seed(0)
    model = (_llama() if family == "llama" else _sliding_mistral()).eval()
    ids = torch.randint(3, 256, (2, 7))
    kwargs = dict(max_new_tokens=10, min_new_tokens=10, do_sample=False)
    if cache:
        kwargs["cache_implementation"] = cache
    with torch.no_grad():
        want = model.generate(ids, **kwargs)
        compiles = _count_size_compiles(monkeypatch)
        model.forward = compiled = ember.compile(model.forward)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no recompile limit, no eager run
            assert torch.equal(model.generate(ids, **kwargs), want)
            entries, sized = _compiles(compiled), compiles[0]
            assert entries <= 4 and sized <= entries
            assert torch.equal(model.generate(ids, **kwargs), want)
            again = compiles[0]
            assert torch.equal(model.generate(ids, **kwargs), want)
    assert (_compiles(compiled), compiles[0]) == (entries, again)
    assert compiled.breaks == []


def test_a_size_compiled_first_is_served_by_its_own_entry(monkeypatch):
    """Sizes 4, 5, 4: the entry compiled for 4 serves 4 again, though the
    symbolic entry made for 5 (and hit last) admits it too, and would
    compile size 4 once more."""
    compiles = _count_size_compiles(monkeypatch)
    model = Block()
    compiled = ember.compile(model)
    with torch.no_grad():
        for t in (4, 5, 4, 6, 4, 6):
            x = torch.randn(2, t, 32)
            torch.testing.assert_close(compiled(x), model(x))
    assert _compiles_of_module(compiled) == 2
    assert compiles[0] == 2  # size 5 at once, 6 at its second call


def test_a_static_cache_after_a_dynamic_one_keeps_its_counts_symbolic():
    """The dims a dynamic cache made symbolic are remembered for the forward
    (one function for both); under a static cache its writes (``copy_``,
    ``index_copy_``) then run on symbolic sizes and need shape rules, or the
    policy fixes every size and each token's count compiles anew, until the
    recompile limit."""
    torch.manual_seed(0)
    model = _sliding_mistral().eval()
    ids = torch.randint(3, 256, (2, 7))
    kwargs = dict(max_new_tokens=10, min_new_tokens=10, do_sample=False)
    forward = model.forward
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        for cache in ("dynamic", "static"):
            if cache == "static":
                kwargs["cache_implementation"] = cache
            model.forward = forward
            want = model.generate(ids, **kwargs)
            model.forward = compiled = ember.compile(forward)
            assert torch.equal(model.generate(ids, **kwargs), want)
    assert _compiles(compiled) <= 3
    assert not any("stays fixed: 'copy_'" in r for r in compiled.log.dynamic_reasons)


def _bump(cache: _Window) -> None:
    cache.seen += 3
    print("a break inside")


def test_a_symbolic_count_is_passed_on_as_read_before_a_break():
    """A count read, then changed by the call a graph broke at: the resume
    function gets the value read before the call (it read the count again)."""

    def fn(x, cache):
        n = cache.seen
        y = x * 2
        _bump(cache)
        return y[:n] + 0, n

    compiled = ember.compile(fn)
    got_cache, want_cache = _Window(6), _Window(6)
    for _ in range(5):
        x = torch.arange(40.0)
        got, want = compiled(x, got_cache), fn(x, want_cache)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1] and got_cache.seen == want_cache.seen


def test_a_source_that_was_an_int_and_is_now_a_tensor():
    """The dynamic policy remembers an int's value (0 and 1 too); the same
    argument as a tensor later is new to it, not a crash that sends the
    function to eager."""

    def fn(x, v):
        return x + v

    compiled = ember.compile(fn)
    for v in (0, torch.ones(3), 5, torch.ones(3)):
        x = torch.zeros(3)
        torch.testing.assert_close(compiled(x, v), fn(x, v))
    assert compiled.breaks == [] and _compiles(compiled) == 3


def test_an_encoder_decoder_generates_with_its_encoder_output_passed_in():
    """T5's ``generate`` runs the encoder once and passes its ModelOutput to
    every decoding step: the compiled forward reads its fields (guarded) and
    hands the object itself on, where it broke the graph at ``to_tuple``
    (a dict method of the output) and ran eagerly."""
    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=256,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        decoder_start_token_id=0,
        dropout_rate=0.0,
    )
    model = transformers.T5ForConditionalGeneration(config).eval()
    ids = torch.randint(3, 256, (2, 7))
    kwargs = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False)
    with torch.no_grad():
        want = model.generate(ids, **kwargs)
        model.forward = compiled = ember.compile(model.forward)
        assert torch.equal(model.generate(ids, **kwargs), want)
    assert compiled.breaks == [] and _compiles(compiled) <= 3

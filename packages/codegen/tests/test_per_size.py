"""A graph that reads its sizes from its inputs (``aten.sym_size.int``, as
aotgrad writes graphs with symbolic sizes) compiles once per set of sizes, and
its PerSizeGraph stores and loads (docs/dynamic.md)."""

import operator

import torch
import torch.fx

from ember_codegen import PerSizeGraph, compile_graph, load_per_size_graph
from ember_codegen.specialize import specialize

aten = torch.ops.aten


def _graph():
    """``x.view(2 * x.size(1), x.size(0) // 2).relu()`` written by hand."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    n = g.call_function(aten.sym_size.int, (x, 1))
    m = g.call_function(aten.sym_size.int, (x, 0))
    rows = g.call_function(operator.mul, (2, n))
    cols = g.call_function(operator.floordiv, (m, 2))
    view = g.call_function(aten.view.default, (x, [rows, cols]))
    g.output((g.call_function(aten.relu.default, (view,)),))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def _want(x):
    return (x.view(2 * x.size(1), x.size(0) // 2).relu(),)


def test_specialize_folds_the_sizes():
    code = specialize(_graph(), [torch.randn(4, 3)]).code
    assert "sym_size" not in code and "[6, 2]" in code


def test_one_compile_per_set_of_sizes(tmp_path):
    compiles = []

    def compile_one(gm, inputs):
        compiles.append(tuple(inputs[0].shape))
        return compile_graph(gm, inputs, cache_dir=tmp_path)

    compiled = PerSizeGraph(_graph(), [torch.randn(4, 3)], compile_one)
    for shape in [(4, 3), (6, 5), (4, 3), (8, 2)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(compiled(x), _want(x))
    assert compiles == [(4, 3), (6, 5), (8, 2)]
    assert compiled.sizes == [(0, 1), (0, 0)]


def test_a_new_size_runs_through_torch_until_its_compile_call(tmp_path):
    """compile_after=2: a size's first call runs the symbolic graph through
    torch, its second compiles it; the first sizes compile at once, and a
    stored graph keeps the setting."""
    compiles = []

    def compile_one(gm, inputs):
        compiles.append(tuple(inputs[0].shape))
        return compile_graph(gm, inputs, cache_dir=tmp_path)

    settings = {"target": "auto", "check_inputs": True, "compile_after": 2}
    compiled = PerSizeGraph(_graph(), [torch.randn(4, 3)], compile_one, settings)
    for shape, after in [
        ((4, 3), [(4, 3)]),
        ((6, 5), [(4, 3)]),  # through torch
        ((8, 2), [(4, 3)]),
        ((6, 5), [(4, 3), (6, 5)]),  # its second call
        ((6, 5), [(4, 3), (6, 5)]),
    ]:
        x = torch.randn(*shape)
        torch.testing.assert_close(compiled(x), _want(x))
        assert compiles == after
    assert list(compiled.waiting) == [(2, 8)]
    loaded = load_per_size_graph(compiled.to_bytes(), cache_dir=tmp_path)
    x = torch.randn(10, 7)
    torch.testing.assert_close(loaded(x), _want(x))
    assert list(loaded.compiled) == [(3, 4), (5, 6)]
    loaded(x)
    assert list(loaded.compiled) == [(3, 4), (5, 6), (7, 10)]


def test_a_size_run_through_torch_ignores_the_callers_autocast(tmp_path):
    """The graph's dtypes are explicit: under the caller's autocast, a size
    run through torch returns float32, as a compiled size does."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    n = g.call_function(aten.sym_size.int, (x, 0))
    flat = g.call_function(aten.view.default, (x, [n, -1]))
    turned = g.call_function(aten.t.default, (flat,))
    g.output((g.call_function(aten.mm.default, (flat, turned)),))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    settings = {"target": "auto", "check_inputs": True, "compile_after": 2}
    compiled = PerSizeGraph(
        gm,
        [torch.randn(4, 3)],
        lambda gm, inputs: compile_graph(gm, inputs, cache_dir=tmp_path),
        settings,
    )
    x = torch.randn(5, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        (got,) = compiled(x)
    assert len(compiled.compiled) == 1 and len(compiled.waiting) == 1
    assert got.dtype is torch.float32
    torch.testing.assert_close(got, x @ x.t())


def test_a_stored_per_size_graph_loads_and_compiles_new_sizes(tmp_path):
    settings = {"target": "auto", "check_inputs": True}
    first = PerSizeGraph(
        _graph(),
        [torch.randn(4, 3)],
        lambda gm, inputs: compile_graph(gm, inputs, cache_dir=tmp_path),
        settings,
    )
    loaded = load_per_size_graph(first.to_bytes(), cache_dir=tmp_path)
    assert list(loaded.compiled) == [(3, 4)] and loaded.settings == settings
    for shape in [(4, 3), (10, 7)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(loaded(x), _want(x))
    assert len(loaded.compiled) == 2


def test_an_integer_input_is_folded_and_the_kernels_are_cpp(tmp_path):
    """``x[:, :n] * 2`` with ``n`` an integer input (a symbol of aotgrad's):
    the specialized graph takes the tensors only, and compiles to C++."""
    g = torch.fx.Graph()
    x, n = g.placeholder("x"), g.placeholder("n")
    head = g.call_function(aten.slice.Tensor, (x, 1, 0, n))
    g.output((g.call_function(aten.mul.Tensor, (head, 2)),))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    x = torch.randn(3, 8)
    gm.graph.find_nodes(op="placeholder")[0].meta["val"] = x
    compiled = PerSizeGraph(
        gm, [x, 5], lambda gm, inputs: compile_graph(gm, inputs, cache_dir=tmp_path)
    )
    assert compiled.ints == [1] and compiled.target == "cpp"
    for n in (5, 7, 5):
        torch.testing.assert_close(compiled(x, n), (x[:, :n] * 2,))
    assert list(compiled.compiled) == [(5,), (7,)]


def test_a_loaded_graph_with_a_constant_compiles_new_sizes(tmp_path):
    """A stored graph has lost its traced values, its constants' too (an
    attention mask's scalar, written by aotgrad as a get_attr)."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    n = g.call_function(aten.sym_size.int, (x, 0))
    fill = g.get_attr("fill")
    ones = g.call_function(
        aten.ones.default, ([n],), {"dtype": torch.bool, "device": torch.device("cpu")}
    )
    where = g.call_function(aten.where.self, (ones, x, fill))
    g.output((g.call_function(aten.mul.Tensor, (where, 2)),))
    root = torch.nn.Module()
    root.fill = torch.tensor(-1.0)
    gm = torch.fx.GraphModule(root, g)
    first = PerSizeGraph(
        gm,
        [torch.randn(4)],
        lambda gm, inputs: compile_graph(gm, inputs, cache_dir=tmp_path),
        {"target": "auto", "check_inputs": True},
    )
    loaded = load_per_size_graph(first.to_bytes(), cache_dir=tmp_path)
    x = torch.randn(7)
    torch.testing.assert_close(loaded(x), (x * 2,))
    assert list(loaded.compiled) == [(4,), (7,)]


def _softmax_mean_body(g, xs, n):
    """``softmax(x, -1) * x.mean(-1, keepdim=True)`` over rows of any length,
    in aten ops (the mean's divisor and the loops' bounds change with it); the
    graph reads the length as aotgrad's graphs do (a view to its own shape)."""
    x = g.call_function(aten.view.default, (xs[0], [8, n]))
    top = g.call_function(aten.amax.default, (x, [1], True))
    e = g.call_function(aten.exp.default, (g.call_function(aten.sub.Tensor, (x, top)),))
    total = g.call_function(aten.sum.dim_IntList, (e, [1], True))
    mean = g.call_function(aten.mean.dim, (x, [1], True))
    soft = g.call_function(aten.div.Tensor, (e, total))
    return g.call_function(aten.mul.Tensor, (soft, mean))


def _softmax_mean_graph():
    return _graph_of(_softmax_mean_body)


def _per_size(tmp_path, gm, *inputs):
    from ember_codegen.compile import per_size_compiler
    from ember_codegen.render.cpp.literals import Templates

    settings = {"target": "cpp", "check_inputs": True}
    compile_one = per_size_compiler(settings, tmp_path, None, Templates())
    return PerSizeGraph(gm, list(inputs), compile_one, settings)


def test_sizes_whose_kernels_differ_in_literals_share_one_library(tmp_path):
    compiled = _per_size(tmp_path, _softmax_mean_graph(), torch.randn(8, 20))
    lengths = (24, 28, 36, 44, 52, 60, 21, 23, 30, 33, 47, 61)
    for length in lengths:
        x = torch.randn(8, length)
        got = compiled(x)
        want = torch.softmax(x, -1) * x.mean(-1, keepdim=True)
        torch.testing.assert_close(got[0], want)
        if length in (28, 61):  # to the bit what this length's own source gives
            alone = _per_size(tmp_path, _softmax_mean_graph(), x)
            assert not alone.compiled[(length,)].lifted
            assert torch.equal(got[0], alone(x)[0])
    graphs = [compiled.compiled[(n,)] for n in (20, *lengths)]
    assert not graphs[0].lifted  # the first length is built as it is
    # each later length reads its bounds and the mean's divisor at run time,
    # all from one library
    libraries = [g.library_path for g in graphs]
    assert len(set(libraries)) == 2
    assert len(set(libraries[1:])) == 1
    assert all(g.lifted == graphs[1].lifted for g in graphs[2:])
    assert "/ 36.0f" in graphs[3].cpp_source  # each keeps its own source


def test_a_loaded_per_size_graph_reuses_the_shared_library(tmp_path):
    first = _per_size(tmp_path, _softmax_mean_graph(), torch.randn(8, 20))
    first(torch.randn(8, 36))
    loaded = load_per_size_graph(first.to_bytes(), cache_dir=tmp_path)
    for length in (52, 61):
        x = torch.randn(8, length)
        torch.testing.assert_close(
            loaded(x)[0], torch.softmax(x, -1) * x.mean(-1, keepdim=True)
        )
    shared = first.compiled[(36,)].library_path
    assert first.compiled[(36,)].lifted
    assert loaded.compiled[(36,)].library_path == shared
    assert loaded.compiled[(52,)].library_path == shared
    assert loaded.compiled[(61,)].library_path == shared


def test_literals_the_compiler_needs_stay_fixed():
    from ember_codegen.render.cpp.literals import find_literals, template

    source = (
        'extern "C" void kernel0(float* __restrict__ out) {\n'
        "  #pragma omp parallel for collapse(2)\n"
        "  float acc[16];  // 16 lanes\n"
        "  for (int64_t i0 = 0; i0 < 37; ++i0) {\n"
        "    out[37*i0] = x[i0] / 37.0f + int64_t(5LL);  // row of 37\n"
        "  }\n"
        "  if (2960 >= 32768) {\n"
        "    #pragma omp parallel for if(2960 >= 32768)\n"
        "  }\n"
        "}\n"
    )
    literals = find_literals(source)
    texts = [literals.text(i) for i in range(len(literals.spans))]
    assert texts == [
        "2",
        "16",
        "0",
        "37",
        "37",
        "37.0f",
        "5LL",
        "2960",
        "32768",
        "2960",
        "32768",
    ]  # fmt: skip (no comment's numbers)
    # a pragma's numbers (but its if clause's), an array's length
    assert literals.fixed == {0, 1}
    lifted = template(literals, [3, 4, 5, 7])
    assert lifted.startswith(
        'extern "C" void kernel0(const int64_t* __restrict__ ember_k, '
        "const double* __restrict__ ember_f, float* __restrict__ out) {\n"
        "  const double ember_lf0 = ember_f[0];\n"
        "  const int64_t ember_lk0 = ember_k[0];\n"
        "  const int64_t ember_lk1 = ember_k[1];\n"
        "  const int64_t ember_lk2 = ember_k[2];\n"
    )
    assert "i0 < ember_lk0;" in lifted and "out[ember_lk1*i0]" in lifted
    assert "x[i0] / float(ember_lf0)" in lifted and "if (ember_lk2 >= 32768)" in lifted
    assert "//" not in lifted  # every size of a skeleton writes the same text


def _graph_of(fn, n_inputs: int = 1) -> torch.fx.GraphModule:
    """``fn``'s aten graph, by hand: its first input's size 1 is read as
    aotgrad's graphs read symbolic sizes, and each node names a user line."""
    g = torch.fx.Graph()
    xs = [g.placeholder(f"x{i}") for i in range(n_inputs)]
    n = g.call_function(aten.sym_size.int, (xs[0], 1))
    g.output((fn(g, xs, n),))
    for node in g.nodes:
        node.meta["user_loc"] = "/home/me/model.py:12"
    return torch.fx.GraphModule(torch.nn.Module(), g)


def _column_sums(g, xs, n):
    return g.call_function(aten.sum.dim_IntList, (xs[0], [0]))


def test_column_reductions_on_either_side_of_64_lanes_share_per_side(tmp_path):
    # 16 lanes below 64 columns, 64 from there: two skeletons, a template each
    compiled = _per_size(tmp_path, _graph_of(_column_sums), torch.randn(30, 20))
    for n in (36, 44, 70, 80, 90):
        x = torch.randn(30, n)
        torch.testing.assert_close(compiled(x)[0], x.sum(0))
    paths = {n: compiled.compiled[(n,)].library_path for n in (36, 44, 70, 80, 90)}
    assert paths[36] == paths[44] and paths[80] == paths[90]
    assert paths[44] != paths[80]


def _scaled(g, xs, n):
    # x * (1 / n): an exact float32 constant for n = 32, a rounded one else
    recip = g.call_function(operator.pow, (n, -1))
    return g.call_function(aten.mul.Tensor, (xs[0], recip))


def test_exact_and_rounded_float_constants_share_a_template(tmp_path):
    compiled = _per_size(tmp_path, _graph_of(_scaled), torch.randn(4, 20))
    for n in (24, 40, 32, 48):
        x = torch.randn(4, n)
        torch.testing.assert_close(compiled(x)[0], x * (1 / n))
    assert "0.03125f" in compiled.compiled[(32,)].cpp_source
    paths = {compiled.compiled[(n,)].library_path for n in (24, 40, 32, 48)}
    assert len(paths) == 1


def test_a_loaded_graph_keeps_its_user_lines_and_shares_the_stored_library(tmp_path):
    first = _per_size(tmp_path, _graph_of(_softmax_mean_body), torch.randn(8, 20))
    first(torch.randn(8, 36))
    assert "model.py:12" in first.compiled[(36,)].cpp_source
    loaded = load_per_size_graph(first.to_bytes(), cache_dir=tmp_path)
    x = torch.randn(8, 52)
    torch.testing.assert_close(
        loaded(x)[0], torch.softmax(x, -1) * x.mean(-1, keepdim=True)
    )
    assert "model.py:12" in loaded.compiled[(52,)].cpp_source
    shared = first.compiled[(36,)].library_path
    assert loaded.compiled[(52,)].library_path == shared
    # code that moved since: new sizes name where it is now, as stored ones do
    moved = {"/home/me/model.py:12": "/home/me/model.py:40"}
    loaded = load_per_size_graph(first.to_bytes(), tmp_path, locations=moved)
    loaded(torch.randn(8, 44))
    for n in (36, 44):
        source = loaded.compiled[(n,)].cpp_source
        assert "model.py:40" in source and "model.py:12" not in source
    assert loaded.compiled[(44,)].library_path == shared


def _masked_mean_body(g, xs, n):
    """ReLU's backward as aotgrad writes it, ``where(x <= 0, 0.0, g)``, its zero a
    ``scalar_tensor`` call with constant arguments, then a row mean."""
    x = g.call_function(aten.view.default, (xs[0], [8, n]))
    dead = g.call_function(aten.le.Scalar, (x, 0))
    zero = g.call_function(aten.scalar_tensor.default, (0.0,), {"dtype": torch.float32})
    kept = g.call_function(aten.where.self, (dead, zero, x))
    return g.call_function(aten.mean.dim, (kept, [1], True))


def test_a_loaded_graph_keeps_its_constant_calls_and_the_stored_library(tmp_path):
    """Pickling a GraphModule traced its code again on load, which ran the
    ``scalar_tensor`` and stored its result as a tensor the kernels read: the
    new size's source had another skeleton and built its own library."""
    first = _per_size(tmp_path, _graph_of(_masked_mean_body), torch.randn(8, 20))
    first(torch.randn(8, 36))
    loaded = load_per_size_graph(first.to_bytes(), cache_dir=tmp_path)
    code = loaded.gm.code
    assert "scalar_tensor" in code and "_tensor_constant" not in code
    x = torch.randn(8, 52)
    want = torch.where(x <= 0, 0.0, x).mean(1, keepdim=True)
    torch.testing.assert_close(loaded(x)[0], want)
    shared = first.compiled[(36,)].library_path
    assert loaded.compiled[(52,)].library_path == shared


def test_a_loaded_graph_still_updates_its_inputs_in_place(tmp_path):
    """The graph's ``input_updates`` (an optimizer's or BatchNorm's running
    statistics) survive storing: a new size writes them in place."""
    g = torch.fx.Graph()
    x, state = g.placeholder("x"), g.placeholder("state")
    n = g.call_function(aten.sym_size.int, (x, 0))
    total = g.call_function(aten.sum.dim_IntList, (x, [0]))
    mean = g.call_function(aten.div.Scalar, (total, n))
    new_state = g.call_function(aten.add.Tensor, (state, mean))
    g.output((new_state, g.call_function(aten.mul.Tensor, (x, 2))))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    gm.meta["input_updates"] = ((0, 1),)
    first = _per_size(tmp_path, gm, torch.randn(6, 4), torch.zeros(4))
    first(torch.randn(9, 4), torch.zeros(4))
    loaded = load_per_size_graph(first.to_bytes(), cache_dir=tmp_path)
    x, state = torch.randn(11, 4), torch.randn(4)
    want = state + x.mean(0)
    updated, doubled = loaded(x, state)
    torch.testing.assert_close(updated, want)
    torch.testing.assert_close(doubled, x * 2)
    assert updated.data_ptr() == state.data_ptr()
    assert "updated in place" in loaded.compiled[(11,)].wrapper_source


def test_an_integer_input_the_graph_does_not_use_costs_no_compile(tmp_path):
    """An integer input only passed through (a KV cache's token count, which
    the caller's guards read and write back) is not part of what a compile
    depends on; inputs updated in place are counted without the integers."""
    g = torch.fx.Graph()
    g.placeholder("count")
    x, state = g.placeholder("x"), g.placeholder("state")
    new_state = g.call_function(aten.add.Tensor, (state, x))
    g.output((new_state, g.call_function(aten.mul.Tensor, (x, 2))))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    gm.meta["input_updates"] = ((0, 2),)
    compiles = []

    def compile_one(gm, inputs):
        compiles.append(len(inputs))
        return compile_graph(gm, inputs, cache_dir=tmp_path)

    x = torch.randn(4)
    gm.graph.find_nodes(op="placeholder")[1].meta["val"] = x
    compiled = PerSizeGraph(gm, [7, x, torch.zeros(4)], compile_one)
    assert compiled.ints == [0] and compiled.keyed_ints == []
    for n in (7, 8, 9):
        x, state = torch.randn(4), torch.randn(4)
        want = state + x
        updated, doubled = compiled(n, x, state)
        torch.testing.assert_close(updated, want)
        torch.testing.assert_close(doubled, x * 2)
        assert updated.data_ptr() == state.data_ptr()
    assert compiles == [2]
    loaded = load_per_size_graph(compiled.to_bytes(), cache_dir=tmp_path)
    assert loaded.keyed_ints == [] and list(loaded.compiled) == [()]

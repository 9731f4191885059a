"""`import ember` imports the umbrella and the runtime, not the stages: capture,
aotgrad's tracer and codegen's lowering load when a call needs them."""

from __future__ import annotations

import subprocess
import sys


def _modules_after(code: str) -> set[str]:
    script = f"{code}\nimport sys\nprint(' '.join(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    return set(out.stdout.split())


def test_import_ember_leaves_the_stages_unimported() -> None:
    loaded = _modules_after("import ember")
    assert "ember_runtime.dispatcher" in loaded
    for module in (
        "ember_capture.entry",
        "ember_aotgrad.trace",
        "ember_codegen.ir.nodes",
    ):
        assert module not in loaded


def test_first_call_imports_what_it_needs(tmp_path) -> None:
    code = f"""
import torch, ember
options = {{"cache_dir": {str(tmp_path)!r}}}
f = ember.compile(lambda x: torch.relu(x) * 2, options=options)
assert torch.equal(f(torch.ones(3)), torch.full((3,), 2.0))
"""
    loaded = _modules_after(code)
    assert {
        "ember_capture.entry",
        "ember_aotgrad.aot",
        "ember_codegen.lowering.rules",
    } <= loaded


def test_public_names_resolve_lazily() -> None:
    import ember_aotgrad
    import ember_capture
    import ember_codegen

    for package in (ember_capture, ember_aotgrad, ember_codegen):
        for name in package.__all__:
            assert getattr(package, name) is not None
            assert name in dir(package)
    assert callable(ember_capture.capture)  # the function, not entry.py


def test_a_warm_start_loads_without_the_compiler_stages(tmp_path) -> None:
    # The second process finds the function's saved entry and its graph on
    # disk: it imports neither capture's interpreter, value kinds and bytecode
    # library, nor aotgrad's tracer and rules, nor codegen's lowering and
    # renderers (a stored graph runs with wrapper_globals).
    code = f"""
import torch, ember
options = {{"cache_dir": {str(tmp_path)!r}}}
f = ember.compile(lambda x: torch.relu(x) * 2, options=options)
assert torch.equal(f(torch.ones(3)), torch.full((3,), 2.0))
"""
    cold = _modules_after(code)
    warm = _modules_after(code)
    assert "ember_codegen.lowering.rules" in cold
    assert "ember_codegen.compiled" in warm
    for module in (
        "ember_capture.entry",
        "ember_capture.bytecode_interp",
        "ember_capture.variables",
        "bytecode",
        "ember_aotgrad.trace",
        "ember_aotgrad.decompositions",
        "ember_codegen.lowering.rules",
        "ember_codegen.render.loop_wrapper",
        "ember_codegen.ir.nodes",
        "sympy",
    ):
        assert module not in warm, module

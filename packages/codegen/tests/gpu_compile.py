"""Compiling generated Triton modules for a GPU without one: Triton's own
compiler, down to a cubin for an sm_90 GPU (H100, H200), in a process without
TRITON_INTERPRET. What the interpreter lets pass (a loop variable whose type
changes, a float64 value where a kernel wants float32) fails here. Each
kernel's parameter types come from the comment the renderer writes under its
``def`` (``# p_x: float32, p_buf0: float32``)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

POINTERS = {
    "float32": "*fp32",
    "float64": "*fp64",
    "float16": "*fp16",
    "bfloat16": "*bf16",
    "int64": "*i64",
    "int32": "*i32",
    "int16": "*i16",
    "int8": "*i8",
    "uint8": "*u8",
    "bool": "*i1",
}
_TYPES = re.compile(r"^\s*# (\w+: \w+(?:, \w+: \w+)*)$", re.MULTILINE)


def failures(sources: list[str]) -> list[str]:
    """One line per kernel of ``sources`` (Triton modules) that does not
    compile for the GPU, run in a new process."""
    with tempfile.TemporaryDirectory() as folder:
        listed = Path(folder) / "sources.json"
        listed.write_text(json.dumps(sources))
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env["TRITON_CACHE_DIR"] = str(Path(folder) / "cache")
        done = subprocess.run(
            [sys.executable, __file__, str(listed)],
            env=env,
            capture_output=True,
            text=True,
        )
    if done.returncode:
        return [f"the compiling process failed:\n{done.stderr[-3000:]}"]
    return [line for line in done.stdout.splitlines() if line]


def _compile_all(listed: Path) -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", 90, 32)
    folder = listed.parent
    for i, source in enumerate(json.loads(listed.read_text())):
        path = folder / f"module{i}.py"  # triton.jit reads a kernel's file
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(f"module{i}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name, fn in vars(module).items():
            found = _TYPES.search(getattr(fn, "src", ""))
            if not isinstance(fn, triton.JITFunction) or found is None:
                continue  # a helper: compiled inside the kernels calling it
            signature = {
                p: POINTERS[t]
                for p, t in (part.split(": ") for part in found.group(1).split(", "))
            }
            try:
                triton.compile(ASTSource(fn, signature, {}), target=target)
            except Exception as e:
                why = str(e).strip().splitlines()[-1] if str(e).strip() else ""
                print(f"{name} in module {i}: {type(e).__name__}: {why}")
                print("  " + source.split("\n", 1)[0])


if __name__ == "__main__":
    _compile_all(Path(sys.argv[1]))

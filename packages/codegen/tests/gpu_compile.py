"""Compiling generated Triton modules for a GPU without one: Triton's own
compiler, down to a cubin for an sm_90 GPU (H100, H200), in a process without
TRITON_INTERPRET. What the interpreter lets pass (a loop variable whose type
changes, a float64 value where a kernel wants float32) fails here. Each
kernel's parameter types come from the comment the renderer writes under its
``def`` (``# p_x: float32, p_buf0: float32``). The modules are shared among
one process per CPU, and a kernel that several modules hold (the same source
in the same surroundings) is compiled once."""

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
    compile for the GPU, compiled in new processes (each has finished when
    this returns)."""
    jobs = max(1, min(len(os.sched_getaffinity(0)), len(sources)))
    with tempfile.TemporaryDirectory() as folder:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env["TRITON_CACHE_DIR"] = str(Path(folder) / "cache")
        running = []
        for job in range(jobs):
            work = Path(folder) / f"job{job}"
            work.mkdir()
            listed = work / "sources.json"
            listed.write_text(json.dumps(sources[job::jobs]))
            command = [sys.executable, __file__, str(listed)]
            running.append(
                subprocess.Popen(
                    command,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        done = [(process, *process.communicate()) for process in running]
    lines = []
    for process, stdout, stderr in done:
        if process.returncode:
            lines.append(f"the compiling process failed:\n{stderr[-3000:]}")
        lines += [line for line in stdout.splitlines() if line]
    return lines


def _compile_all(listed: Path) -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", 90, 32)
    folder = listed.parent
    compiled = set()  # (kernel source, the module around it)
    for i, source in enumerate(json.loads(listed.read_text())):
        path = folder / f"module{i}.py"  # triton.jit reads a kernel's file
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(f"module{i}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        # (helpers have no types comment: compiled inside the kernels calling them)
        kernels = {
            name: (fn, found)
            for name, fn in vars(module).items()
            if isinstance(fn, triton.JITFunction)
            and (found := _TYPES.search(fn.src)) is not None
        }
        # what a kernel may read besides itself: the module without its kernels
        around = source
        for fn, _ in kernels.values():
            around = around.replace(fn.src, "")
        for name, (fn, found) in kernels.items():
            key = (fn.src, around)
            if key in compiled:
                continue
            compiled.add(key)
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

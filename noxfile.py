"""Test, lint, demo and benchmark sessions. ``nox`` alone runs every test session
and lint. Each stage's session installs that stage alone, so the layering is real."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import nox

nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True

TORCH = "torch==2.13.0"  # the CPU build on this team's machines; newer pulls CUDA
TEST_TOOLS = ("pytest", "pytest-xdist==3.8.0", "numpy")
# The long sessions spread their tests over one worker per CPU, each test taken
# by whichever worker is free (tests own their caches and temporary folders).
# On two cores (2026-12-07) the integration tests went from 1105 s to 653, the
# ember tests from 266 to 150, codegen's from 146 to 97 and the Triton session's
# from 548 to 217 (the whole default run from 50.5 to 35 minutes); the short
# stage sessions stay in one process (starting workers that import torch costs
# more than it saves there).
PARALLEL = ("-n", "auto", "--dist", "worksteal")
# Models built from tiny configs (never downloaded); pinned so that the graph and
# break counts the integration tests bound do not move with a new release.
TRANSFORMERS = "transformers==5.24.0"
# torch's OpInfo database (integration_tests/test_opinfo_sweep.py) imports it.
OPINFO_TOOLS = ("expecttest==0.3.0",)
STAGES = ("capture", "aotgrad", "codegen", "runtime")
ALL_PACKAGES = (*STAGES, "ember")

nox.options.sessions = [*STAGES, "ember", "triton", "integration", "lint", "build"]


def install(session: nox.Session, *packages: str, tools=TEST_TOOLS) -> None:
    """torch and the tools first, then the packages with their other dependencies,
    then the ember packages once more, rebuilt from this checkout (a reused
    virtualenv would otherwise keep an older build of the same version)."""
    session.install(TORCH, *tools)
    paths = [f"./packages/{p}" for p in packages]
    session.install(*paths)
    session.install("--no-deps", "--force-reinstall", *paths)


def _stage_session(stage: str):
    @nox.session(name=stage)
    def run(session: nox.Session) -> None:
        install(session, stage)
        others = [f"ember_{s}" for s in STAGES if s != stage] + ["ember"]
        session.run(
            "python",
            "-c",
            "import importlib.util, sys; "
            f"found = [m for m in {others!r} if importlib.util.find_spec(m)]; "
            "sys.exit(f'other ember packages installed: {found}' if found else 0)",
        )
        parallel = PARALLEL if stage == "codegen" else ()
        session.run("pytest", *parallel, f"packages/{stage}/tests", *session.posargs)
        # The README's examples, run with only this stage installed.
        session.run("python", "tools/run_readme.py", f"packages/{stage}/README.md")

    return run


for _stage in STAGES:
    _stage_session(_stage)


@nox.session
def ember(session: nox.Session) -> None:
    """The umbrella's own tests (it needs the four stages). The compile report's
    test renders its page in headless Chromium: Debian's package, installed here
    when it is missing and apt can (else that one test skips, saying why)."""
    install(session, *ALL_PACKAGES)
    if shutil.which("chromium") is None and shutil.which("apt-get") is not None:
        quiet = {"external": True, "success_codes": list(range(256))}
        session.run("apt-get", "update", "-q", **quiet)
        session.run("apt-get", "install", "-y", "-q", "chromium", **quiet)
    session.run("pytest", *PARALLEL, "packages/ember/tests", *session.posargs)
    session.run(
        "python", "tools/run_readme.py", "packages/ember/README.md", "README.md"
    )


# Triton's interpreter runs its kernels on CPU tensors, so the Triton target is
# tested on this machine without a GPU (benchmarks/gpu_check.py runs it on one).
TRITON = "triton==3.9.0"


@nox.session
def triton(session: nox.Session) -> None:
    """The Triton target under Triton's interpreter: codegen's Triton cases and
    the lowering, scatter, update, indexing, layout and repeat tests on the Triton
    target, every kernel they render then compiled for a GPU
    (tests/gpu_compile.py), and the umbrella's demo block and training step."""
    install(session, *ALL_PACKAGES)
    session.install(TRITON)
    codegen = [
        f"packages/codegen/tests/{name}.py"
        for name in (
            "test_triton",
            "test_lowerings",
            "test_scatter",
            "test_updates",
            "test_indexing",
            "test_layouts",
            "test_repeats",
        )
    ]
    session.run(
        "pytest",
        *PARALLEL,
        *codegen,
        "-k",
        "triton",
        *session.posargs,
        env={"TRITON_INTERPRET": "1", "EMBER_TRITON_GPU_COMPILE": "1"},
    )
    session.run(
        "pytest",
        "packages/ember/tests/test_triton_target.py",
        *session.posargs,
        env={"TRITON_INTERPRET": "1"},
    )


@nox.session
def integration(session: nox.Session) -> None:
    install(session, *ALL_PACKAGES)
    session.install(TRANSFORMERS, *OPINFO_TOOLS)
    session.run("pytest", *PARALLEL, "integration_tests", *session.posargs)


@nox.session
def sweep(session: nox.Session) -> None:
    """Every op of torch's OpInfo database with every float32 sample, forward and
    backward, against eager (the integration session runs a fixed fifth of the
    ops, two samples each). Not in the default run: it takes hours."""
    install(session, *ALL_PACKAGES)
    session.install(*OPINFO_TOOLS)
    session.run(
        "pytest",
        "integration_tests/test_opinfo_sweep.py",
        *session.posargs,
        env={"EMBER_OPINFO_SWEEP": "full"},
    )


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, the layering contracts, and the ban on torch's own compiler stack."""
    session.install("ruff==0.17.6", "import-linter==2.17", "pytest")
    session.install(
        "--no-deps", "--force-reinstall", *[f"./packages/{p}" for p in ALL_PACKAGES]
    )
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("lint-imports")
    session.run("python", "tools/check_torch_internals.py", "packages")
    session.run("pytest", "tools/tests")


# What a fresh virtualenv checks after installing the five wheels: that the
# runtime's guards run in C++ from the wheel, and that torch finds the backend.
_INSTALLED = """
import importlib.metadata, ember_runtime
assert ember_runtime.native_available(), "the runtime wheel lacks its C++ guards"
(point,) = importlib.metadata.entry_points(group="torch_dynamo_backends", name="ember")
print("installed:", point.value, "; C++ guards: yes")
"""


@nox.session
def build(session: nox.Session) -> None:
    """An sdist and a wheel of each package (``python -m build``), their metadata
    checked (``twine check``), the wheels installed into a fresh virtualenv (not
    editable), and the demo run there. The wheels are left in ``dist/``."""
    session.install("build", "twine")
    dist = Path("dist").resolve()
    shutil.rmtree(dist, ignore_errors=True)
    for package in ALL_PACKAGES:
        session.run(
            "python", "-m", "build", "--outdir", str(dist), f"packages/{package}"
        )
    built = sorted(str(p) for p in dist.iterdir())
    session.run("twine", "check", "--strict", *built)
    runtime_wheel = next(p for p in built if "ember_runtime" in p and p.endswith("whl"))
    with zipfile.ZipFile(runtime_wheel) as wheel:
        if not any("_guards" in n and n.endswith(".so") for n in wheel.namelist()):
            session.error(f"{runtime_wheel} does not carry the C++ guard extension")
    venv = Path(session.create_tmp()) / "wheels-venv"
    shutil.rmtree(venv, ignore_errors=True)
    session.run("python", "-m", "venv", str(venv))
    python = str(venv / "bin" / "python")
    wheels = [p for p in built if p.endswith(".whl")]
    session.run(
        python, "-m", "pip", "install", "-q", TORCH, "numpy", *wheels, external=True
    )
    session.run(python, "-c", _INSTALLED, external=True)
    session.run(python, "-m", "ember.demo", external=True)


@nox.session
def demo(session: nox.Session) -> None:
    # numpy: without it, importing torch warns that NumPy is missing
    install(session, *ALL_PACKAGES, tools=("numpy",))
    session.run("python", "-m", "ember.demo")


@nox.session
def bench(session: nox.Session) -> None:
    install(session, *ALL_PACKAGES, tools=("numpy",))
    session.run("python", "benchmarks/run.py", *session.posargs)

"""The compile report (``ember.report``, ``python -m ember report``) and the
command line (``python -m ember --help``, ``explain``): the page holds what the
compiles went through, and headless Chromium renders it."""

import os
import re
import shutil
import subprocess
import sys
import textwrap
from html.parser import HTMLParser

import pytest
import torch

import ember

_SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    import ember


    def step(x, w):
        y = (x @ w).relu()
        print("mean", float(y.mean()))
        return y.sum(-1)


    f = ember.compile(step)
    for n in (3, 5):
        f(torch.randn(n, 4), torch.randn(4, 4))
    print("args", sys.argv[1:])
    """
)
BREAK_LINE = 9  # the print in _SCRIPT


class _Text(HTMLParser):
    """The page's text, and the tags it uses."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        if tag in ("script", "link", "img"):
            raise AssertionError(f"the page must stand alone, yet has a <{tag}>")

    def handle_data(self, data):
        self.text.append(data)


def _read(path) -> tuple[str, set[str]]:
    parser = _Text()
    parser.feed(path.read_text())
    return "".join(parser.text), parser.tags


def _run_cli(tmp_path, *args) -> subprocess.CompletedProcess:
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run(
        [sys.executable, "-m", "ember", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )


def test_the_report_context_manager_writes_what_compiling_did(tmp_path):
    def fn(x):
        y = x.sin()
        print("between graphs")
        return y.cos()

    page = tmp_path / "report.html"
    with ember.report(page):
        compiled = ember.compile(fn)
        for n in (3, 4):
            compiled(torch.randn(n))
    text, tags = _read(page)
    line = fn.__code__.co_firstlineno
    assert {"table", "details", "pre"} <= tags
    assert f"fn ({__file__}:{line})" in text  # the summary row
    assert f"{__file__}:{line + 2}: print() inside the compiled function" in text
    assert f'{line + 2}          print("between graphs")' in text  # the source
    assert "L['x']: size changed from [3] to [4]" in text  # the recompile
    assert "L['x'] is Tensor(float32, cpu, size=[3]" in text  # a guard
    assert "torch.sin" in text or "sin()" in text  # a graph
    assert 'extern "C"' in text  # a kernel's source
    assert "c++ build" in text  # the timeline's legend


def test_the_command_line_runs_a_script_with_its_arguments(tmp_path):
    out = _run_cli(tmp_path, "--help")
    assert out.returncode == 0
    for command in ("demo", "explain", "report"):
        assert command in out.stdout
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    out = _run_cli(tmp_path, "report", "-o", "page.html", str(script), "a", "-b")
    assert out.returncode == 0, out.stderr
    assert "args ['a', '-b']" in out.stdout
    assert "wrote the compile report to page.html" in out.stderr
    text, _ = _read(tmp_path / "page.html")
    assert "float() of a tensor reads its value into Python" in text
    out = _run_cli(tmp_path, "explain", str(script))
    assert out.returncode == 0, out.stderr
    assert f"=== step ({script}:7) ===" in out.stdout
    # (the graphs per compile depend on what the report's run left in the cache)
    captured = r"1\. Captured: \d+ of \d+ tensor ops ran in \d graph\(s\) \(\d+%\), "
    assert re.search(captured + "2 as Python", out.stdout)  # float(), twice
    assert f"print() inside the compiled function, at {script}:{BREAK_LINE}" in (
        out.stdout
    )
    assert "3. Recompiles: 1" in out.stdout


def test_the_demo_runs_from_the_command_line(tmp_path):
    out = _run_cli(tmp_path, "demo", "--report", "demo.html")
    assert out.returncode == 0, out.stderr
    for line in ("correct ", "speed ", "compile ", "graphs ", "report "):
        assert f"\n{line}" in out.stdout
    assert "demo.html" in out.stdout and (tmp_path / "demo.html").exists()
    assert "Warning" not in out.stderr  # no warnings of other libraries


def test_headless_chromium_renders_the_page(tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (the nox session installs it)")
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    assert _run_cli(tmp_path, "report", str(script)).returncode == 0
    page = (tmp_path / "ember_report.html").as_uri()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1300,1800"]
    dom = subprocess.run(
        [browser, *flags, "--dump-dom", page],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "ember compile report: train.py" in dom
    assert f"{script}:{BREAK_LINE}" in dom and "Compile timeline" in dom
    shot = tmp_path / "report.png"
    subprocess.run(
        [browser, *flags, f"--screenshot={shot}", page],
        capture_output=True,
        timeout=120,
    )
    assert shot.stat().st_size > 10_000  # a page was drawn, not a blank

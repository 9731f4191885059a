"""ember's log channels (EMBER_LOGS, set_logs) and the word on a slow compile
(docs/configuration.md, "Logs")."""

import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import ember
from ember import progress

_SCRIPT = textwrap.dedent(
    """
    import torch, ember

    def f(x, w):
        y = (x @ w).relu()
        print("break")
        return y.sum()

    c = ember.compile(f)
    w = torch.randn(4, 4, requires_grad=True)
    c(torch.randn(3, 4), w).backward()
    c(torch.randn(5, 4), w).backward()
    """
)


def _run(tmp_path, channels: str) -> str:
    script = tmp_path / "script.py"
    script.write_text(_SCRIPT)
    env = dict(os.environ, EMBER_LOGS=channels, EMBER_CACHE_DIR=str(tmp_path / "c"))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_every_channel_prints_what_it_names(tmp_path):
    err = _run(tmp_path, "all")
    script = tmp_path / "script.py"
    for expected in [
        "[ember.capture] captured f:",
        f"[ember.graph_breaks] graph break in f ({script}:4) at {script}:6: print()",
        f"[ember.recompiles] recompiling f ({script}:4): L['x']: size changed "
        "from [3, 4] to [5, 4]",
        "[ember.guards] guards of f (",
        "L['x'] is Tensor(float32, cpu, size=[3, 4]",
        "[ember.aotgrad] forward graph:",
        "[ember.aotgrad] backward graph:",
        "[ember.output_code] generated code:",
        "[ember.perf] compiled f (",
        "[ember.dynamic] L['x'].size(0) is dynamic: it was 3, now 5",
        "[ember.kernel_cache] kernels ",
    ]:
        assert expected in err, expected
    # the C++ preamble is printed with the first graph's code only
    assert err.count("#include <cstdint>") == 1
    assert "(the C++ preamble, as logged with the first graph)" in err
    # DEBUG detail only with a +
    assert "traced aten graph" not in err


def test_plus_adds_the_debug_detail_and_names_are_checked(tmp_path):
    err = _run(tmp_path, "+aot_graphs, perf")
    assert "[ember.aotgrad] traced aten graph:" in err
    assert "[ember.perf] compiled f" in err
    assert "[ember.capture]" not in err and "[ember.guards]" not in err
    err = _run(tmp_path, "recompile")
    assert "EMBER_LOGS names unknown log 'recompile'; valid logs: graph, " in err


def test_set_logs_turns_channels_on_and_off():
    logger = logging.getLogger("ember.graph_breaks")
    try:
        ember.set_logs(all=True, perf=False)
        assert logger.isEnabledFor(logging.INFO)
        assert not logging.getLogger("ember.perf").isEnabledFor(logging.INFO)
        ember.set_logs(aten=logging.DEBUG)  # the earlier name of aot_graphs
        assert logging.getLogger("ember.aotgrad").isEnabledFor(logging.DEBUG)
        with pytest.raises(ValueError, match="unknown log 'graphs'"):
            ember.set_logs(graphs=True)
    finally:
        ember.set_logs(all=False)
    assert not logger.isEnabledFor(logging.INFO)


def test_a_slow_compile_says_so_once(monkeypatch, caplog):
    monkeypatch.setattr(progress, "SLOW_COMPILE_SECONDS", 0.0)

    def f(x):
        return x.exp() + 1

    with caplog.at_level(logging.WARNING, logger="ember.progress"):
        ember.compile(f)(torch.randn(3))
    said = [r.getMessage() for r in caplog.records if r.name == "ember.progress"]
    assert len(said) == 1
    assert said[0].startswith("ember: compiling test_a_slow_compile_says_so_once.")
    assert "s so far, now in capture" in said[0]

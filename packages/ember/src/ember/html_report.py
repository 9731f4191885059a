"""The compile report: every ``ember.compile`` made inside ``ember.report(path)``
(or ``python -m ember report SCRIPT``) written as one self-contained HTML page:
a summary table, then per compiled function its compile timeline, graph breaks
with the user's source around them, recompiles, guards, graphs and kernels."""

from __future__ import annotations

import linecache
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from . import api
from .backends import CompileLog, CompileRecord
from .convert import BreakReason, function_name

# One colour per compile stage in the timeline (others get the last one).
_STAGE_COLOURS = {
    "capture": "#4e79a7",
    "cache_key": "#bab0ac",
    "cache_load": "#9c755f",
    "aotgrad": "#f28e2b",
    "codegen": "#59a14f",
    "c++ build": "#8cd17d",
    "cache_store": "#b07aa1",
}
_OTHER_COLOUR = "#e15759"


@dataclass(frozen=True)
class Compiled:
    """What one ``ember.compile`` call made and went through."""

    name: str
    log: CompileLog
    breaks: list[BreakReason]


class Recorder:
    """Keeps each ``ember.compile`` made while it listens (api.py calls it)."""

    def __init__(self) -> None:
        self.compiled: list[Compiled] = []

    def __call__(self, name: str, log: CompileLog, breaks: list[BreakReason]) -> None:
        self.compiled.append(Compiled(name, log, breaks))


@contextmanager
def recording() -> Iterator[Recorder]:
    """Every ``ember.compile`` made inside the block, in order."""
    recorder = Recorder()
    api.COMPILE_LISTENERS.append(recorder)
    try:
        yield recorder
    finally:
        api.COMPILE_LISTENERS.remove(recorder)


@contextmanager
def report(path: str | Path, title: str = "ember compile report") -> Iterator[None]:
    """``with ember.report("report.html"):`` records every ``ember.compile``
    made in the block and, at its end, writes one HTML page about them (no
    scripts, no files beside it: readable offline)."""
    with recording() as recorder:
        try:
            yield
        finally:
            Path(path).write_text(render(recorder.compiled, title))


def render(compiled: list[Compiled], title: str) -> str:
    """The HTML page for these compiled functions."""
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p class=note>{len(compiled)} compiled function(s), written "
        f"{_e(time.strftime('%Y-%m-%d %H:%M:%S'))}</p>",
        _summary(compiled),
    ]
    parts += [_section(i, c) for i, c in enumerate(compiled)]
    parts.append("</body></html>")
    return "\n".join(parts)


def _summary(compiled: list[Compiled]) -> str:
    rows = []
    for i, c in enumerate(compiled):
        counters = [d.counters for d in c.log.dispatchers]
        recompiles = sum(len(d.recompile_reasons) for d in c.log.dispatchers)
        seconds = sum(r.total for r in c.log.compiles)
        cells = [
            f'<a href="#f{i}">{_e(c.name)}</a>',
            sum(k.calls for k in counters),
            sum(k.compiles for k in counters),
            len(c.log.graphs),
            len(c.breaks),
            recompiles,
            f"{seconds:.2f}",
            _e(", ".join(sorted(c.log.fallback_ops)) or "none"),
        ]
        rows.append("<tr>" + "".join(f"<td>{v}</td>" for v in cells) + "</tr>")
    head = "".join(
        f"<th>{h}</th>"
        for h in [
            "compiled",
            "calls",
            "compiles",
            "graphs",
            "graph breaks",
            "recompiles",
            "compile s",
            "ops run by torch",
        ]
    )
    return f"<table class=summary><tr>{head}</tr>{''.join(rows)}</table>"


def _section(i: int, c: Compiled) -> str:
    log = c.log
    parts = [f'<section id="f{i}"><h2>{_e(c.name)}</h2>']
    parts.append("<h3>Compile timeline</h3>" + _timeline(log.compiles))
    parts.append(f"<h3>Graph breaks ({len(c.breaks)})</h3>")
    parts += [_break(b) for b in c.breaks] or ["<p class=note>none</p>"]
    reasons = [
        f"{function_name(d.fn)}: {r}"
        for d in log.dispatchers
        for r in d.recompile_reasons
    ]
    parts.append(f"<h3>Recompiles ({len(reasons)})</h3>")
    parts.append(_list(reasons + [f"dynamic: {r}" for r in log.dynamic_reasons]))
    parts.append("<h3>Guards</h3>")
    parts += [
        _details(f"compile {k}: {r.function}", "\n".join(r.guards))
        for k, r in enumerate(log.compiles)
    ]
    parts.append(f"<h3>Graphs ({len(log.graphs)})</h3>")
    parts += [
        _details(f"graph {k}: {frame}", gm.code.strip())
        for k, (frame, gm) in enumerate(zip(log.graph_frames, log.graph_modules()))
    ]
    if log.eager_graph_reasons:
        parts.append(_list([f"run by torch: {r}" for r in log.eager_graph_reasons]))
    parts.append(f"<h3>Generated code ({len(log.generated_code)})</h3>")
    parts += [
        _details(f"compiled graph {k}: {_first_line(code)}", code)
        for k, code in enumerate(log.generated_code)
    ]
    parts.append("</section>")
    return "\n".join(parts)


def _timeline(records: list[CompileRecord]) -> str:
    """A bar per compile, its stages in proportion; when it started, from the
    first compile."""
    if not records:
        return "<p class=note>no compiles</p>"
    longest = max(r.total for r in records) or 1.0
    start = records[0].started
    rows = []
    for r in records:
        segments = "".join(
            f'<span class=seg title="{_e(stage)} {t:.3f} s" style="width:'
            f"{100 * t / longest:.2f}%;background:"
            f'{_STAGE_COLOURS.get(stage, _OTHER_COLOUR)}"></span>'
            for stage, t in r.stages().items()
        )
        label = (
            f"+{r.started - start:.2f} s &nbsp; <b>{r.total:.3f} s</b> &nbsp; "
            f"{_e(r.function)}"
        )
        rows.append(
            f'<div class=row><div class=label title="{_e(r.function)}">{label}</div>'
        )
        rows.append(f"<div class=bar>{segments}</div></div>")
    legend = "".join(
        f'<span class=key style="background:{c}"></span>{_e(s)} '
        for s, c in _STAGE_COLOURS.items()
    )
    return f"<div class=timeline>{''.join(rows)}</div><p class=legend>{legend}</p>"


def _break(b: BreakReason) -> str:
    """The reason, and the user's source around the line it names."""
    text = f"<p class=break><b>{_e(b.location)}</b>: {_e(b.reason)}</p>"
    filename, _, line = b.location.rpartition(":")
    if not line.isdigit():
        return text
    lineno = int(line)
    shown = []
    for n in range(max(lineno - 3, 1), lineno + 4):
        source = linecache.getline(filename, n)
        if not source:
            continue
        mark = " here" if n == lineno else ""
        shown.append(f'<span class="line{mark}">{n:5d}  {_e(source.rstrip())}</span>')
    return text + (f"<pre class=source>{''.join(shown)}</pre>" if shown else "")


def _details(summary: str, body: str) -> str:
    return f"<details><summary>{_e(summary)}</summary><pre>{_e(body)}</pre></details>"


def _list(items: list[str]) -> str:
    if not items:
        return "<p class=note>none</p>"
    return "<ul>" + "".join(f"<li>{_e(i)}</li>" for i in items) + "</ul>"


def _first_line(code: str) -> str:
    lines = code.splitlines()
    return lines[1].lstrip("# ") if len(lines) > 1 else ""


def _e(text: object) -> str:
    import html  # (here: only a report needs it, not ``import ember``)

    return html.escape(str(text))


_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em;
  color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { border-top: 2px solid #ddd; padding-top: .8em; }
h3 { font-size: 1.05em; margin-bottom: .3em; }
.note { color: #777; }
table.summary { border-collapse: collapse; width: 100%; }
table.summary td, table.summary th { border: 1px solid #ccc; padding: .3em .6em;
  text-align: left; }
table.summary th { background: #f3f3f3; }
pre { background: #f7f7f7; padding: .6em; overflow-x: auto; font-size: 12px; }
pre.source .line { display: block; }
pre.source .here { background: #ffe08a; }
details { margin: .2em 0; } summary { cursor: pointer; font-family: monospace; }
.timeline .row { display: flex; align-items: center; margin: .2em 0; }
.timeline .label { width: 30em; font-size: 12px; white-space: nowrap;
  overflow: hidden; text-overflow: ellipsis; }
.timeline .bar { flex: 1; display: flex; height: 1.1em; background: #fafafa; }
.timeline .seg { display: inline-block; height: 100%; }
.legend .key { display: inline-block; width: .9em; height: .9em;
  margin: 0 .3em 0 .8em; vertical-align: middle; }
"""

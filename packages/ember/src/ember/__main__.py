"""``python -m ember``: the demo, and a user's script run with every
``ember.compile`` in it explained (``explain``) or written up as an HTML page
(``report``)."""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ember",
        description="ember: compile PyTorch programs, and see what compiling did.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo", help="compile a transformer block and show the result"
    )
    demo.add_argument("--report", help="where to write the demo's compile report")
    for name, what in [
        ("explain", "run SCRIPT, then print the explain of every function it compiled"),
        ("report", "run SCRIPT, then write an HTML page about every compile in it"),
    ]:
        command = commands.add_parser(name, help=what, description=what)
        if name == "report":
            command.add_argument(
                "-o",
                "--output",
                default="ember_report.html",
                help="the page to write (default: ember_report.html)",
            )
        command.add_argument("script", metavar="SCRIPT.py", help="the script to run")
        command.add_argument(
            "args", nargs=argparse.REMAINDER, help="the script's own arguments"
        )
    options = parser.parse_args(argv)
    if options.command is None:
        parser.print_help()
        return 2
    if options.command == "demo":
        from .demo import main as run_demo

        run_demo(["--report", options.report] if options.report else [])
        return 0
    if options.command == "explain":
        return _explain(options.script, options.args)
    return _report(options.script, options.args, Path(options.output))


def _explain(script: str, args: list[str]) -> int:
    from .explain import counting_ops, from_log
    from .html_report import recording

    with recording() as recorder, counting_ops() as python:
        code = _run(script, args)
    for compiled in recorder.compiled:
        print(f"\n=== {compiled.name} ===")
        print(from_log(compiled.log, compiled.breaks, python, others=False))
    if not recorder.compiled:
        print(f"{script} called ember.compile nowhere")
    return code


def _report(script: str, args: list[str], output: Path) -> int:
    from .html_report import report

    with report(output, f"ember compile report: {Path(script).name}"):
        code = _run(script, args)
    print(f"ember: wrote the compile report to {output}", file=sys.stderr)
    return code


def _run(script: str, args: list[str]) -> int:
    """Run ``script`` as ``python script args`` would; its exit status. A
    script that raises has its traceback printed and status 1, and what it
    compiled until then is still reported."""
    if not os.path.isfile(script):
        print(f"python -m ember: no such script: {script}", file=sys.stderr)
        return 2
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        return _status(e.code)
    except BaseException:
        traceback.print_exc()
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return 0


def _status(code: object) -> int:
    """``sys.exit(code)``'s status; a message is printed, as Python does."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())

"""Run the examples of a README and check what they print, so the docs cannot rot.

Each ```python block is a script of its own, run by a new Python in an empty
folder (with a private EMBER_CACHE_DIR). When a ```text block follows it (blank
lines between are allowed), the script's output must equal that block, less
trailing spaces and with the folder's path written ``<tmp>`` and without
ember's notice of a slow compile (whether a compile passes 2 s depends on the
machine, not on the example); a block with no output after it must only run
without error. Each package's nox session runs its
own README with only that package installed. Usage:

    python tools/run_readme.py README.md...           # check
    python tools/run_readme.py --update README.md...  # write the outputs instead
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# A fence line, with the language and any info string after it.
_FENCE = re.compile(r"^```(\w*).*$")

# ember's progress notice (ember/progress.py), printed when a compile passes 2 s.
_SLOW_COMPILE = re.compile(r"^ember: compiling .* is taking a while \(.*\)$")


@dataclass(frozen=True)
class Block:
    language: str
    first: int  # index of the line after the opening fence
    last: int  # index of the closing fence

    def text(self, lines: list[str]) -> str:
        return "".join(lines[self.first : self.last])


@dataclass(frozen=True)
class Example:
    code: Block
    output: Block | None


def examples(lines: list[str]) -> list[Example]:
    """The python blocks of a markdown file, each with the text block after it."""
    blocks: list[Block] = []
    opened: tuple[str, int] | None = None
    for i, line in enumerate(lines):
        match = _FENCE.match(line)
        if match is None:
            continue
        if opened is None:
            opened = (match.group(1), i + 1)
        else:
            blocks.append(Block(opened[0], opened[1], i))
            opened = None
    if opened is not None:
        raise ValueError(f"a code block opened at line {opened[1]} is not closed")
    found = []
    for i, block in enumerate(blocks):
        if block.language != "python":
            continue
        after = blocks[i + 1] if i + 1 < len(blocks) else None
        between = lines[block.last + 1 : after.first - 1] if after else []
        adjacent = after is not None and after.language == "text"
        found.append(
            Example(block, after if adjacent and not "".join(between).strip() else None)
        )
    return found


def run(code: str) -> str:
    """What ``code`` prints (stdout and stderr, in order) run as a script in a
    new folder."""
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder, "example.py")
        script.write_text(code)
        # Unbuffered, into one stream: warnings and prints in the order made.
        env = dict(
            os.environ,
            EMBER_CACHE_DIR=str(Path(folder, "cache")),
            PYTHONUNBUFFERED="1",
        )
        try:
            done = subprocess.run(
                [sys.executable, "example.py"],
                cwd=folder,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=600,
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the example ran over 600 s:\n{code}") from None
        output = done.stdout.replace(os.path.realpath(folder), "<tmp>")
        output = output.replace(folder, "<tmp>")
    if done.returncode != 0:
        raise RuntimeError(f"the example failed:\n{code}\n{output}")
    return "".join(
        line.rstrip() + "\n"
        for line in output.splitlines()
        if not _SLOW_COMPILE.match(line)
    )


def check(path: Path, update: bool) -> list[str]:
    """Problems found in ``path``'s examples (with --update: none, and the
    output blocks rewritten)."""
    lines = path.read_text().splitlines(keepends=True)
    problems = []
    replacements: list[tuple[Block, str]] = []
    for example in examples(lines):
        start = example.code.first
        try:
            got = run(example.code.text(lines))
        except RuntimeError as e:
            problems.append(f"{path}:{start}: {e}")
            continue
        if example.output is None:
            continue
        want = example.output.text(lines)
        if update:
            replacements.append((example.output, got))
        elif got != want:
            diff = difflib.unified_diff(
                want.splitlines(), got.splitlines(), "README", "printed", lineterm=""
            )
            problems.append(
                f"{path}:{start}: the example printed something else:\n"
                + "\n".join(diff)
            )
    for block, text in reversed(replacements):
        lines[block.first : block.last] = [text]
    if update:
        path.write_text("".join(lines))
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("readmes", nargs="+", type=Path)
    parser.add_argument("--update", action="store_true")
    args = parser.parse_args()
    problems = [p for path in args.readmes for p in check(path, args.update)]
    for problem in problems:
        print(problem, file=sys.stderr)
    count = sum(len(examples(p.read_text().splitlines(True))) for p in args.readmes)
    print(f"{count} examples, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

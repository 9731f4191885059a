"""Fail when code under the given folders reaches into torch's own compiler stack.

ember builds capture, aotgrad, codegen and guards itself (../shared/DESIGN.md), so
packages/ must not use torch._dynamo, torch._inductor, torch.compile and the rest:
not by import, not by attribute access on an imported torch, and not by a string
handed to importlib or __import__. Test folders are skipped (tests may call
torch.compile as a reference). Usage: python tools/check_torch_internals.py DIR...
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

FORBIDDEN = (
    "torch._dynamo",
    "torch._inductor",
    "torch._functorch",
    "torch._decomp",
    "torch._refs",
    "torch._prims",
    "torch._subclasses",
    "torch._guards",
    "torch._export",
    "torch.export",
    "torch.jit",
    "torch.fx.experimental",
    "torch.compile",
    "torch.func.functionalize",
    "functorch",
)
_PATTERN = re.compile(r"^(" + "|".join(re.escape(f) for f in FORBIDDEN) + r")(\.|$)")


def forbidden(dotted: str) -> bool:
    return bool(_PATTERN.match(dotted))


class _Checker(ast.NodeVisitor):
    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}  # local name -> module it names
        self.problems: list[tuple[int, str]] = []

    def report(self, node: ast.AST, what: str) -> None:
        self.problems.append((node.lineno, what))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if forbidden(alias.name):
                self.report(node, f"import {alias.name}")
            local = alias.asname or alias.name.split(".")[0]
            self.aliases[local] = alias.name if alias.asname else local

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        for alias in node.names:
            full = f"{module}.{alias.name}" if module else alias.name
            if forbidden(module) or forbidden(full):
                self.report(node, f"from {module} import {alias.name}")
            self.aliases[alias.asname or alias.name] = full

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = _dotted(node, self.aliases)
        if dotted and forbidden(dotted):
            self.report(node, dotted)
            return  # report the longest chain once
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and forbidden(node.value.strip()):
            self.report(node, f"string {node.value!r}")


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(parts)])


def check_file(path: Path) -> list[str]:
    checker = _Checker()
    checker.visit(ast.parse(path.read_text(), filename=str(path)))
    return [f"{path}:{line}: uses {what}" for line, what in sorted(checker.problems)]


def main(folders: list[str]) -> int:
    problems = []
    for folder in folders:
        for path in sorted(Path(folder).rglob("*.py")):
            if "tests" in path.parts:
                continue
            problems += check_file(path)
    for p in problems:
        print(p)
    if problems:
        print(
            f"{len(problems)} use(s) of torch's compiler stack; ember builds these "
            "itself (see DESIGN.md)"
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["packages"]))

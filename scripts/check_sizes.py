"""Lists the Python modules of `engine/` over a line budget and the functions over a length
budget, so a module or function that outgrows what one reader holds in mind is split.

    .venv/bin/python scripts/check_sizes.py [--module-lines 800] [--function-lines 60] [PATH...]

A function's length counts its lines from `def` (decorators included) to its last line,
docstring included; nested functions count within their parent and on their own. Cython
sources are not parsed (their compilation units are split by concept, see `_native/`).
Exit status 1 when something is over budget, 0 otherwise.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def oversized(paths: list[Path], module_lines: int, function_lines: int) -> list[str]:
    """One line per module or function over its budget, largest first within each kind."""
    modules, functions = [], []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n") + (not text.endswith("\n"))
        name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        if lines > module_lines:
            modules.append((lines, f"{name}: {lines} lines (module budget {module_lines})"))
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                length = node.end_lineno - start + 1
                if length > function_lines:
                    functions.append((length, f"{name}:{start}: {node.name} is {length} lines "
                                              f"(function budget {function_lines})"))
    return [m for _, m in sorted(modules, reverse=True)] + \
        [f for _, f in sorted(functions, reverse=True)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module-lines", type=int, default=800)
    parser.add_argument("--function-lines", type=int, default=60)
    parser.add_argument("paths", nargs="*", type=Path, help="files or directories "
                        "(default: engine/)")
    args = parser.parse_args(argv)
    files: list[Path] = []
    for path in args.paths or [ROOT / "engine"]:
        path = path.resolve()
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    found = oversized(files, args.module_lines, args.function_lines)
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

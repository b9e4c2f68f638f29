"""Lists the Python modules of `engine/` over a line budget and the functions over a length
budget, so a module or function that outgrows what one reader holds in mind is split.

    .venv/bin/python scripts/check_sizes.py [--module-lines 800] [--function-lines 60] [PATH...]

A function's length counts its lines from `def` (decorators included) to its last line,
docstring included; nested functions count within their parent and on their own. Cython
sources are not parsed (their compilation units are split by concept, see `_native/`).
Exit status 1 when something is over budget, 0 otherwise.

`ALLOWED` holds the modules and functions known to be over budget, each capped at its
recorded size: one that grows past its cap fails, and one back within budget is reported
as stale so the entry is removed. The list only shrinks.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (path under the root, function name or None for the module) -> lines allowed
ALLOWED: dict[tuple[str, str | None], int] = {}


def oversized(paths: list[Path], module_lines: int, function_lines: int,
              allowed: dict[tuple[str, str | None], int] | None = None) -> list[str]:
    """One line per module or function over its budget and over its `allowed` cap, largest
    first within each kind, then one per `allowed` entry of a checked file that is within
    budget again (stale)."""
    allowed = ALLOWED if allowed is None else allowed
    modules, functions, within = [], [], set()
    for path in paths:
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n") + (not text.endswith("\n"))
        name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        key = name.as_posix()
        within.update((k, f) for k, f in allowed if k == key)
        if lines > module_lines:
            within.discard((key, None))
            if lines > allowed.get((key, None), module_lines):
                modules.append((lines, f"{name}: {lines} lines (module budget {module_lines})"))
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                length = node.end_lineno - start + 1
                if length > function_lines:
                    within.discard((key, node.name))
                    if length > allowed.get((key, node.name), function_lines):
                        functions.append((length, f"{name}:{start}: {node.name} is {length} "
                                                  f"lines (function budget {function_lines})"))
    stale = [f"{k}{'' if f is None else ' ' + f}: within budget, remove it from ALLOWED"
             for k, f in sorted(within, key=lambda e: (e[0], e[1] or ""))]
    return [m for _, m in sorted(modules, reverse=True)] + \
        [f for _, f in sorted(functions, reverse=True)] + stale


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

"""Lists the modules of `engine/` and the Cython sources of `_native/` over a line budget and
their functions over a length budget, so a module or function that outgrows what one reader
holds in mind is split.

    .venv/bin/python scripts/check_sizes.py [--module-lines 800] [--function-lines 60] [PATH...]

A function's length counts its lines from `def` (decorators included) to its last line,
docstring included; nested functions count within their parent and on their own. In a .pyx
file `def`, `cdef` and `cpdef` functions and methods count alike (a body ends at the first
line indented no deeper than its `def` outside brackets and strings). A .pyx module is held
to the same line budget: one too long is split by concept into modules that share C-level
declarations through a .pxd (see `_native/records.pyx`).
Exit status 1 when something is over budget, 0 otherwise.

`ALLOWED` holds the modules and functions known to be over budget, each capped at its
recorded size: one that grows past its cap fails, and one back within budget is reported
as stale so the entry is removed. The list only shrinks.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Iterator
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
        found = _cython_functions(text) if path.suffix == ".pyx" else \
            _python_functions(text, path)
        functions += _over(key, name, found, function_lines, allowed, within)
    stale = [f"{k}{'' if f is None else ' ' + f}: within budget, remove it from ALLOWED"
             for k, f in sorted(within, key=lambda e: (e[0], e[1] or ""))]
    return [m for _, m in sorted(modules, reverse=True)] + \
        [f for _, f in sorted(functions, reverse=True)] + stale


def _over(key: str, name: Path | str, found: Iterator[tuple[str, int, int]],
          function_lines: int, allowed: dict[tuple[str, str | None], int],
          within: set[tuple[str, str | None]]) -> list[tuple[int, str]]:
    """(length, line) for each (function, first line, length) over budget and over its cap;
    drops those over budget from `within`."""
    over = []
    for func, start, length in found:
        if length > function_lines:
            within.discard((key, func))
            if length > allowed.get((key, func), function_lines):
                over.append((length, f"{name}:{start}: {func} is {length} lines "
                                     f"(function budget {function_lines})"))
    return over


def _python_functions(text: str, path: Path) -> Iterator[tuple[str, int, int]]:
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            yield node.name, start, node.end_lineno - start + 1


# A function's first line in Cython: def/cdef/cpdef, then for cdef/cpdef modifiers and a
# return type, then the name and its opening parenthesis. A declaration (`cdef int x = f(1)`)
# has an `=` before the parenthesis and no body, so it never matches with a colon at the end.
_CY_DEF = re.compile(r"^(?P<indent>[ \t]*)(?:async[ \t]+)?(?:def|cpdef|cdef)[ \t]+"
                     r"(?!(?:class|struct|union|enum|extern|ctypedef|fused|packed|public|readonly)"
                     r"\b)[^=(:#]*?(?P<name>\w+)[ \t]*\(")


def _cython_lines(text: str) -> list[bool]:
    """Per line of a .pyx text: whether it begins inside a string or brackets (a
    continuation, which neither starts nor ends a function)."""
    inside, depth, quote, i, n = [False], 0, "", 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            inside.append(bool(quote) or depth > 0)
            if quote in ("'", '"'):
                quote = ""  # an unterminated one-line string ends with its line
        elif quote:
            if ch == "\\":
                i += 1
            elif text.startswith(quote, i):
                i += len(quote) - 1
                quote = ""
        elif ch == "#":
            while i + 1 < n and text[i + 1] != "\n":
                i += 1
        elif ch in "'\"":
            quote = text[i:i + 3] if text[i:i + 3] in ("\"\"\"", "'''") else ch
            i += len(quote) - 1
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        i += 1
    return inside


def _cython_functions(text: str) -> Iterator[tuple[str, int, int]]:
    """(name, first line, length) of every def, cdef and cpdef function with a body."""
    lines = text.splitlines()
    continuation = _cython_lines(text)
    for number, line in enumerate(lines):
        match = _CY_DEF.match(line)
        if match is None or continuation[number]:
            continue
        indent = len(match["indent"].expandtabs())
        body, last = number + 1, number
        while body < len(lines) and continuation[body]:  # the rest of the signature
            body += 1
        signature = "\n".join(lines[number:body]).split("#")[0].rstrip()
        if not signature.endswith(":") and not re.search(r"\)[^()]*:[ \t]*\S", signature):
            continue  # a declaration (a .pxd's, or a cdef variable), not a one-line function
        for later in range(body, len(lines)):
            stripped = lines[later].strip()
            if not stripped or (stripped.startswith("#") and not continuation[later]):
                continue
            if not continuation[later] and \
                    len(lines[later]) - len(lines[later].lstrip()) <= indent:
                break
            last = later
        start = number
        while start > 0 and lines[start - 1].strip().startswith("@"):
            start -= 1
        yield match["name"], start + 1, last - start + 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module-lines", type=int, default=800)
    parser.add_argument("--function-lines", type=int, default=60)
    parser.add_argument("paths", nargs="*", type=Path, help="files or directories "
                        "(default: engine/ and _native/)")
    args = parser.parse_args(argv)
    files: list[Path] = []
    for path in args.paths or [ROOT / "engine", ROOT / "_native"]:
        path = path.resolve()
        files += sorted(path.rglob("*.py")) + sorted(path.rglob("*.pyx")) if path.is_dir() \
            else [path]
    found = oversized(files, args.module_lines, args.function_lines)
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

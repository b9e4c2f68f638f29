"""scripts/check_sizes.py: the module and function budgets .ci/run holds engine/ to, and its
ALLOWED caps, which let a known oversized module or function stay but never grow."""

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_sizes.py"


def _script():
    spec = importlib.util.spec_from_file_location("check_sizes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _function(path: Path, name: str, body_lines: int) -> None:
    path.write_text(f"def {name}():\n" + "    x = 1\n" * body_lines)


def test_engine_is_within_budget():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout) == (0, "")


def test_over_budget_fails_naming_the_function(tmp_path):
    _function(tmp_path / "m.py", "long", 10)
    done = subprocess.run([sys.executable, str(SCRIPT), "--function-lines", "5",
                           str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stdout == f"{tmp_path / 'm.py'}:1: long is 11 lines (function budget 5)\n"


def test_allowed_caps_hold_until_growth_and_go_stale(tmp_path):
    check = _script()
    path = tmp_path / "m.py"
    cap = {(path.as_posix(), "long"): 11}
    _function(path, "long", 10)
    assert check.oversized([path], 800, 5, cap) == []
    _function(path, "long", 11)
    assert check.oversized([path], 800, 5, cap) == [
        f"{path}:1: long is 12 lines (function budget 5)"]
    _function(path, "long", 3)
    assert check.oversized([path], 800, 5, cap) == [
        f"{path.as_posix()} long: within budget, remove it from ALLOWED"]


def _cython(path: Path, body_lines: int) -> None:
    """A .pyx with a short def, a long cdef function (signature over two lines, a docstring
    and a nested block) and declarations that are not functions."""
    path.write_text(
        "cdef int LIMIT = max(1, 2)\n"
        "cdef extern from \"x.h\" nogil:\n"
        "    int ext(int a)\n\n\n"
        "def short(x): return x\n\n\n"
        "cdef inline int long_one(int a,\n"
        "                         int b) noexcept nogil:\n"
        "    \"\"\"Doc.\n"
        "def not_a_function(): this is docstring text\n"
        "    \"\"\"\n"
        "    cdef int c = ext(a)\n"
        "    if c:\n" + "        c += 1\n" * body_lines +
        "    return c\n\n\n"
        "cdef class Holder:\n"
        "    cdef int value\n\n"
        "    cdef int get(self) except -1:\n"
        "        return self.value\n")


def test_cython_function_over_budget_fails_naming_it(tmp_path):
    _cython(tmp_path / "m.pyx", 10)
    done = subprocess.run([sys.executable, str(SCRIPT), "--function-lines", "12",
                           str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stdout == f"{tmp_path / 'm.pyx'}:9: long_one is 18 lines (function budget 12)\n"


def test_cython_functions_are_found_and_measured(tmp_path):
    path = tmp_path / "m.pyx"
    _cython(path, 3)
    found = list(_script()._cython_functions(path.read_text()))
    assert found == [("short", 6, 1), ("long_one", 9, 11), ("get", 25, 2)]


def test_cython_module_over_budget_fails_naming_it(tmp_path):
    path = tmp_path / "m.pyx"
    _cython(path, 10)  # 33 lines, every function within the budget below
    done = subprocess.run([sys.executable, str(SCRIPT), "--module-lines", "30",
                           "--function-lines", "60", str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout) == (1, f"{path}: 33 lines (module budget 30)\n")
    assert _script().oversized([path], 33, 60) == []

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

"""The layer rule of the architecture (README, "Layers"), enforced: every import of every module
under engine/ (module level, function level, TYPE_CHECKING blocks alike, read with ast) goes
to its own layer or a lower one, no face (protocol, spark, arrow) imports another, and no
two modules import each other, directly or through others."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "engine"

#: the layers, lowest first: a module may import its own layer and lower ones
LAYERS = {
    "engine._native": 1,
    "engine.errors": 2, "engine.config": 2, "engine.checksums": 2, "engine.common": 2,
    "engine.message_codec": 2,
    "engine.records": 3,
    "engine.log": 4,
    "engine.remote": 5,
    "engine.rlm": 6,
    "engine.scan": 7,
    "engine.protocol": 8, "engine.spark": 8, "engine.arrow": 8,
    "engine.cli": 9, "engine.__main__": 9,
}
#: the faces (layer 8): each reads through the layers below it, never through another face
FACES = ("engine.protocol", "engine.spark", "engine.arrow")

def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int | None:
    """The layer of an engine module (None for `engine` itself, the package root)."""
    owners = [prefix for prefix in LAYERS if module == prefix or module.startswith(prefix + ".")]
    return LAYERS[max(owners, key=len)] if owners else None


def _modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ENGINE.rglob("*.py"))}


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The engine modules `module` imports anywhere in its file. `from pkg import name`
    counts as an import of `pkg.name` when that is a module, else of `pkg`."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {name for name in found if name == "engine" or name.startswith("engine.")}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {m: imports_of(m, p, known) - {m} for m, p in modules.items()}


def test_every_engine_module_has_a_layer(graph):
    assert len(graph) > 60
    assert [m for m in graph if m != "engine" and layer_of(m) is None] == []


def test_no_module_imports_a_higher_layer(graph):
    upward = []
    for importer, targets in graph.items():
        low = layer_of(importer)
        for target in targets:
            high = layer_of(target)
            if low is None or high is None or high <= low:
                continue
            upward.append(f"{importer} (layer {low}) imports {target} (layer {high})")
    assert upward == []


def face_of(module: str) -> str | None:
    return next((f for f in FACES if module == f or module.startswith(f + ".")), None)


def test_no_face_imports_another(graph):
    crossing = [f"{importer} imports {target}" for importer, targets in sorted(graph.items())
                for target in sorted(targets)
                if face_of(importer) and face_of(target) not in (None, face_of(importer))]
    assert crossing == []


def test_the_face_rule_sees_a_crossing():
    assert face_of("engine.arrow.reader") == "engine.arrow"
    assert face_of("engine.spark") == "engine.spark"
    assert face_of("engine.scan.tier") is None and face_of("engine.sparkle") is None


#: run in a fresh interpreter: pyspark unimportable, then every engine.scan module imported
_IMPORT_WITHOUT_PYSPARK = """
import importlib, sys

class NoPyspark:
    def find_spec(self, name, path=None, target=None):
        if name == "pyspark" or name.startswith("pyspark."):
            raise ImportError(f"{name} is made unimportable")

sys.meta_path.insert(0, NoPyspark())
for name in sys.argv[1:]:
    importlib.import_module(name)
try:
    importlib.import_module("engine.spark.source")  # the guard works: the face needs pyspark
except ImportError:
    print("ok")
"""


def test_the_scan_core_imports_without_pyspark():
    """engine.scan is the pyspark-free core under the Spark and Arrow faces: no import of
    pyspark anywhere in its files (function level too), and every module of it imports in
    an interpreter where pyspark cannot be imported."""
    modules = sorted(m for m in _modules() if m == "engine.scan" or m.startswith("engine.scan."))
    assert len(modules) > 5
    named = []
    for module in modules:
        path = _modules()[module]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            named += [f"{module}:{node.lineno}" for n in names if n.split(".")[0] == "pyspark"]
    assert named == []
    out = subprocess.run([sys.executable, "-c", _IMPORT_WITHOUT_PYSPARK, *modules], cwd=ROOT,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ok"]


def test_the_native_layer_imports_nothing_above_it():
    """_native/*.pyx, .pxd and .pxi (compiled, so not in the graph) import only
    engine._native from the engine."""
    imported = set()
    for path in sorted((ROOT / "_native").glob("*.p[yx][xdi]")):
        for line in path.read_text().splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] in ("import", "from", "cimport"):
                imported.add((path.name, words[1]))
    engine = {(f, m) for f, m in imported if m == "engine" or m.startswith("engine.")}
    assert engine, "the native modules import their errors from engine._native.errors"
    assert {(f, m) for f, m in engine if not m.startswith("engine._native")} == set()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next((c for c in children if c in graph), None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_no_import_cycle_between_modules(graph):
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


#: the names of engine.common that modules above it once re-exported
COMMON_NAMES = {"Uuid", "TopicPartition", "fsync_dir", "write_file_atomically"}


def test_the_shared_basics_are_imported_from_engine_common():
    """Uuid, TopicPartition and the atomic writes are engine.common's (layer 2): the engine,
    the tests and the benchmarks import them from there, never through a module that happens
    to use them (engine.log.checkpoint once re-exported them)."""
    wrong = []
    for folder in ("engine", "tests", "bench", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.ImportFrom) or node.module == "engine.common":
                    continue
                if not node.level and not (node.module or "").startswith("engine"):
                    continue
                names = sorted({alias.name for alias in node.names} & COMMON_NAMES)
                if names:
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {names} "
                                 f"from {'.' * node.level}{node.module or ''}")
    assert wrong == []


#: the answers of the remote-partition read model (engine.remote.remote_log) and its steps:
#: no other module defines a function of these names (a leading "_" aside), so no reader
#: grows its own copy of one
READ_MODEL = "engine.remote.remote_log"
READ_MODEL_ANSWERS = {
    "read_segment", "start_position", "name_next_segments", "aborted_transactions",
    "all_aborted_transactions", "collect_aborted", "last_stable_offset", "open_transactions",
    "offset_for_timestamp", "timestamp_position", "max_timestamp", "timestamp_at",
}
#: where the same names answer for something else: the local log's own segments (engine.log),
#: and serve's reader of a broker's log, which is the local log with the tier behind it (read
#: through the RLM, whose remote answers are the read model's)
ANSWERS_ELSEWHERE = ("engine.log", "engine.protocol.log_reader")


def definitions_named(path: Path, names: set[str]) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    # a property is an attribute a reader exposes (a partition's last stable offset), not
    # an answer computed
    return sorted(f"{node.name} (line {node.lineno})" for node in ast.walk(tree)
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.name.lstrip("_") in names
                  and not any(isinstance(d, ast.Name) and d.id == "property"
                              for d in node.decorator_list))


def test_only_the_read_model_defines_its_answers():
    copies = {}
    for module, path in _modules().items():
        if module == READ_MODEL or any(module == p or module.startswith(p + ".")
                                       for p in ANSWERS_ELSEWHERE):
            continue
        found = definitions_named(path, READ_MODEL_ANSWERS)
        if found:
            copies[module] = found
    assert copies == {}, f"answers of {READ_MODEL} defined elsewhere: {copies}"


def test_the_answer_check_sees_a_copy(tmp_path):
    copy = tmp_path / "reader.py"
    copy.write_text("class R:\n    def _offset_for_timestamp(self, links, ts):\n"
                    "        return None\n")
    assert definitions_named(copy, READ_MODEL_ANSWERS) == ["_offset_for_timestamp (line 2)"]
    assert definitions_named(ENGINE / "remote" / "remote_log.py", READ_MODEL_ANSWERS)

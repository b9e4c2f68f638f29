"""The `.pyi` stubs of engine._native match the compiled modules: every native module has one,
every public name a module exports is declared in it, and every function or method it declares
takes the parameters (names, order, defaults present) that the compiled one takes."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import engine._native

NATIVE = Path(engine._native.__file__).parent
MODULES = sorted({p.name.split(".")[0] for p in NATIVE.glob("*.so")}
                 | {p.name.split(".")[0] for p in NATIVE.glob("*.pyd")})


def _stub(name: str) -> ast.Module:
    return ast.parse((NATIVE / f"{name}.pyi").read_text(), filename=f"{name}.pyi")


def _declared(tree: ast.Module) -> dict[str, ast.AST]:
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, ast.Assign):
            names.update((t.id, node) for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            names.update((a.asname, node) for a in node.names if a.asname == a.name)
    return names


def _public(module) -> set[str]:
    """Functions and classes defined by the module, its constants, and its __all__."""
    names = set(getattr(module, "__all__", ()))
    for n, v in vars(module).items():
        if n.startswith("_"):
            continue
        if inspect.isclass(v) or callable(v):
            if getattr(v, "__module__", None) == module.__name__:
                names.add(n)
        elif isinstance(v, (int, str, float)):
            names.add(n)
    return names


def _params(fn: ast.FunctionDef) -> list[tuple[str, bool]]:
    a = fn.args
    plain = a.posonlyargs + a.args
    with_default = [False] * (len(plain) - len(a.defaults)) + [True] * len(a.defaults)
    out = [(p.arg, d) for p, d in zip(plain, with_default)]
    out += [(p.arg, d is not None) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    return [p for p in out if p[0] != "self"]


def _runtime_params(obj) -> list[tuple[str, bool]] | None:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    return [(p.name, p.default is not inspect.Parameter.empty)
            for p in sig.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def test_every_native_module_is_known():
    assert {"crc", "errors", "index", "records", "scan", "codecs", "decode", "columnar",
            "builder", "append"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_stub_declares_every_public_name(name):
    module = importlib.import_module(f"engine._native.{name}")
    missing = _public(module) - set(_declared(_stub(name)))
    assert not missing, f"{name}.pyi lacks {sorted(missing)}"


@pytest.mark.parametrize("name", MODULES)
def test_stub_signatures_match_the_compiled_ones(name):
    module = importlib.import_module(f"engine._native.{name}")
    checked = 0
    for stub_name, node in _declared(_stub(name)).items():
        targets = []
        if isinstance(node, ast.FunctionDef):
            targets.append((node, getattr(module, stub_name)))
        elif isinstance(node, ast.ClassDef):
            cls = getattr(module, stub_name)
            targets += [(m, getattr(cls, m.name)) for m in node.body
                        if isinstance(m, ast.FunctionDef) and m.name in vars(cls)
                        and not isinstance(vars(cls)[m.name], property)
                        and not m.decorator_list and not m.name.startswith("__")]
        for fn, obj in targets:
            runtime = _runtime_params(obj)
            if runtime is None:  # slot wrappers (__len__, __iter__) carry no signature
                continue
            assert _params(fn) == runtime, f"{name}.{stub_name}.{fn.name}"
            checked += 1
    assert checked or name in ("errors",) or not any(
        isinstance(n, ast.FunctionDef) for n in _stub(name).body)

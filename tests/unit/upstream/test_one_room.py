"""Lightning's (torch's, torchmetrics', jsonargparse's, optuna's) private parts are reached only in
``lit_gpu/upstream/``: a scan of the source's syntax tree (not a grep), and of the classes at run time."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "lit_gpu"
UPSTREAM = (
    "lightning",
    "pytorch_lightning",
    "lightning_fabric",
    "torch",
    "torchmetrics",
    "jsonargparse",
    "optuna",
)
#: private names that are lit_gpu's own (or a documented public API), read outside their class
OWN = {
    "_advance": "GlobalPosition (lit_gpu/data/stateful.py), moved by its loaders",
    "_finish_pass": "GlobalPosition (lit_gpu/data/stateful.py), moved by its loaders",
    "_exit": "os._exit, documented public API of the standard library",
    "_fields": "a namedtuple's documented public field list",
    "_sigchld_inner": "CheckpointOnInterrupt's own attribute, in its pickled state",
}
#: private names a metaclass sets on every class (abc's cache, autograd.Function's backward class)
_METACLASS_SET = {"_abc_impl", "_backward_cls"}
#: calls whose string argument names an attribute, and the methods whose string argument names a key
_ATTR_CALLS = {"getattr", "hasattr", "setattr", "delattr"}
_KEY_METHODS = {"get", "pop", "setdefault", "__getitem__"}


def _own(name: str) -> bool:
    return name.startswith("__") or name.startswith("_lit_gpu_") or name in OWN


def _private(name: object) -> bool:
    return isinstance(name, str) and name.startswith("_") and name.isidentifier() and not _own(name)


def _class_names(tree: ast.AST) -> dict[str, set[str]]:
    """Each class's private names it defines itself (methods, class attributes, ``self.x = ...``)."""
    found: dict[str, set[str]] = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        names = found.setdefault(cls.name, set())
        for node in ast.walk(cls):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                names.add(node.attr)
    return found


def _files() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).parts[0] != "upstream"]


def _reaches(path: Path, defined: dict[str, set[str]]) -> list[str]:
    """The places in one module that read a private upstream name."""
    tree = ast.parse(path.read_text(), str(path))
    hits = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        own = set(defined.get(cls.name, set()))
        for base in cls.bases:  # a lit_gpu base class's names are lit_gpu's too
            if isinstance(base, ast.Name):
                own |= defined.get(base.id, set())
        for node in ast.walk(cls):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
                and _private(node.attr)
                and node.attr not in own
            ):
                hits.append(f"{node.lineno}: {node.value.id}.{node.attr} (not defined by lit_gpu's class)")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                hits.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in UPSTREAM:
            parts = (node.module or "").split(".")
            if any(p.startswith("_") for p in parts) or any(_private(a.name) for a in node.names):
                hits.append(f"{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in UPSTREAM and any(p.startswith("_") for p in parts):
                    hits.append(f"{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.Call):
            fn = node.func
            named = isinstance(fn, ast.Name) and fn.id in _ATTR_CALLS and len(node.args) >= 2
            keyed = isinstance(fn, ast.Attribute) and fn.attr in _KEY_METHODS and node.args
            arg = node.args[1] if named else node.args[0] if keyed else None
            if isinstance(arg, ast.Constant) and _private(arg.value):
                hits.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
        elif isinstance(node, ast.Subscript | ast.Compare):
            keys = [node.slice] if isinstance(node, ast.Subscript) else [node.left]
            for key in keys:
                if isinstance(key, ast.Constant) and _private(key.value):
                    hits.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return hits


def _defined() -> dict[str, set[str]]:
    defined: dict[str, set[str]] = {}
    for path in _files():
        for name, names in _class_names(ast.parse(path.read_text())).items():
            defined.setdefault(name, set()).update(names)
    return defined


def test_no_private_upstream_name_outside_the_room():
    defined = _defined()
    outside = {str(p.relative_to(REPO_ROOT)): hits for p in _files() if (hits := _reaches(p, defined))}
    assert outside == {}, "reach it through a small public function in lit_gpu/upstream/ (behind the gate)"


@pytest.mark.parametrize(
    "source",
    [
        "x = trainer._signal_connector",
        "from lightning.fabric.strategies import _StrategyRegistry",
        "import torch.utils.data._utils",
        "x = getattr(trainer, '_logger_connector', None)",
        "x = state['_batches_that_stepped']",
        "x = hparams.pop('_instantiator', None)",
        "class C(ModelCheckpoint):\n    def f(self):\n        return self._last_time_checked",
    ],
)
def test_the_scan_finds_each_kind_of_reach(tmp_path, source):
    path = tmp_path / "m.py"
    path.write_text(source + "\n")
    assert _reaches(path, {}), source


def test_no_class_outside_the_room_overrides_a_private_upstream_member():
    """At run time: a private name a lit_gpu class defines is not one its upstream bases have (an override
    of a protected hook lives in the room, e.g. upstream/checkpointing.py)."""
    found = []
    for path in _files():
        parts = path.relative_to(REPO_ROOT).with_suffix("").parts
        if parts[-1] == "__main__" or "completion_flags" in parts:
            continue
        module = importlib.import_module(".".join(p for p in parts if p != "__init__"))
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != module.__name__:
                continue
            upstream_bases = [b for b in cls.__mro__[1:] if b.__module__.split(".")[0] in UPSTREAM]
            for name in vars(cls):
                if (
                    _private(name)
                    and name not in _METACLASS_SET
                    and any(hasattr(b, name) for b in upstream_bases)
                ):
                    found.append(f"{cls.__module__}.{cls.__qualname__}.{name}")
    assert found == []

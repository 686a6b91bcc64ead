"""The syntax-tree scan for private upstream names (Lightning's, torch's, torchmetrics', jsonargparse's,
optuna's), and what the one table (lit_gpu/upstream.py) allows each module of lit_gpu to reach: shared
by tests/unit/upstream/test_declared.py and tests/unit/test_import_contracts.py. The rule holds wherever the
code sits: a module may reach a private upstream name where a feature of the table declares the name and
lists the module among its users."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

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
    "_advance": "GlobalPosition (lit_gpu/resume/loaders.py), moved by its loaders",
    "_finish_pass": "GlobalPosition (lit_gpu/resume/loaders.py), moved by its loaders",
    "_exit": "os._exit, documented public API of the standard library",
    "_fields": "a namedtuple's documented public field list",
    "_sigchld_inner": "CheckpointOnInterrupt's own attribute, in its pickled state",
}
#: private names a metaclass sets on every class (abc's cache, autograd.Function's backward class)
METACLASS_SET = {"_abc_impl", "_backward_cls"}
#: calls whose string argument names an attribute, and the methods whose string argument names a key
_ATTR_CALLS = {"getattr", "hasattr", "setattr", "delattr"}
_KEY_METHODS = {"get", "pop", "setdefault", "__getitem__"}


def _own(name: str) -> bool:
    return name.startswith("__") or name.startswith("_lit_gpu_") or name in OWN


def private(name: object) -> bool:
    return isinstance(name, str) and name.startswith("_") and name.isidentifier() and not _own(name)


def class_names(tree: ast.AST) -> dict[str, set[str]]:
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


def modules() -> dict[str, Path]:
    """Every module of lit_gpu by its dotted name (``lit_gpu.fastpath.step``; a package's ``__init__`` by the
    package's name)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def feature_names(feature: Any, fit_paths: tuple[str, ...] = ()) -> set[str]:
    """The private names one feature of the table declares (its mirrored and private members' parts, its
    keys, and for the fast path the private parts of the trainer paths it checks per fit)."""
    names: set[str] = set()
    for where in (*feature.mirrored, *feature.private):
        module, _, qualname = where.partition(":")
        names.update(p for p in (*module.split("."), *qualname.split(".")) if p.startswith("_"))
    names.update(feature.keys)
    for path in fit_paths:
        names.update(p for p in path.split(".") if p.startswith("_"))
    return names


def is_user(module: str, users: tuple[str, ...]) -> bool:
    """Whether ``module`` is one of ``users`` (a dotted module, or ``pkg.*``: every module of the package)."""
    return any(
        module == user or (user.endswith(".*") and (module + ".").startswith(user[:-1])) for user in users
    )


def allowed_names() -> dict[str, set[str]]:
    """Module -> the private upstream names the table lets it reach."""
    from lit_gpu.upstream import FEATURES, FIT_PRIVATE_NAMES

    allowed: dict[str, set[str]] = {}
    for name, feature in FEATURES.items():
        names = feature_names(feature, FIT_PRIVATE_NAMES if name == "fast path" else ())
        for module in modules():
            if is_user(module, feature.users):
                allowed.setdefault(module, set()).update(names)
    return allowed


def reaches(path: Path, defined: dict[str, set[str]]) -> list[str]:
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
                and private(node.attr)
                and node.attr not in own
            ):
                hits.append(f"{node.lineno}: {node.value.id}.{node.attr} (not defined by lit_gpu's class)")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                hits.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in UPSTREAM:
            parts = (node.module or "").split(".")
            if any(p.startswith("_") for p in parts) or any(private(a.name) for a in node.names):
                hits.append(
                    f"{node.lineno}: from {node.module} import {', '.join(a.name for a in node.names)}"
                )
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
            if isinstance(arg, ast.Constant) and private(arg.value):
                hits.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
        elif isinstance(node, ast.Subscript | ast.Compare):
            keys = [node.slice] if isinstance(node, ast.Subscript) else [node.left]
            for key in keys:
                if isinstance(key, ast.Constant) and private(key.value):
                    hits.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return hits


def defined_names(paths: list[Path]) -> dict[str, set[str]]:
    defined: dict[str, set[str]] = {}
    for path in paths:
        for name, names in class_names(ast.parse(path.read_text())).items():
            defined.setdefault(name, set()).update(names)
    return defined


def names_in(hit: str) -> list[str]:
    """The private names one hit of :func:`reaches` reads (attributes, imported names, keys)."""
    text = hit.split(": ", 1)[1].removesuffix(" (not defined by lit_gpu's class)")
    return [n for n in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text) if private(n)]

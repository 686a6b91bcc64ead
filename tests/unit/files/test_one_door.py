"""One door: files someone else may have written are read only in ``lit_gpu/files/`` (issue 18).

The test walks every module of the package (AST, nothing imported) and fails on a call that loads
data or imports by name outside ``lit_gpu/files/``, unless it is listed below with why it is not a
file from someone else.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "lit_gpu"
DOOR = PACKAGE / "files"

#: calls that read data or import a module named by data
READERS = {
    "torch.load",
    "yaml.load",
    "yaml.safe_load",
    "yaml.unsafe_load",
    "yaml.full_load",
    "json.load",
    "json.loads",
    "pickle.load",
    "pickle.loads",
    "importlib.import_module",
    "import_module",
    "__import__",
    "load_file",  # safetensors
}

#: (module, call) -> why it is not reading someone else's file
ALLOWED = {
    ("lit_gpu/cli/main.py", "importlib.import_module"): "a module path from lit_gpu's own COMMANDS table",
    ("lit_gpu/cli/completion.py", "importlib.import_module"): "module paths from lit_gpu's COMMANDS table",
    ("lit_gpu/__init__.py", "importlib.import_module"): "a name in lit_gpu's own SUBMODULES set (PEP 562)",
    (
        "lit_gpu/upstream/gate.py",
        "importlib.import_module",
    ): "Lightning module paths: the gate's own table",
    ("lit_gpu/cli/run_config.py", "yaml.safe_load"): "the parser's own dump of this run's config",
    ("lit_gpu/cli/trainer.py", "yaml.safe_load"): "the user's own --config files, to name the GPU setting",
    ("lit_gpu/devices.py", "json.loads"): "the environment a parent lit-gpu process set for its ranks",
    ("lit_gpu/commands/bench.py", "json.loads"): "a result file the bench's own child just wrote",
    ("lit_gpu/commands/sweep/__init__.py", "json.loads"): "the trial spec the parent sweep put in the env",
    ("lit_gpu/commands/sweep/gpus.py", "json.loads"): "GPU lease files of this sweep's workers; ints only",
    ("lit_gpu/commands/sweep/trial.py", "json.loads"): "the result file the trial's own child just wrote",
    ("lit_gpu/commands/sweep/best.py", "json.loads"): "a JSON round trip of the parsed config in memory",
}


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _name(node.value)
        return f"{inner}.{node.attr}" if inner else node.attr
    return ""


def _reads(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    return {
        name
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and (name := _name(node.func)) in READERS
    }


def test_files_from_others_are_read_only_in_lit_gpu_files():
    outside = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if DOOR in path.parents:
            continue
        rel = str(path.relative_to(REPO_ROOT))
        calls = {c for c in _reads(path) if (rel, c) not in ALLOWED}
        if calls:
            outside[rel] = sorted(calls)
    assert outside == {}, "read it through lit_gpu/files/ (or list it in ALLOWED with the reason)"


def test_the_door_does_read_and_the_allow_list_is_current():
    assert {"torch.load", "yaml.safe_load"} <= set().union(*(_reads(p) for p in DOOR.rglob("*.py")))
    stale = [(rel, call) for rel, call in ALLOWED if call not in _reads(REPO_ROOT / rel)]
    assert stale == [], "remove entries that no longer match a call"

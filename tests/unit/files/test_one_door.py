"""One door: files someone else may have written are read only in ``lit_gpu/textfiles.py`` and, for
checkpoints, ``lit_gpu/checkpoints/read.py`` (the only ``torch.load``) and ``build.py`` (the only import
of a name a file gives).

The test walks every module of the package (AST, nothing imported) and fails on a call that loads
data, reads a text file (``open`` for reading, ``read_text``, ``csv.reader``...) or imports by name
outside those doors, unless it is listed below with why it is not a file from someone else.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "lit_gpu"
#: the doors: the bounded text reader, the checkpoint package's one read and its one build
DOORS = (PACKAGE / "textfiles.py", PACKAGE / "checkpoints" / "read.py", PACKAGE / "checkpoints" / "build.py")

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

#: calls that read a text file (CSV, JSON, plain text); ``open`` counts unless its mode writes
TEXT_READERS = {"csv.reader", "csv.DictReader", "csv.Sniffer", "io.open", "fileinput.input"}

#: (module, call) -> why it is not reading someone else's file
ALLOWED = {
    ("lit_gpu/cli/main.py", "importlib.import_module"): "a module path from lit_gpu's own COMMANDS table",
    ("lit_gpu/cli/completion.py", "importlib.import_module"): "module paths from lit_gpu's COMMANDS table",
    ("lit_gpu/__init__.py", "importlib.import_module"): "a name in lit_gpu's own SUBMODULES set (PEP 562)",
    ("lit_gpu/callbacks/__init__.py", "importlib.import_module"): "a module path from its own PUBLIC table",
    (
        "lit_gpu/upstream.py",
        "importlib.import_module",
    ): "Lightning module paths: the gate's own table",
    ("lit_gpu/run/folder.py", "yaml.safe_load"): "the parser's own dump of this run's config",
    ("lit_gpu/commands/sweep/space.py", "json.loads"): "a JSON round trip of the parsed config in memory",
    ("lit_gpu/checkpoints/scan.py", "importlib.import_module"): "numpy's own modules, by constant names",
    ("lit_gpu/commands/sweep/worker.py", "read_text"): "/proc/PID/stat, written by the kernel",
    ("lit_gpu/devices.py", "read_text"): "/proc/cpuinfo, written by the kernel",
    (
        "lit_gpu/cli/config_files.py",
        "read_text",
    ): "textfiles.read_text: the door's bounded reader",
    ("lit_gpu/cli/recipes.py", "read_text"): "a recipe file shipped inside the lit_gpu package",
    (
        "lit_gpu/commands/configs.py",
        "read_text",
    ): "a recipe file shipped inside the lit_gpu package, copied out",
}


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _name(node.value)
        return f"{inner}.{node.attr}" if inner else node.attr
    return ""


def _mode(node: ast.Call, position: int) -> str | None:
    """The literal mode of an ``open`` call (``"r"`` when not given, ``None`` when not a literal)."""
    args = [kw.value for kw in node.keywords if kw.arg == "mode"] or node.args[position : position + 1]
    if not args:
        return "r"
    mode = args[0]
    if isinstance(mode, ast.IfExp):  # "a" if exists else "w": a read only when one branch reads
        modes = [_literal(mode.body), _literal(mode.orelse)]
        return None if None in modes else min(modes, key=lambda m: any(c in m for c in "wax"))
    return _literal(mode)


def _literal(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _text_read(node: ast.Call) -> str | None:
    """``open``/``read_text``/``read_bytes``/``csv.reader``... when the call reads a file's text."""
    name = _name(node.func)
    if name in TEXT_READERS:
        return name
    if name.rsplit(".", 1)[-1] in ("read_text", "read_bytes"):
        return name.rsplit(".", 1)[-1]
    if name in ("open", "io.open") or name.endswith(".open") and name != "os.open":
        mode = _mode(node, 1 if name in ("open", "io.open") else 0)
        if mode is None or not any(c in mode for c in "wax"):
            return "open"
    return None


def _reads(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _name(node.func)
            if name in READERS:
                found.add(name)
            elif (text := _text_read(node)) is not None:
                found.add(text)
    return found


def test_files_from_others_are_read_only_in_lit_gpu_files():
    outside = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in DOORS:
            continue
        rel = str(path.relative_to(REPO_ROOT))
        calls = {c for c in _reads(path) if (rel, c) not in ALLOWED}
        if calls:
            outside[rel] = sorted(calls)
    assert outside == {}, "read it through textfiles.py or checkpoints/ (or list it in ALLOWED with why)"


def test_the_door_does_read_and_the_allow_list_is_current():
    door = set().union(*(_reads(p) for p in DOORS))
    assert {"torch.load", "json.loads", "yaml.load", "csv.reader"} <= door
    stale = [(rel, call) for rel, call in ALLOWED if call not in _reads(REPO_ROOT / rel)]
    assert stale == [], "remove entries that no longer match a call"


def test_text_reads_are_seen(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "import csv, json\n"
        "from pathlib import Path\n"
        "open('a')\n"
        "open('b', 'rb')\n"
        "open('c', 'w')\n"
        "open('d', 'a' if x else 'w')\n"
        "Path('e').read_text()\n"
        "csv.DictReader(f)\n"
        "json.loads(s)\n"
    )
    assert _reads(module) == {"open", "read_text", "csv.DictReader", "json.loads"}

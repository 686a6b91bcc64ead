"""The import contracts of pyproject.toml's ``[tool.importlinter]`` hold (layers, leaves, no cycles)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT


def test_lint_imports_keeps_every_contract():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if exe is None:
        pytest.fail("lint-imports not found: install the dev extra (pip install -e '.[dev]')")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([exe], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


UPSTREAM = ("lightning", "jsonargparse", "optuna", "torchmetrics", "torch")


def _private_upstream_imports(path: Path) -> list[tuple[int, str]]:
    """``from lightning... import _x`` / ``import lightning.x._y`` in one module: (line, name) each."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in UPSTREAM:
            parts = (node.module or "").split(".")
            names = [a.name for a in node.names]
            found += [(node.lineno, p) for p in (*parts, *names) if p.startswith("_")]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in UPSTREAM:
                    found += [(node.lineno, p) for p in parts if p.startswith("_")]
    return found


def test_private_upstream_apis_imported_only_where_the_table_declares_them():
    """Lightning/jsonargparse/Optuna/torch internals are imported only by a module the one table
    (lit_gpu/upstream.py) lists as a user of a feature that declares the name, wherever it sits."""
    from tests.helpers.private_names import allowed_names, modules

    allowed = allowed_names()
    found = {module: _private_upstream_imports(path) for module, path in modules().items()}
    undeclared = {
        module: [f"{line}: {name}" for line, name in hits if name not in allowed.get(module, set())]
        for module, hits in found.items()
    }
    assert {m: hits for m, hits in undeclared.items() if hits} == {}, "declare it in lit_gpu/upstream.py"
    assert any(found.values()), "the scan finds nothing at all: it is broken"


@pytest.mark.integration  # a fresh interpreter importing Lightning: not the inner loop
def test_modules_and_data_import_the_lightning_room_not_callbacks():
    """Importing a LitModule loads no callback or loader beyond what ``import lit_gpu`` loads (the dp
    strategy it registers, yes)."""
    code = (
        "import sys, lit_gpu; before = set(sys.modules); import lit_gpu.modules, lit_gpu.checkpoints.build; "
        "print(sorted(m for m in set(sys.modules) - before if m.startswith(('lit_gpu.callbacks', "
        "'lit_gpu.data'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"

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
#: where private upstream APIs may be used: the one room (tests/unit/upstream/test_one_room.py scans the rest)
ROOMS = ("upstream",)


def _private_upstream_imports(path: Path) -> list[str]:
    """``from lightning... import _x`` / ``import lightning.x._y`` in one module: private upstream names."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in UPSTREAM:
            parts = (node.module or "").split(".")
            names = [a.name for a in node.names]
            if any(p.startswith("_") for p in parts) or any(n.startswith("_") for n in names):
                found.append(f"{node.lineno}: from {node.module} import {', '.join(names)}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in UPSTREAM and any(p.startswith("_") for p in parts):
                    found.append(f"{node.lineno}: import {alias.name}")
    return found


def test_private_upstream_apis_only_in_the_rooms():
    """Lightning/jsonargparse/Optuna internals are imported only in the rooms (:data:`ROOMS`)."""
    package = REPO_ROOT / "lit_gpu"
    outside = {
        str(path.relative_to(REPO_ROOT)): hits
        for path in sorted(package.rglob("*.py"))
        if path.relative_to(package).parts[0] not in ROOMS and (hits := _private_upstream_imports(path))
    }
    assert outside == {}, "import it from lit_gpu/upstream (pinned) instead"
    inside = [p for room in ROOMS for p in (package / room).rglob("*.py") if _private_upstream_imports(p)]
    assert inside, "the scan finds nothing at all: it is broken"


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

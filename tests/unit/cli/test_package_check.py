"""A folder named ``lit_gpu`` in the working folder (a clone's, seen from its parent) is named, not imported
as a half-made package (lit_gpu/cli/main.py: check_package)."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

from lit_gpu.cli.main import PACKAGE_DIR, check_package, shadowing_folder


def test_the_real_package_passes():
    assert shadowing_folder() is None
    check_package()


def test_a_namespace_folder_taken_for_lit_gpu_is_one_line_with_the_fix(monkeypatch, tmp_path):
    folder = tmp_path / "lit_gpu"
    fake = types.ModuleType("lit_gpu")
    fake.__path__ = [str(folder)]  # what the import system makes of a folder without __init__.py
    monkeypatch.setitem(sys.modules, "lit_gpu", fake)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ImportError) as info:
        check_package()
    text = str(info.value)
    assert text.startswith(f"Python took the folder {folder} for the package lit_gpu ")
    assert f"not {PACKAGE_DIR}" in text and "start Python or Jupyter in another folder" in text
    assert "\n" not in text


@pytest.mark.integration
@pytest.mark.parametrize("statement", ["from lit_gpu import demo", "from lit_gpu.cli import LitGpuCLI"])
def test_python_started_beside_a_clone_named_lit_gpu_says_so(tmp_path, statement):
    """What a notebook's first cell does in a kernel started in the clone's parent folder (the editable
    install's finder comes after the working folder's namespace folder)."""
    (tmp_path / "lit_gpu" / "notebooks").mkdir(parents=True)  # the clone, as seen from its parent
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", statement], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    if done.returncode == 0:  # lit_gpu is not an editable install here (a wheel wins over the folder)
        pytest.skip("the installed lit_gpu is a regular package: the folder cannot shadow it")
    last = done.stderr.strip().splitlines()[-1]
    folder = tmp_path / "lit_gpu"
    assert last.startswith(f"ImportError: Python took the folder {folder} for the package"), last

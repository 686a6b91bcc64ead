"""The dev extras install the tools the docs' commands run (``jupyter nbconvert`` for a notebook)."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

from tests.helpers.paths import REPO_ROOT

#: ``jupyter SUB`` -> the distribution that provides it
JUPYTER_TOOLS = {"nbconvert": "nbconvert", "execute": "nbclient"}


def _doc_commands() -> list[str]:
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    bash = re.compile(r"```bash\n(.*?)```", flags=re.DOTALL)
    blocks = [block for page in pages for block in bash.findall(page.read_text())]
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_every_jupyter_command_of_the_docs_is_in_the_dev_extras_and_installed():
    used = {m.group(1) for line in _doc_commands() for m in re.finditer(r"jupyter[ -](\w+)", line)}
    assert "nbconvert" in used  # the docs show how to run a notebook from a shell
    dev = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    names = {Requirement(r).name for r in dev}
    bin_dir = Path(sys.executable).parent
    for sub in used:
        assert sub in JUPYTER_TOOLS, f"the docs run `jupyter {sub}`: name its distribution here"
        assert JUPYTER_TOOLS[sub] in names, f"jupyter {sub}: not in [dev]"
        script = shutil.which(f"jupyter-{sub}", path=str(bin_dir)) or shutil.which(f"jupyter-{sub}")
        assert script is not None, f"jupyter {sub} is not installed beside {sys.executable}"

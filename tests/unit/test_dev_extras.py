"""The dev extras install the tools the docs' commands run (``jupyter nbconvert`` for a notebook)."""

from __future__ import annotations

import re
import sys
from importlib import metadata

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
    for sub in used:
        assert sub in JUPYTER_TOOLS, f"the docs run `jupyter {sub}`: name its distribution here"
        assert JUPYTER_TOOLS[sub] in names, f"jupyter {sub}: not in [dev]"
        # installed: its distribution in this interpreter with its console script (a venv that sees another
        # venv's packages, as the lower-bound stage's does, has the script only there)
        scripts = {ep.name for ep in metadata.distribution(JUPYTER_TOOLS[sub]).entry_points}
        assert f"jupyter-{sub}" in scripts, f"jupyter {sub} is not installed for {sys.executable}"

"""The ``lit_gpu`` Python imported is this package, not a folder that is only named like it.

Python started in the folder that holds a clone named ``lit_gpu`` (Jupyter or a notebook's kernel whose
working folder is the clone's parent) finds the clone's folder first, through ``sys.path[0]``. That folder
has no ``__init__.py``, so it becomes a namespace package, and it wins over an editable install
(``pip install -e``: setuptools' finder is asked only after the path search). The submodules still load
through that finder, but the package's ``__init__`` never ran: no ``lit_gpu.__version__``, no lazy
``lit_gpu.X`` attributes, no ``Trainer(strategy="dp")``. The entry points (:mod:`lit_gpu.cli`,
:mod:`lit_gpu.demo`, a notebook's first import) call :func:`check_package`, which says so in one line.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from lit_gpu.messages import PACKAGE_SHADOWED

PACKAGE_DIR = Path(__file__).resolve().parent


def shadowing_folder() -> str | None:
    """The folder imported as ``lit_gpu`` instead of this package, or None when all is well."""
    top = sys.modules.get("lit_gpu")
    if top is None or getattr(top, "__file__", None) is not None:
        return None  # not imported yet (a submodule loaded by path), or the real package
    folders = [str(p) for p in getattr(top, "__path__", [])]
    return folders[0] if folders and str(PACKAGE_DIR) not in folders else None


def check_package() -> None:
    """Raise ImportError naming the folder Python took for ``lit_gpu`` and the fix, if that happened."""
    folder = shadowing_folder()
    if folder is not None:
        raise ImportError(PACKAGE_SHADOWED.format(folder=folder, cwd=os.getcwd(), package=PACKAGE_DIR))

"""The shipped recipes (``lit_gpu/configs/**.yaml``), addressable by name from any folder.

``lit_gpu:NAME`` is the packaged file ``lit_gpu/configs/NAME.yaml``: ``lit_gpu:mnist``,
``lit_gpu:trainer/gpu``, ``lit_gpu:sweeps/simple``. :func:`resolve_args` turns every such value of
``--config``/``-c``/``--search`` into the file's path before jsonargparse parses the command line,
so a name works wherever a path does, from a checkout or an installed wheel. In a checkout the
top-level ``configs/`` is a link to the same folder: one set of files, editable in place.

A recipe read by name is a file the user chose, exactly like a path they typed.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lit_gpu.errors import LitGpuError

__all__ = ["PREFIX", "ROOT", "describe", "names", "path", "resolve", "resolve_args"]

NO_SUCH_RECIPE = "no shipped config named {name}{suggestion}; lit-gpu configs lists them"

PREFIX = "lit_gpu:"
ROOT = Path(__file__).resolve().parent.parent / "configs"  # lit_gpu/configs/
# the flags whose value is a config file: LightningCLI's --config/-c, and lit-gpu sweep's --search
FILE_FLAGS = ("--config", "-c", "--search")


def names() -> list[str]:
    """Every recipe name (``mnist``, ``trainer/gpu``, ``sweeps/simple``...), sorted."""
    return sorted(p.relative_to(ROOT).with_suffix("").as_posix() for p in ROOT.rglob("*.yaml"))


def path(name: str) -> Path:
    """The packaged file of recipe ``name`` (with or without ``lit_gpu:`` and ``.yaml``).

    Raises:
        LitGpuError: no such recipe (the message names the closest one and ``lit-gpu configs``).
    """
    bare = name.removeprefix(PREFIX).strip().removesuffix(".yaml")
    known = names()
    if bare in known:  # only names from the listing: no "../" escapes out of the folder
        return ROOT / f"{bare}.yaml"
    close = difflib.get_close_matches(bare, known, n=1, cutoff=0.5)
    hint = f" (did you mean {PREFIX}{close[0]}?)" if close else ""
    raise LitGpuError(NO_SUCH_RECIPE.format(name=PREFIX + bare, suggestion=hint))


def describe(name: str) -> str:
    """The first comment line of recipe ``name``, without its ``#``."""
    for line in path(name).read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return ""


def resolve(value: str) -> str:
    """``lit_gpu:NAME`` -> the path of its file; any other value unchanged."""
    return str(path(value)) if value.startswith(PREFIX) else value


def resolve_argv(argv: Sequence[Any]) -> list[Any]:
    """``argv`` with the value of every ``--config``/``-c``/``--search`` given as ``lit_gpu:NAME``
    replaced by the file's path (``--config NAME`` and ``--config=NAME`` alike)."""
    out = list(argv)
    for i, arg in enumerate(out):
        if not isinstance(arg, str):
            continue
        flag, eq, value = arg.partition("=")
        if eq and flag in FILE_FLAGS:
            out[i] = f"{flag}={resolve(value)}"
        elif i > 0 and out[i - 1] in FILE_FLAGS:
            out[i] = resolve(arg)
    return out


def resolve_args(args: Any) -> Any:
    """LightningCLI's ``args`` with recipe names resolved; ``None`` (``sys.argv``) stays ``None``
    unless it holds a name. A dict or Namespace of settings is returned unchanged."""
    if args is None:
        given = sys.argv[1:]
        resolved = resolve_argv(given)
        return None if resolved == given else resolved
    if isinstance(args, list | tuple):
        return resolve_argv(args)
    return args

"""Where a sub-command's runs live, from the config being run (never from a file): one :class:`Where`.

* :func:`of_config`: the checkpoint folder the config names, the ``ROOT/NAME`` folders holding its
  ``version_N`` runs (a custom logger's ``save_dir/name`` too), ``checkpoint.mode``/``monitor``, the root
  where Lightning keeps cluster checkpoints, and the user's ``--weights_only false``.
* :func:`checkpoint_folders`: the checkpoint folders of this user's runs, for the clean-up of killed saves.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonargparse import Namespace

from lit_gpu.checkpoints.contracts import inside
from lit_gpu.run import layout

__all__ = ["Where", "checkpoint_folders", "checkpoint_patterns", "of_config", "root_dir", "run_parents"]


@dataclass
class Where:
    """Where a sub-command's runs live (from the config being run, not from any file)."""

    dirpath: str | None  # an explicit checkpoint.dirpath
    parents: list[Path]  # ROOT/NAME folders holding version_N runs
    mode: str = "min"  # checkpoint.mode: which monitored value is best
    monitor: str | None = None  # checkpoint.monitor
    root: Path | None = None  # trainer.default_root_dir: Lightning's cluster checkpoints lie there
    trust: bool = False  # the user's --weights_only false (never a file's)


def value(config: Any, key: str, default: Any = None) -> Any:
    """``config[key]`` of a Namespace or dict (dotted keys); ``default`` if absent or ``None``."""
    try:
        found = config[key]
    except (KeyError, TypeError, AttributeError):
        return default
    return default if found is None else found


def root_dir(config: Any) -> str:
    """``trainer.default_root_dir`` of a (sub-command) config: where its runs live."""
    return str(value(config, "trainer.default_root_dir", layout.DEFAULT_ROOT))


def run_parents(config: Any) -> list[Path]:
    """``ROOT/NAME`` folders holding this config's ``version_N`` runs (a custom logger adds its own)."""
    parents = [Path(root_dir(config)) / layout.NAME]
    logger = value(config, "trainer.logger")
    for entry in logger if isinstance(logger, list) else [logger]:
        init = value(entry, "init_args") if isinstance(entry, Namespace | dict) else None
        save_dir = value(init, "save_dir") if init is not None else None
        if save_dir is not None:
            parents.append(Path(save_dir) / str(value(init, "name", "lightning_logs")))
    return list(dict.fromkeys(parents))


def of_config(sub: Any) -> Where:
    """Where the runs of the sub-command config ``sub`` live; ``trust``: its ``weights_only`` is ``False``."""
    return Where(
        dirpath=value(sub, "checkpoint.dirpath"),
        parents=run_parents(sub),
        mode=str(value(sub, "checkpoint.mode", "min")),
        monitor=value(sub, "checkpoint.monitor"),
        root=Path(root_dir(sub)),
        trust=value(sub, "weights_only") is False,  # the user's flag, never a file's
    )


# ---- where a config's checkpoints lie (for the clean-up of killed saves) -----------------------------------
def checkpoint_patterns(root: str | os.PathLike, parents: Sequence[Path], dirpath: Any) -> list[str]:
    """Glob patterns of the folders where a config's runs keep checkpoints (its ``dirpath``, if given)."""
    if dirpath:
        return [str(dirpath)]
    runs = [str(parent / f"{layout.VERSION_PREFIX}*" / layout.CHECKPOINTS) for parent in parents]
    return [*runs, str(Path(root) / layout.CHECKPOINTS)]  # runs without a logger


def _inside_its_run(folder: Path) -> bool:
    """``version_N/checkpoints`` (or ``ROOT/checkpoints``) really in its run, and the run in ``ROOT/NAME``.

    Links planted in a shared ``runs/`` (a ``checkpoints`` or ``version_N`` leading elsewhere) fail it;
    a ``runs/`` that is itself a link (a scratch disk) passes.
    """
    run = folder.parent
    if not inside(folder, run):
        return False
    return not run.name.startswith(layout.VERSION_PREFIX) or inside(run, run.parent)


def checkpoint_folders(root: str | os.PathLike, parents: Sequence[Path], dirpath: Any) -> list[Path]:
    """The checkpoint folders of this user's runs, or the config's own ``dirpath`` (wherever it is).

    A run's ``checkpoints`` that is a link leading out of it, a ``version_N`` that is a link out of its
    ``ROOT/NAME``, and another user's run are left out: lit_gpu deletes nothing outside a run.
    """
    found = []
    for pattern in checkpoint_patterns(root, parents, dirpath):
        for folder in sorted(glob.glob(pattern)):
            folder = Path(folder)
            if dirpath or (_inside_its_run(folder) and layout.owner_of(folder.parent) == layout.my_uid()):
                found.append(folder)
    return found

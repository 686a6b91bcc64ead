"""CLI wiring of ``--ckpt_path last|best|FILE``: the config's flags mapped to one call of the run store.

Lightning alone looks for ``last`` only in the trainer's own checkpoint folder, and knows ``best`` only
right after ``fit`` in the same process. The run store (:func:`lit_gpu.run.store.resolve`) answers, in one
call (where the config keeps its runs is the run package's: :mod:`lit_gpu.run.where`); this module applies
the answer to the config and prints its line. The route, room by room, is in docs/architecture.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import lightning.pytorch as pl
from jsonargparse import Namespace

from lit_gpu import messages
from lit_gpu.checkpoints.io import AtomicCheckpointIO, clean_stale_temp_files
from lit_gpu.run import store
from lit_gpu.run.where import checkpoint_folders, checkpoint_patterns, root_dir, run_parents

__all__ = [
    "checkpoint_dirs",
    "clean_run_folders",
    "config_value",
    "resolve_ckpt_path",
    "root_dir",
    "run_parents",
]


def config_value(config: Any, key: str, default: Any = None) -> Any:
    """``config[key]`` of a Namespace or dict (dotted keys); ``default`` if absent or ``None``."""
    try:
        value = config[key]
    except (KeyError, TypeError):
        return default
    return default if value is None else value


def checkpoint_dirs(config: Namespace) -> list[str]:
    """Glob patterns of folders where this config's runs keep checkpoints."""
    return checkpoint_patterns(
        root_dir(config), run_parents(config), config_value(config, "checkpoint.dirpath")
    )


def resolve_ckpt_path(config: Namespace) -> store.Resolution | None:
    """``ckpt_path: last|best|FILE`` of the sub-command, resolved by the run store and applied.

    The resolved path replaces the config's value, ``weights_only`` left unset becomes ``True``
    (Lightning would read ``http(s)://`` checkpoints with ``False``), and the resolution line is printed.
    Returns the resolution (with the checkpoint's header, read once) for the run folder to use.
    """
    subcommand = config_value(config, "subcommand")
    if not subcommand:
        return None
    sub = config[subcommand]
    if "weights_only" in sub and config_value(sub, "weights_only") is None:
        sub["weights_only"] = True
    resolution = store.resolve(config)  # where the runs live: from the config (lit_gpu.run.where)
    if resolution is None:
        return None
    config[resolution.key] = resolution.path
    if resolution.line:
        messages.tell(resolution.line)
    return resolution


def hand_over(trainer: pl.Trainer, resolution: store.Resolution | None) -> store.Resolution | None:
    """The resolved checkpoint's bytes (read and checked once) given to ``trainer``'s checkpoint IO.

    Lightning's load of ``ckpt_path`` then reads those bytes, not the file again; the resolution keeps
    no copy (one held copy, dropped by the load). A custom checkpoint IO reads the file itself.
    """
    if resolution is None or resolution.data is None:
        return resolution
    checkpoint_io = trainer.strategy.checkpoint_io
    if isinstance(checkpoint_io, AtomicCheckpointIO) and resolution.path is not None:
        checkpoint_io.hold(resolution.path, resolution.data)
    return dataclasses.replace(resolution, data=None)


def clean_run_folders(config: Namespace) -> None:
    """Remove temp files left by killed saves in every checkpoint folder of this config's runs.

    A fit starts a new ``version_N``; the litter is in the earlier runs' folders. Only files whose
    writer is gone are removed (``checkpoints.io.clean_stale_temp_files``), only in this user's runs
    (:func:`lit_gpu.run.where.checkpoint_folders`: lit_gpu deletes nothing outside a run; the user's own
    ``--checkpoint.dirpath`` is theirs to place anywhere).
    """
    dirpath = config_value(config, "checkpoint.dirpath")
    for folder in checkpoint_folders(root_dir(config), run_parents(config), dirpath):
        for removed in clean_stale_temp_files(folder):
            messages.tell(messages.REMOVED_STALE_TEMP.format(file=removed))

"""CLI wiring of ``--ckpt_path last|best|FILE``: where this config's runs live; the answer is the door's.

Lightning alone looks for ``last`` only in the trainer's own checkpoint folder, and knows ``best`` only
right after ``fit`` in the same process. The facts are gathered in :mod:`lit_gpu.files.locate`, the
choice is :mod:`lit_gpu.files.run_choice`'s; this module says where the config being run keeps its
runs, applies the answer to the config and prints its line.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

from jsonargparse import Namespace

from lit_gpu import messages, runs
from lit_gpu.files import layout, locate
from lit_gpu.files.checkpoint import inside
from lit_gpu.io import clean_stale_temp_files


def config_value(config: Any, key: str, default: Any = None) -> Any:
    """``config[key]`` of a Namespace or dict (dotted keys); ``default`` if absent or ``None``."""
    try:
        value = config[key]
    except (KeyError, TypeError):
        return default
    return default if value is None else value


def root_dir(config: Any) -> str:
    """``trainer.default_root_dir`` of a (sub-command) config: where its runs live."""
    return str(config_value(config, "trainer.default_root_dir", runs.DEFAULT_ROOT))


def run_parents(config: Namespace) -> list[Path]:
    """``ROOT/NAME`` folders holding this config's ``version_N`` runs (a custom logger adds its own)."""
    parents = [Path(root_dir(config)) / runs.DEFAULT_NAME]
    logger = config_value(config, "trainer.logger")
    for entry in logger if isinstance(logger, list) else [logger]:
        init = config_value(entry, "init_args") if isinstance(entry, Namespace | dict) else None
        save_dir = config_value(init, "save_dir") if init is not None else None
        if save_dir is not None:
            parents.append(Path(save_dir) / str(config_value(init, "name", "lightning_logs")))
    return list(dict.fromkeys(parents))


def checkpoint_dirs(config: Namespace) -> list[str]:
    """Glob patterns of folders where this config's runs keep checkpoints."""
    dirpath = config_value(config, "checkpoint.dirpath")
    if dirpath:
        return [str(dirpath)]
    patterns = [str(parent / "version_*" / "checkpoints") for parent in run_parents(config)]
    return [*patterns, str(Path(root_dir(config)) / "checkpoints")]  # runs without a logger


def _inside_its_run(folder: Path) -> bool:
    """``version_N/checkpoints`` (or ``ROOT/checkpoints``) really in its run, and the run in ``ROOT/NAME``.

    Links planted in a shared ``runs/`` (a ``checkpoints`` or ``version_N`` leading elsewhere) fail it;
    a ``runs/`` that is itself a link (a scratch disk) passes.
    """
    run = folder.parent
    if not inside(folder, run):
        return False
    return not run.name.startswith("version_") or inside(run, run.parent)


def resolve_ckpt_path(config: Namespace) -> locate.Resolution | None:
    """``ckpt_path: last|best|FILE`` of the sub-command, resolved (:mod:`lit_gpu.files.locate`) and applied.

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
    where = locate.Where(
        dirpath=config_value(sub, "checkpoint.dirpath"),
        parents=run_parents(sub),
        mode=str(config_value(sub, "checkpoint.mode", "min")),
        monitor=config_value(sub, "checkpoint.monitor"),
    )
    resolution = locate.resolve(config, where)
    if resolution is None:
        return None
    config[resolution.key] = resolution.path
    if resolution.line:
        messages.tell(resolution.line)
    return resolution


def clean_run_folders(config: Namespace) -> None:
    """Remove temp files left by killed saves in every checkpoint folder of this config's runs.

    A fit starts a new ``version_N``; the litter is in the earlier runs' folders. Only files whose
    writer is gone are removed (:func:`lit_gpu.io.clean_stale_temp_files`). A checkpoint folder that
    is a link leading out of its run folder is skipped: lit_gpu deletes nothing outside a run (the
    user's own ``--checkpoint.dirpath`` is theirs to place anywhere).
    """
    dirpath = config_value(config, "checkpoint.dirpath")
    for pattern in checkpoint_dirs(config):
        for folder in sorted(glob.glob(pattern)):
            if not dirpath and not (_inside_its_run(Path(folder)) and _mine(Path(folder).parent)):
                continue
            for removed in clean_stale_temp_files(folder):
                messages.tell(messages.REMOVED_STALE_TEMP.format(file=removed))


def _mine(folder: Path) -> bool:
    """A run folder of this user (another user's folder in a shared root is left alone)."""
    try:
        return folder.lstat().st_uid == layout.my_uid()
    except OSError:
        return False

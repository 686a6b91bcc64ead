"""``--ckpt_path last`` / ``best``: the newest checkpoint of earlier runs; real paths checked up front.

A new run logs to a new ``version_N`` folder, where Lightning alone would not look for ``last``; and
Lightning knows ``best`` only right after ``fit`` in the same process.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

from jsonargparse import Namespace

from lit_gpu import messages
from lit_gpu.checkpoints import check_checkpoint_file, explain_choice, find_last_checkpoint
from lit_gpu.io import clean_stale_temp_files

_SPECIAL_CKPT = ("best", "last", "hpc", "registry")


def config_value(config: Any, key: str, default: Any = None) -> Any:
    """``config[key]`` of a Namespace or dict (dotted keys); ``default`` if absent or ``None``."""
    try:
        value = config[key]
    except (KeyError, TypeError):
        return default
    return default if value is None else value


def checkpoint_dirs(config: Namespace) -> list[str]:
    """Glob patterns of folders where this config's runs keep checkpoints."""
    dirpath = config_value(config, "checkpoint.dirpath")
    if dirpath:
        return [str(dirpath)]
    patterns = []
    logger = config_value(config, "trainer.logger")
    init = config_value(logger, "init_args") if isinstance(logger, Namespace | dict) else None
    if init is not None:
        save_dir, name = config_value(init, "save_dir", "runs"), config_value(init, "name", "lit_gpu")
        patterns.append(str(Path(save_dir) / (name or "") / "version_*" / "checkpoints"))
    else:  # the CLI's default logger (also when this run itself logs nothing, e.g. `test`)
        patterns.append(str(Path("runs") / "lit_gpu" / "version_*" / "checkpoints"))
    root = config_value(config, "trainer.default_root_dir") or "."
    patterns.append(str(Path(root) / "checkpoints"))
    return patterns


def resolve_ckpt_path(config: Namespace) -> None:
    """Turn ``ckpt_path: last`` into the newest earlier ``last.ckpt`` and sanity-check real paths."""
    subcommand = config_value(config, "subcommand")
    if not subcommand:
        return
    key = f"{subcommand}.ckpt_path"
    ckpt_path = config_value(config, key)
    if not ckpt_path:
        return
    if ckpt_path == "last":
        patterns = checkpoint_dirs(config[subcommand])
        last = find_last_checkpoint(patterns)
        if last is not None:
            text = messages.RESUMING_FROM if subcommand == "fit" else messages.USING_CHECKPOINT
            # why this one: its step and time, and newer runs that have no last.ckpt yet
            messages.tell(text.format(path=last, why=explain_choice(last, patterns)))
            config[key] = str(last)
        return
    if ckpt_path == "best" and subcommand != "fit":
        # a later `lit-gpu test --ckpt_path best` means the newest run's best-*.ckpt on disk
        patterns = checkpoint_dirs(config[subcommand])
        best = find_last_checkpoint(patterns, prefix="best")
        if best is not None:
            why = explain_choice(best, patterns, prefix="best")
            messages.tell(messages.USING_CHECKPOINT.format(path=best, why=why))
            config[key] = str(best)
        return
    if ckpt_path not in _SPECIAL_CKPT and "://" not in str(ckpt_path):
        check_checkpoint_file(ckpt_path)


def clean_run_folders(config: Namespace) -> None:
    """Remove temp files left by killed saves in every checkpoint folder of this config's runs.

    A fit starts a new ``version_N``; the litter is in the earlier runs' folders. Only files whose
    writer is gone are removed (:func:`lit_gpu.io.clean_stale_temp_files`).
    """
    for pattern in checkpoint_dirs(config):
        for folder in sorted(glob.glob(pattern)):
            for removed in clean_stale_temp_files(folder):
                messages.tell(messages.REMOVED_STALE_TEMP.format(file=removed))

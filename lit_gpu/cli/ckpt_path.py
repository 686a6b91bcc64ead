"""``--ckpt_path last`` / ``best``: the newest checkpoint of earlier runs; real paths checked up front.

A new run logs to a new ``version_N`` folder, where Lightning alone would not look for ``last``; and
Lightning knows ``best`` only right after ``fit`` in the same process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jsonargparse import Namespace

from lit_gpu import messages
from lit_gpu.checkpoints import check_checkpoint_file, find_last_checkpoint

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
        last = find_last_checkpoint(checkpoint_dirs(config[subcommand]))
        if last is not None:
            text = messages.RESUMING_FROM if subcommand == "fit" else messages.USING_CHECKPOINT
            messages.tell(text.format(path=last))
            config[key] = str(last)
        return
    if ckpt_path == "best" and subcommand != "fit":
        # a later `lit-gpu test --ckpt_path best` means the newest run's best-*.ckpt on disk
        best = find_last_checkpoint(checkpoint_dirs(config[subcommand]), prefix="best")
        if best is not None:
            messages.tell(messages.USING_CHECKPOINT.format(path=best))
            config[key] = str(best)
        return
    if ckpt_path not in _SPECIAL_CKPT and "://" not in str(ckpt_path):
        check_checkpoint_file(ckpt_path)

"""``--ckpt_path last`` / ``best``: the newest checkpoint of an earlier run of the same model.

A new run logs to a new ``version_N`` folder, where Lightning alone would not look for ``last``; and
Lightning knows ``best`` only right after ``fit`` in the same process. Runs are looked up under
``trainer.default_root_dir`` and matched by the model and data classes their saved ``config.yaml``
names (:mod:`lit_gpu.runs`; read with ``yaml.safe_load``, nothing is built). Real paths are checked.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

from jsonargparse import Namespace

from lit_gpu import messages, runs
from lit_gpu.checkpoints import check_checkpoint_file, explain_choice, find_last_checkpoint
from lit_gpu.errors import LitGpuError
from lit_gpu.io import clean_stale_temp_files

_SPECIAL_CKPT = ("best", "last", "hpc", "registry")


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


def _as_dict(node: Any) -> Any:
    return node.as_dict() if isinstance(node, Namespace) else node


def signature(config: Namespace) -> runs.Signature:
    """The model and data classes a (sub-command) config builds."""
    return runs.Signature.of({"model": _as_dict(config.get("model")), "data": _as_dict(config.get("data"))})


def resolve_ckpt_path(config: Namespace) -> None:
    """Turn ``ckpt_path: last|best`` into a file of a matching earlier run, saying which; check real paths.

    With no matching run, ``fit --ckpt_path last`` starts from scratch (as Lightning does) with one
    line listing what is there; ``test``/``validate``/``predict`` need a checkpoint, so it is an error.
    ``fit --ckpt_path best`` is Lightning's. An explicit ``checkpoint.dirpath`` is searched as it is.

    Raises:
        LitGpuError: No matching checkpoint for ``test``/``validate``/``predict``.
    """
    subcommand = config_value(config, "subcommand")
    if not subcommand:
        return
    key = f"{subcommand}.ckpt_path"
    which = config_value(config, key)
    if not which:
        return
    if which not in ("last", "best"):
        if which not in _SPECIAL_CKPT and "://" not in str(which):
            check_checkpoint_file(which)
        return
    if which == "best" and subcommand == "fit":
        return
    sub = config[subcommand]
    text = messages.RESUMING_FROM if subcommand == "fit" else messages.USING_CHECKPOINT
    dirpath = config_value(sub, "checkpoint.dirpath")
    if dirpath:
        found = find_last_checkpoint([dirpath], prefix=which)
        if found is None:
            raise LitGpuError(messages.NO_CKPT_IN_DIRPATH.format(which=which, dirpath=dirpath))
        messages.tell(text.format(path=found, why=explain_choice(found, [dirpath], prefix=which)))
        config[key] = str(found)
        return
    wanted = signature(sub)
    picked = runs.pick_checkpoint(run_parents(sub), wanted, which)
    if picked.checkpoint is None or picked.run is None:
        message = messages.NO_MATCHING_RUN.format(
            which=which,
            model=wanted.describe(),
            where=" or ".join(str(p) for p in picked.parents),
            listing=picked.listing(),
        )
        if subcommand == "fit":
            messages.tell(message + messages.NO_MATCHING_RUN_FIT)
            config[key] = None
            return
        raise LitGpuError(message + messages.NO_MATCHING_RUN_FIX)
    patterns = [str(parent / "version_*" / "checkpoints") for parent in picked.parents]
    why = explain_choice(picked.checkpoint, patterns, prefix=which)
    why += messages.PICKED_RUN.format(run=picked.run.describe())
    messages.tell(text.format(path=picked.checkpoint, why=why))
    config[key] = str(picked.checkpoint)


def clean_run_folders(config: Namespace) -> None:
    """Remove temp files left by killed saves in every checkpoint folder of this config's runs.

    A fit starts a new ``version_N``; the litter is in the earlier runs' folders. Only files whose
    writer is gone are removed (:func:`lit_gpu.io.clean_stale_temp_files`).
    """
    for pattern in checkpoint_dirs(config):
        for folder in sorted(glob.glob(pattern)):
            for removed in clean_stale_temp_files(folder):
                messages.tell(messages.REMOVED_STALE_TEMP.format(file=removed))

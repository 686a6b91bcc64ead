"""``SUBCOMMAND --ckpt_path FILE`` alone: the model and data of the checkpoint's run put before the flags.

With neither ``--config`` nor ``--model``, the run is rebuilt from the model and data of the checkpoint's
``version_N/config.yaml`` (checked, path-like init args left out, :func:`lit_gpu.run.config.rebuild_fields`),
nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from lit_gpu import messages
from lit_gpu.errors import LitGpuError
from lit_gpu.run.config import RebuildFields, config_of_checkpoint, rebuild_fields, root_of_checkpoint
from lit_gpu.run.layout import CHECKPOINTS, CONFIG_NAME
from lit_gpu.run.links import refuse_escaping_link

__all__ = ["SUBCOMMANDS", "args_with_saved_config"]

SUBCOMMANDS = ("fit", "validate", "test", "predict")


def _option_value(argv: Sequence[str], option: str) -> str | None:
    """Value of the last ``--option VALUE`` / ``--option=VALUE`` in ``argv``."""
    value = None
    for i, arg in enumerate(argv):
        if arg == option and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(option + "="):
            value = arg.split("=", 1)[1]
    return value


def args_with_saved_config(
    argv: Sequence[str], trust_modules: Iterable[str] = ()
) -> tuple[list[str], RebuildFields | None]:
    """Put the model and data of the checkpoint's run config in front of the user's flags.

    For ``SUBCOMMAND --ckpt_path FILE`` with neither ``--config`` nor ``--model``: ``--model`` and
    ``--data`` from ``version_N/config.yaml`` (checked, path-like init args left out) and
    ``--trainer.default_root_dir ROOT`` from where the checkpoint lies; flags given on the command line
    come later, so they override. Returns the new argv and what was taken (``None``: argv unchanged).

    Raises:
        LitGpuError: The checkpoint is not in a run folder with a ``config.yaml``, or the config names
            something the build policy refuses.
    """
    argv = list(argv)
    sub_index = next((i for i, a in enumerate(argv) if a in SUBCOMMANDS), None)
    if sub_index is None:
        return argv, None
    rest = argv[sub_index + 1 :]
    if any(a in ("-c", "--config", "--model") or a.startswith(("--config=", "--model=")) for a in argv):
        return argv, None
    ckpt = _option_value(rest, "--ckpt_path")
    if not ckpt or not Path(ckpt).is_file():
        return argv, None
    refuse_escaping_link(ckpt, ckpt)
    config = config_of_checkpoint(ckpt)
    if config is None:
        beside = Path(ckpt).parent.parent / CONFIG_NAME
        looked = f"looked for {beside} in a ROOT/NAME/version_N/{CHECKPOINTS} layout"
        raise LitGpuError(messages.NO_CONFIG_BESIDE.format(ckpt=ckpt, looked=looked))
    fields = rebuild_fields(config, trust_modules)
    inserted = ["--model", json.dumps(fields.model, default=str)]
    if fields.data is not None:
        inserted += ["--data", json.dumps(fields.data, default=str)]
    root = root_of_checkpoint(ckpt)
    if root is not None:
        inserted += ["--trainer.default_root_dir", str(root)]
    return argv[: sub_index + 1] + inserted + rest, fields

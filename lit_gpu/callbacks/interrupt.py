"""Leave a usable ``last.ckpt`` when training is interrupted (Ctrl+C / SIGINT, SIGTERM)."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from typing_extensions import override

from lit_gpu import messages

# Exit status of ``lit-gpu fit`` after an interrupt: 128 + SIGINT, the shell convention.
INTERRUPT_EXIT_CODE = 130

_interrupted: list[str] = []


def was_interrupted() -> bool:
    """Whether a fit in this process was interrupted and saved by :class:`CheckpointOnInterrupt`."""
    return bool(_interrupted)


class CheckpointOnInterrupt(Callback):
    """On KeyboardInterrupt (SIGINT) or SIGTERM during fit, save ``last.ckpt`` and say how to resume.

    The checkpoint goes to the first ModelCheckpoint's folder (or ``default_root_dir/checkpoints``)
    and is written atomically by the CLI's checkpoint IO. ``lit-gpu fit`` then exits with status
    130. Resume with ``--ckpt_path last``.
    """

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if not isinstance(exception, KeyboardInterrupt | SIGTERMException):
            return
        if trainer.state.fn != TrainerFn.FITTING or trainer.sanity_checking or trainer.fast_dev_run:
            return
        folder = next(
            (
                cb.dirpath
                for cb in trainer.checkpoint_callbacks
                if isinstance(cb, ModelCheckpoint) and cb.dirpath
            ),
            str(Path(trainer.default_root_dir) / "checkpoints"),
        )
        path = str(Path(folder) / f"{ModelCheckpoint.CHECKPOINT_NAME_LAST}{ModelCheckpoint.FILE_EXTENSION}")
        trainer.save_checkpoint(path)
        for cb in trainer.checkpoint_callbacks:
            if isinstance(cb, ModelCheckpoint):
                cb.last_model_path = path
        _interrupted.append(path)
        messages.tell(messages.INTERRUPTED.format(step=trainer.global_step, path=path))

"""lit_gpu's guarantees: callbacks every ``lit-gpu`` Trainer has, whatever ``trainer.callbacks`` holds.

They are not a default a config replaces. ``LitGpuCLI`` adds them to the Trainer it built the way Lightning
adds its own progress bar and checkpoint callback: a callback already on the Trainer that is an instance of
a guarantee's class (the user's own ``CheckpointOnInterrupt``, or ``OOMRecovery``, an ``OOMLoopName``)
takes that guarantee's place, and nothing else on the list is touched. A module's ``configure_callbacks``
replaces them by type as it replaces any callback (Lightning's ``_attach_model_callbacks``).

They are added to the built Trainer's ``callbacks`` list, not to ``Trainer(...)``'s arguments, so a
``trainer_class`` that is a factory or a Trainer subclass without a ``callbacks`` parameter gets them too.

One switch turns them off: ``LIT_GPU_GUARANTEES=false`` in the environment (:data:`SWITCH`). An environment
variable and not a config key: nothing read from a file switches a safety setting. Off, a run behaves as
Lightning's: a SIGTERM ends it with Lightning's "Received SIGTERM" and exit 0, and nothing is saved.

In Python without the CLI: ``pl.Trainer(callbacks=[*guarantee_callbacks(), ...])``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from lightning.pytorch.callbacks import BatchSizeFinder, Callback, LearningRateFinder

from lit_gpu import messages
from lit_gpu.callbacks.oom_loop import OOMLoopName
from lit_gpu.errors import LitGpuError
from lit_gpu.preemption import CheckpointOnInterrupt
from lit_gpu.resume.state import LoggingStateCallback, RNGStateCallback
from lit_gpu.run.loggers import RunFolderSync

__all__ = [
    "GUARANTEES",
    "SWITCH",
    "guarantee_callbacks",
    "guarantees_on",
    "install_guarantees",
    "with_guarantees",
]

#: the guarantee callbacks, in the order they run (first on the Trainer, after Lightning's tuner callbacks)
GUARANTEES: tuple[type[Callback], ...] = (
    RunFolderSync,  # DDP ranks write into rank 0's run folder: a run stays in its one folder
    RNGStateCallback,  # RNG states in checkpoints: a resume is exact
    LoggingStateCallback,  # the epoch's logged values in mid-epoch checkpoints: exact curves on a resume
    CheckpointOnInterrupt,  # SIGINT/SIGTERM: stop at a step boundary, save last.ckpt, one line, exit 130/143
    OOMLoopName,  # the one-line out-of-memory message names the loop that ran out
)

#: the environment variable that turns the guarantees off (``false``)
SWITCH = "LIT_GPU_GUARANTEES"


def guarantees_on(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the guarantees are on: :data:`SWITCH` unset, empty or ``true``; off with ``false``.

    The accepted values are jsonargparse's own for its boolean environment variables
    (``jsonargparse._common.get_env_var_bool``: ``true``/``false``/empty, any case); another value is the
    user's mistake (one line), never read as either.
    """
    raw = environ.get(SWITCH, "")
    value = raw.strip().lower()
    if value not in {"true", "false", ""}:
        raise LitGpuError(messages.GUARANTEES_SWITCH_INVALID.format(name=SWITCH, value=raw))
    return value != "false"


def guarantee_callbacks() -> list[Callback]:
    """A fresh instance of each of :data:`GUARANTEES`, for a Trainer built by hand."""
    return [cls() for cls in GUARANTEES]


def with_guarantees(callbacks: Sequence[Callback]) -> list[Callback]:
    """``callbacks`` with each guarantee it lacks added; an instance of a guarantee's class (or of a
    subclass) already there takes its place. The added ones go first, after Lightning's tuner callbacks
    (the order Lightning's ``_reorder_callbacks`` keeps), where the default config puts them."""
    missing = [cls() for cls in GUARANTEES if not any(isinstance(cb, cls) for cb in callbacks)]
    tuners = 0
    while tuners < len(callbacks) and isinstance(callbacks[tuners], BatchSizeFinder | LearningRateFinder):
        tuners += 1
    return [*callbacks[:tuners], *missing, *callbacks[tuners:]]


def install_guarantees(trainer: Any) -> None:
    """Add the guarantees ``trainer`` lacks to its callbacks, unless :data:`SWITCH` turns them off.

    Works on any Trainer, however it was built (a ``trainer_class`` factory, a subclass with its own
    ``__init__``): it edits the built Trainer's list, as the CLI's other callbacks after the build do.
    """
    if guarantees_on():
        trainer.callbacks = with_guarantees(list(trainer.callbacks))

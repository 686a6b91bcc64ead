"""Which loop ran out of memory: :class:`OOMLoopName` marks an out-of-memory error with the loop it came from,
so its one-line message (``lit-gpu: error: out of memory during validation ...``) names it.

A default callback; :class:`lit_gpu.callbacks.oom_recovery.OOMRecovery` (``--oom_recovery true``) is one too.
"""

from __future__ import annotations

from contextlib import suppress

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import RunningStage
from typing_extensions import override

from lit_gpu.explain import is_out_of_memory

__all__ = ["LOOP_ATTRIBUTE", "OOMLoopName", "loop_words"]


LOOP_ATTRIBUTE = "lit_gpu_loop"  # set on an out-of-memory exception: the loop it came from, in words
_LOOP_WORDS = {
    RunningStage.TRAINING: "training",
    RunningStage.SANITY_CHECKING: "the sanity check (validation before training)",
    RunningStage.VALIDATING: "validation",
    RunningStage.TESTING: "testing",
    RunningStage.PREDICTING: "prediction",
}
# the step each evaluation stage of Trainer.<fn> runs (the sanity check runs validation_step)
EVAL_STEPS = {"fit": ("validation_step",), "validate": ("validation_step",), "test": ("test_step",)}
EVAL_STEPS["predict"] = ("predict_step",)


def loop_words(trainer: pl.Trainer) -> str:
    """The loop ``trainer`` is running, in words ("training", "validation", ...)."""
    return _LOOP_WORDS.get(trainer.state.stage, "training")  # type: ignore[arg-type]


class OOMLoopName(Callback):
    """Marks an out-of-memory error with the loop it came from (``err.lit_gpu_loop``, e.g. "validation").

    Lightning resets the trainer's stage before the error reaches ``lit-gpu``; this hook runs first, so
    the one-line message can say "out of memory during validation" and not always "during training".
    """

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if is_out_of_memory(exception) and not hasattr(exception, LOOP_ATTRIBUTE):
            with suppress(AttributeError):  # an exception type with __slots__: the message says "training"
                setattr(exception, LOOP_ATTRIBUTE, loop_words(trainer))

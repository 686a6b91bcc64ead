"""What a run asks of a checkpoint, as one typed value built from the one read of it.

:func:`read` reads the file once (:func:`lit_gpu.checkpoints.read.inspect`: weights-only unless the
user's flag says otherwise, tensors memory-mapped) and keeps only what the run needs: the step and epoch
(which ``last`` is newest), the monitored scores (which ``best`` is best), the model class recorded in its
hyper-parameters (the config's class must match), the step a continued run logs from, and whether it is a
Lightning checkpoint at all. Nothing else of the file is kept, so the header is cheap to hand on.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from lit_gpu.checkpoints.read import CheckpointFacts, inspect, not_lightning
from lit_gpu.upstream.loops import batches_that_stepped, recorded_class_path, saved_loop_counters

__all__ = ["CheckpointHeader", "read", "read_held", "resume_log_step"]


@dataclass(frozen=True)
class CheckpointHeader:
    """The facts of one checkpoint file the run uses (plain values, no tensors).

    Attributes:
        kind: ``"lightning"`` (``Trainer.save_checkpoint`` wrote it) or ``"other"`` (a plain state_dict,
            a safetensors file, any other object: :attr:`problem` says which).
        step: ``global_step`` (``None``: absent or not an integer).
        epoch: ``epoch``.
        scores: ``(monitor, current_score)`` of each callback state that records one, in file order
            (``None``: a score that is not a finite number).
        class_path: The model class its hyper-parameters name (``_class_path``), if any (anything but a
            string kept as its ``repr``, so that it is compared and named, never trusted).
        log_step: The first step a fit resumed from it logs at (:func:`resume_log_step`).
        problem: Why it cannot start or resume a run (one line), or ``None``.
    """

    kind: Literal["lightning", "other"]
    step: int | None = None
    epoch: int | None = None
    scores: tuple[tuple[str | None, float | None], ...] = ()
    class_path: str | None = None
    log_step: int | None = None
    problem: str | None = None

    @classmethod
    def of(cls, path: str | os.PathLike, raw: Any) -> CheckpointHeader:
        """From what the checkpoint reader returned for ``path`` (its top-level object)."""
        return cls.built(raw, not_lightning(path, raw))

    @classmethod
    def from_facts(cls, facts: CheckpointFacts) -> CheckpointHeader:
        """From the reader's one look at a whole file (:func:`lit_gpu.checkpoints.read.inspect`)."""
        return cls.built(facts.header, facts.problem)

    @classmethod
    def built(cls, raw: Any, problem: str | None) -> CheckpointHeader:
        """From a checkpoint's top-level object and why it cannot start a run (``None``: it can)."""
        if not isinstance(raw, Mapping):
            return cls("other", problem=problem)
        hparams = raw.get("hyper_parameters")
        loops = raw.get("loops")
        # the loops' own counters where it has them: the step shown, chosen by and resumed at are one
        step, epoch = (_int(raw.get("global_step")), _int(raw.get("epoch")))
        if (
            isinstance(loops, Mapping)
            and (counters := saved_loop_counters(loops.get("fit_loop"))) is not None
        ):
            step, epoch = counters
        return cls(
            "lightning" if problem is None else "other",
            step=step,
            epoch=epoch,
            scores=_scores(raw.get("callbacks")),
            class_path=_class_path(recorded_class_path(hparams)),
            log_step=resume_log_step(raw),
            problem=problem,
        )

    def score(self, monitor: str | None) -> float | None:
        """The score recorded for ``monitor`` (``None``: the first one recorded)."""
        for name, value in self.scores:
            if monitor is None or name == monitor:
                return value
        return None


def read(path: str | os.PathLike, trust: bool = False, opt_out: str = "pass trust=True") -> CheckpointHeader:
    """Read ``path`` once and keep its header.

    Raises:
        lit_gpu.checkpoints.read.CheckpointError: Missing, empty, corrupt, a pickle payload (one line).
    """
    facts = inspect(path, trust=trust, opt_out=opt_out)
    if facts.unfinished is not None:
        raise facts.unfinished
    return CheckpointHeader.from_facts(facts)


def read_held(
    path: str | os.PathLike, trust: bool = False, opt_out: str = "pass trust=True"
) -> tuple[CheckpointHeader, io.BytesIO | None]:
    """:func:`read`, and the file's bytes it was read from: what the run's load then reads (one read)."""
    facts = inspect(path, trust=trust, opt_out=opt_out, hold=True)
    if facts.unfinished is not None:
        raise facts.unfinished
    return CheckpointHeader.from_facts(facts), facts.data


def resume_log_step(checkpoint: Any) -> int | None:
    """The first step a fit resumed from ``checkpoint`` logs metrics at; ``None`` if it cannot tell.

    Lightning logs at ``_batches_that_stepped`` (batches with an optimizer step; the checkpoint holds
    it), plus one when the save happened at a training batch end (before the counter moved).
    Checkpoints without loop state fall back to ``global_step``.
    """
    with contextlib.suppress(KeyError, TypeError, ValueError, AttributeError):
        loop = checkpoint["loops"]["fit_loop"]
        stepped = batches_that_stepped(loop)
        total = loop["epoch_loop.batch_progress"]["total"]
        at_batch_end = total["ready"] == total["started"] == total["processed"] == total["completed"] + 1
        return stepped + int(at_batch_end)
    step = checkpoint.get("global_step") if isinstance(checkpoint, Mapping) else None
    return int(step) if isinstance(step, int) else None


def _class_path(value: Any) -> str | None:
    return value if value is None or isinstance(value, str) else repr(value)[:200]


def _scores(callbacks: Any) -> tuple[tuple[str | None, float | None], ...]:
    found = []
    if isinstance(callbacks, Mapping):
        for state in callbacks.values():
            if isinstance(state, Mapping) and "current_score" in state:
                monitor = state.get("monitor")
                found.append(
                    (monitor if isinstance(monitor, str) else None, _float(state.get("current_score")))
                )
    return tuple(found)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    try:
        number = float(value)  # a 0-d tensor too
    except (TypeError, ValueError, RuntimeError):
        return None
    return number if math.isfinite(number) else None

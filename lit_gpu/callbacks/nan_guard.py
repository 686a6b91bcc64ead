"""Stop training at the first NaN/inf loss, before it reaches a checkpoint (on CPU: before the weights)."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.errors import LitGpuError
from lit_gpu.upstream import detect_anomaly


class NonFiniteLossError(LitGpuError):
    """The training loss became NaN or infinite."""


class _Verdicts:
    """GPU steps' "loss is finite" bytes, copied into a ring of pinned host bytes without waiting.

    A slot is set to ``PENDING`` by the host before the device's copy is queued, so reading it tells
    whether the copy has landed (0 or 1) without an event or a wait. Per step that is one kernel
    (``isfinite``) and one small copy; NaN versus inf is worked out from the kept loss only when a
    step was bad.
    """

    PENDING = 2

    def __init__(self, device: torch.device, size: int = 64, pin: bool = True) -> None:
        self.device = device
        self._bytes = torch.full((size,), self.PENDING, dtype=torch.uint8, pin_memory=pin)
        self._slots = [self._bytes[i] for i in range(size)]  # 0-dim views: the copies' targets
        self._host = self._bytes.numpy()  # reads memory as it is: no wait
        self._queue: deque[tuple[int, tuple[int, int, int], torch.Tensor]] = deque()
        self._next = 0

    def __len__(self) -> int:
        return len(self._queue)

    def push(self, loss: torch.Tensor, where: tuple[int, int, int]) -> None:
        """Queue the check of ``loss`` (already detached), made at ``where`` (step, epoch, batch)."""
        if self.full():
            raise RuntimeError("the verdict ring is full: pop() the oldest first")
        slot = self._next
        self._next = (slot + 1) % len(self._slots)
        self._host[slot] = self.PENDING
        finite = torch.isfinite(loss) if loss.dim() == 0 else torch.isfinite(loss).all()
        self._slots[slot].copy_(finite.view(torch.uint8), non_blocking=True)
        self._queue.append((slot, where, loss))

    def full(self) -> bool:
        return len(self._queue) == len(self._slots)

    def arrived(self) -> bool:
        """Whether the oldest queued verdict has landed (False when none is queued)."""
        return bool(self._queue) and self._host[self._queue[0][0]] != self.PENDING

    def pop(self) -> tuple[tuple[int, int, int], str | None]:
        """The oldest verdict (waiting for it if needed): where it was made and "NaN", "inf" or None."""
        if not self.arrived():
            self._wait()
        slot, where, loss = self._queue.popleft()
        if self._host[slot]:
            return where, None
        return where, "NaN" if bool(torch.isnan(loss).any()) else "inf"  # error path: may wait

    def clear(self) -> None:
        self._queue.clear()

    def _wait(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # every stream: the copy's stream is not recorded


class NaNGuard(Callback):
    """Raise :class:`NonFiniteLossError` naming the global step when the loss is NaN or inf.

    On CPU it checks the loss before ``backward``, so the bad step never updates the weights. On a
    GPU a check that waits for the loss would stall the host every step; there the verdict is
    copied to pinned host memory without waiting and read when it has arrived (usually one or two
    steps later), and at the latest before any checkpoint is written and at the end of training
    (the only host-device waits it adds). Either way raising stops training before a checkpoint
    holds the bad weights: the last good ``last.ckpt`` stays on disk.

    Within the first :attr:`RESUMED_STEPS` optimizer steps of a fit resumed from a checkpoint, the line names
    that checkpoint as the likely cause (a saved optimizer state or weights that blow up, not the settings
    the run had trained with until it was saved) and the way out: ``--fresh_optimizer true`` or an
    earlier checkpoint.

    Where the user asked Lightning to answer a bad loss itself, ``Trainer(detect_anomaly=True)``
    (autograd's anomaly report) or a ``SpikeDetection`` callback, it stands aside for that fit.

    Args:
        enabled: Turn the check off (``--nan_guard.enabled false``), e.g. for fp16 experiments that
            expect occasional overflow.
        check_every_n_steps: Check every N optimizer steps.
    """

    #: with whole-step capture (``--speed.cuda_graph``) the check runs after each replayed step, on its
    #: loss: on a GPU it is deferred either way (see above), so what it stops and keeps is the same
    graph_replay_hooks = ("on_before_backward",)
    #: a bad loss within this many optimizer steps of a resume is blamed on the checkpoint, not the settings
    RESUMED_STEPS = 10

    def __init__(self, enabled: bool = True, check_every_n_steps: int = 1) -> None:
        super().__init__()
        self.enabled = enabled
        self.check_every_n_steps = max(1, int(check_every_n_steps))
        self._verdicts: _Verdicts | None = None  # made at the first GPU step
        self._deferring = False  # this fit asked Lightning itself to answer non-finite losses
        # the checkpoint this fit restored, its step, and whether its optimizers were started fresh
        self._resumed: tuple[str, int, bool] | None = None
        self._saved = False  # a checkpoint was saved in this fit

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Stand aside where the user asked Lightning to answer a bad loss: ``detect_anomaly=True``
        (autograd's report names the op that made the NaN) or a ``SpikeDetection`` callback."""
        from lightning.pytorch.callbacks.spike import SpikeDetection

        self._deferring = detect_anomaly(trainer) or any(
            isinstance(cb, SpikeDetection) for cb in trainer.callbacks
        )
        ckpt = getattr(trainer, "ckpt_path", None)  # Lightning's: the checkpoint this fit restored
        fresh = getattr(trainer.strategy.checkpoint_io, "fresh_optimizer", False) is True if ckpt else False
        self._resumed = (str(ckpt), trainer.global_step, fresh) if ckpt else None
        self._saved = False

    @override
    def on_before_backward(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor
    ) -> None:
        if not self.enabled or self._deferring:
            return
        if self.check_every_n_steps > 1 and trainer.global_step % self.check_every_n_steps:
            return
        if not loss.is_cuda:  # no device to wait for: check now
            if math.isfinite(loss.item()) if loss.numel() == 1 else bool(torch.isfinite(loss).all()):
                return
            kind = "NaN" if bool(torch.isnan(loss).any()) else "inf"
            self._raise(trainer, kind, self._where(trainer), deferred=False)
        loss = loss.detach()
        verdicts = self._verdicts
        if verdicts is None or verdicts.device != loss.device:
            self.flush(trainer)
            verdicts = self._verdicts = _Verdicts(loss.device)
        while verdicts.arrived() or verdicts.full():  # landed (no wait), or a whole ring behind (waits)
            self._check(trainer, verdicts)
        verdicts.push(loss, self._where(trainer))

    @staticmethod
    def _where(trainer: pl.Trainer) -> tuple[int, int, int]:
        return trainer.global_step, trainer.current_epoch, trainer.fit_loop.epoch_loop.batch_idx

    def flush(self, trainer: pl.Trainer) -> None:
        """Wait for the outstanding GPU checks and raise on a non-finite one."""
        while self._verdicts:
            self._check(trainer, self._verdicts)

    def _check(self, trainer: pl.Trainer, verdicts: _Verdicts) -> None:
        where, kind = verdicts.pop()
        if kind is not None:
            verdicts.clear()
            self._raise(trainer, kind, where, deferred=True)

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self.flush(trainer)  # raising here aborts the save: no checkpoint holds non-finite weights
        self._saved = True

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.flush(trainer)

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if isinstance(exception, NonFiniteLossError) and self._verdicts is not None:
            self._verdicts.clear()  # otherwise a save on the way out (Ctrl+C) still checks them

    def _raise(self, trainer: pl.Trainer, kind: str, where: tuple[int, int, int], deferred: bool) -> None:
        step, epoch, batch = where  # the batch in progress: 1-based, as the progress lines count batches done
        point = messages.fit_point(trainer, batch + 1, epoch)
        kept = next(
            (
                cb.last_model_path or cb.best_model_path
                for cb in trainer.checkpoint_callbacks
                if isinstance(cb, ModelCheckpoint) and (cb.last_model_path or cb.best_model_path)
            ),
            None,
        )
        stopped = (
            f"stopped at step {messages.logged_step(trainer)}, before any checkpoint held it,"
            if deferred
            else "stopped before the bad update"
        )
        resumed = self._resumed
        if resumed is not None and 0 <= step - resumed[1] < self.RESUMED_STEPS:
            kept = kept if self._saved else None  # what the checkpoint callbacks restored is the resumed one
            raise NonFiniteLossError(_resumed_line(kind, step, point, stopped, resumed, kept))
        where_kept = f"kept the last good checkpoint {kept}" if kept else "no checkpoint had been saved yet"
        raise NonFiniteLossError(
            f"loss became {kind} at step {step} ({point}); {stopped} and "
            f"{where_kept}; try a lower learning rate, --trainer.gradient_clip_val 1.0, bf16 instead of "
            "fp16, or check the data for NaNs"
        )


def _resumed_line(
    kind: str, step: int, point: str, stopped: str, resumed: tuple[str, int, bool], kept: Any
) -> str:
    """The line for a bad loss soon after a resume: the checkpoint is the likely cause, not the settings."""
    ckpt, start, fresh = resumed
    steps = step - start
    counted = f"{steps} optimizer step{'' if steps == 1 else 's'}"
    left = "left the checkpoint as it was" if kept is None else f"the last checkpoint saved since is {kept}"
    if fresh:
        cause = (
            "its weights are the likely cause (the optimizers were started fresh), or a setting changed "
            "for this resume: resume from an earlier checkpoint"
        )
    else:
        cause = (
            "its saved optimizer state or weights are the likely cause, not the settings it trained with: "
            "resume it with --fresh_optimizer true (its weights, the optimizers started fresh), or from an "
            "earlier checkpoint"
        )
    return (
        f"loss became {kind} at step {step} ({point}), {counted} after resuming from {ckpt}; {stopped} and "
        f"{left}; {cause}"
    )

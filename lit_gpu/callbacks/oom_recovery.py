"""Out of memory is not the end of a run: split the batch into micro-batches and retry the same step.

``lit-gpu fit --oom_recovery true`` adds :class:`OOMRecovery`. When a training step raises
``torch.OutOfMemoryError`` (or the CUDA OOM ``RuntimeError``), the step's memory is released, the
micro-batch is halved (the number of micro-batches doubles) and the *same* batch is trained again:
the effective batch, the number of optimizer steps and the LR schedule do not change. The micro-batch
that fits is kept in the checkpoint, so a resumed run starts with it.

How one step runs (``training_step`` is wrapped; the data loader batch is never changed):

1. The batch of ``N`` samples is cut into micro-batches of ``m`` samples (tensors along dim 0). For
   each, the module's own ``training_step`` computes the loss (forward), and the loss scaled by
   ``m / N`` (and by the fp16 GradScaler, as Lightning would) is back-propagated at once. The
   gradients add up to the full-batch gradient of a mean loss.
2. After every forward and every backward all processes agree whether any of them ran out of memory
   (one tiny all-reduce). No collective runs inside a micro-batch's forward or backward: under DDP
   the gradients are accumulated locally (the reducer ignores backward passes run inside the DDP
   forward, as under ``no_sync``). So an OOM on one rank never leaves another waiting in an
   all-reduce; every rank halves its micro-batch at the same point.
3. The batch's gradients are taken off the parameters and handed back by the returned loss: its value
   is the full-batch loss and its backward *delivers* the stored gradients (times the incoming
   gradient). Lightning then runs its usual ``zero_grad``, ``backward``, hooks, GradScaler, gradient
   clipping, DDP gradient all-reduce (now, after everyone agreed) and optimizer step, unchanged.

An OOM in a forward pass keeps the gradients of the micro-batches already done and re-splits the
rest; an OOM in a backward pass (gradients partly written) drops this batch's gradients and starts
the batch again. Gradients of earlier batches of a Lightning ``accumulate_grad_batches`` window are
kept aside during the step and never touched.

Evaluation (the sanity check, validation, test and predict) is split the same way, with its own
micro-batch (``eval_micro_batch_size``): see :mod:`lit_gpu.callbacks.micro_batches`.

On a GPU the recovery turns on PyTorch's *expandable segments* for the run, unless
``PYTORCH_CUDA_ALLOC_CONF`` names them (:mod:`lit_gpu.callbacks.cuda_allocator` says why): with them a
retry needs no more halvings than the memory requires (seen on an H200: batch 64 -> micro-batch 32, not 16).

Without recovery, :class:`~lit_gpu.callbacks.oom_loop.OOMLoopName` names the loop in the OOM message.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy
from lightning.pytorch.utilities.data import extract_batch_size
from torch import Tensor, nn
from typing_extensions import override

from lit_gpu import messages, numbering, oom_lines
from lit_gpu.errors import LitGpuError
from lit_gpu.strategies.dp import DataParallelStrategy
from lit_gpu.translate import is_out_of_memory

__all__ = ["LOOP_ATTRIBUTE", "OOMLoopName", "OOMRecovery", "has_batchnorm", "loop_words"]

from lit_gpu.callbacks.cuda_allocator import set_expandable_segments
from lit_gpu.callbacks.micro_batches import (
    _combine,
    _cut,
    _DeliverGradients,
    _HeldLogs,
    _loss_of,
    _MetricGuard,
    backward_micro,
    count_failures,
    has_batchnorm,
)
from lit_gpu.callbacks.oom_loop import EVAL_STEPS, LOOP_ATTRIBUTE, OOMLoopName, loop_words


class OOMRecovery(OOMLoopName):
    """On out of memory in a step: halve the micro-batch, keep the effective batch (and the metrics), go on.

    Added by ``lit-gpu fit --oom_recovery true``; usable with any Lightning Trainer and any
    LightningModule with automatic optimization whose loss is a mean over the batch. Supported
    strategies: one device, ``ddp`` (and its spawn/fork variants) and lit_gpu's ``dp`` (each
    micro-batch is what DataParallel splits across the GPUs).

    Args:
        micro_batch_size: Start with this micro-batch (samples per forward/backward) instead of the
            whole batch; ``None`` (default) starts with the whole batch and halves only on OOM. A
            checkpoint's value (from an earlier recovery) wins on resume.
        eval_micro_batch_size: The same for the evaluation steps (sanity check, validation, test,
            predict).
        expandable_segments: On a CUDA device, turn on PyTorch's expandable segments from ``setup`` to
            ``teardown`` (module docstring), unless ``PYTORCH_CUDA_ALLOC_CONF`` names them.
    """

    def __init__(
        self,
        micro_batch_size: int | None = None,
        eval_micro_batch_size: int | None = None,
        expandable_segments: bool = True,
    ) -> None:
        super().__init__()
        for name, value in (
            ("micro_batch_size", micro_batch_size),
            ("eval_micro_batch_size", eval_micro_batch_size),
        ):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {value}")
        self.micro_batch_size = micro_batch_size
        self.eval_micro_batch_size = eval_micro_batch_size
        self.expandable_segments = expandable_segments
        self._expanded = False  # whether setup turned expandable segments on (teardown turns them off)
        self.adaptations = 0
        self._restored = False
        self._announced = False
        self._guards: dict[str, _MetricGuard] = {}

    # ---- state in checkpoints ---------------------------------------------------------------
    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "micro_batch_size": self.micro_batch_size,
            "eval_micro_batch_size": self.eval_micro_batch_size,
        }

    def restore_contract(self, pl_module: Any = None) -> list[Any]:
        """The micro-batch sizes it halved to: None or a positive int."""
        from lit_gpu.checkpoints import contracts as c

        size = c.optional(c.integer(1, 2**31))
        spec = c.fields({"micro_batch_size": size, "eval_micro_batch_size": size})
        return [c.Contract(("callbacks", self.state_key), spec)]

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        micro = state_dict.get("micro_batch_size")
        if micro is not None:
            self.micro_batch_size = int(micro)
            self._restored = True
            self._announced = False
        eval_micro = state_dict.get("eval_micro_batch_size")
        if eval_micro is not None:
            self.eval_micro_batch_size = int(eval_micro)

    # ---- install / remove the wrapper -------------------------------------------------------
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        strategy = trainer.strategy
        if not isinstance(strategy, SingleDeviceStrategy | DDPStrategy | DataParallelStrategy):
            raise LitGpuError(oom_lines.OOM_RECOVERY_STRATEGY.format(strategy=type(strategy).__name__))
        if stage == "fit":
            if not pl_module.automatic_optimization:
                raise LitGpuError(
                    oom_lines.OOM_RECOVERY_MANUAL_OPTIMIZATION.format(module=type(pl_module).__name__)
                )
            self._wrap(pl_module, "training_step", self._step, trainer)
        for name in EVAL_STEPS.get(stage, ()):
            self._wrap(pl_module, name, self._eval_step, trainer)
        if self.expandable_segments and not self._expanded and strategy.root_device.type == "cuda":
            self._expanded = set_expandable_segments(True)

    def _guard(self, module: pl.LightningModule, kind: str) -> _MetricGuard:
        guard = self._guards.get(kind)
        if guard is None:
            guard = self._guards[kind] = _MetricGuard(module)
        return guard

    def _wrap(
        self, module: pl.LightningModule, name: str, step: Callable[..., Any], trainer: pl.Trainer
    ) -> None:
        """Replace ``module.<name>`` (on the instance) by ``step(trainer, module, original, ...)``."""
        current = module.__dict__.get(name)
        if getattr(current, "_lit_gpu_oom_recovery", None) is self:
            return
        original: Callable[..., Any] = getattr(module, name)

        def wrapped(batch: Any, *args: Any, **kwargs: Any) -> Any:
            return step(trainer, module, original, batch, *args, **kwargs)

        wrapped.__wrapped__ = original  # type: ignore[attr-defined]  # Lightning reads the signature
        wrapped.__doc__ = original.__doc__
        wrapped._lit_gpu_oom_recovery = self  # type: ignore[attr-defined]
        setattr(module, name, wrapped)

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # after strategy.setup, when trainer.sync_batchnorm has converted the layers
        if trainer.world_size > 1 and any(isinstance(m, nn.SyncBatchNorm) for m in pl_module.modules()):
            raise LitGpuError(oom_lines.OOM_RECOVERY_SYNC_BATCHNORM)

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._guards = {}
        if self._expanded:
            set_expandable_segments(False)
            self._expanded = False
        for name in ("training_step", "validation_step", "test_step", "predict_step"):
            if getattr(pl_module.__dict__.get(name), "_lit_gpu_oom_recovery", None) is self:
                del pl_module.__dict__[name]

    # ---- one training step --------------------------------------------------------------------
    def _step(
        self,
        trainer: pl.Trainer,
        module: pl.LightningModule,
        original: Callable[..., Any],
        batch: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        if not any(cb is self for cb in trainer.callbacks):
            # detached: Lightning's batch-size and LR finders empty trainer.callbacks during their
            # trials, and --tune_batch_size must see its OOMs
            return original(batch, *args, **kwargs)
        total = extract_batch_size(batch)
        batch_idx = args[0] if args else kwargs.get("batch_idx", trainer.fit_loop.epoch_loop.batch_idx)
        params = [p for p in module.parameters() if p.requires_grad]
        # Lightning zeroes the gradients right after training_step on the first batch of an
        # accumulation window; free them now instead (less memory during the step), else set aside.
        window_start = batch_idx % trainer.accumulate_grad_batches == 0
        kept = [None if window_start else p.grad for p in params]
        for p in params:
            p.grad = None
        self._announce_restored(total)

        scaler = getattr(trainer.precision_plugin, "scaler", None)
        held = _HeldLogs(module)  # self.log of the micro-batches: once, for the whole batch
        guard = self._guard(module, "train")
        guard.step_start()
        at_start = guard.snapshot()  # a failed backward starts the batch again: metrics too
        value: Tensor | None = None
        output: Any = None
        done = 0
        while done < total:
            size = min(self.micro_batch_size or total, total - done)
            failed, oom_text = False, None
            out = loss = None
            before = guard.snapshot() if done else at_start
            with held.attempt(size):
                try:
                    out = original(_cut(batch, done, done + size, total), *args, **kwargs)
                    loss = _loss_of(out)
                except Exception as err:  # noqa: BLE001 - only OOM is handled, the rest re-raised
                    if not is_out_of_memory(err):
                        raise
                    failed, oom_text = True, messages.first_line(err)
            failures = count_failures(trainer, failed)
            if failures:
                out = loss = None  # drop this micro-batch's graph before releasing memory
                guard.restore(before)
                self._adapt(trainer, module, size, total, failures, oom_text)
                continue  # gradients of the finished micro-batches stay
            if loss is not None:
                try:
                    backward_micro(module, loss * (size / total), scaler)
                except Exception as err:  # noqa: BLE001
                    if not is_out_of_memory(err):
                        raise
                    failed, oom_text = True, messages.first_line(err)
                failures = count_failures(trainer, failed)
                if failures:
                    out = loss = None
                    for p in params:  # partly written by the failed backward: start the batch again
                        p.grad = None
                    value, output, done = None, None, 0
                    held.drop_all()
                    guard.restore(at_start)
                    self._adapt(trainer, module, size, total, failures, oom_text)
                    continue
                part = loss.detach().float() * (size / total)
                value = part if value is None else value + part
            held.keep()
            output = out
            done += size
        held.commit()
        guard.step_end()

        grads = [p.grad for p in params]
        for p, g in zip(params, kept, strict=True):
            p.grad = g
        if value is None:
            return None  # every micro-batch was skipped (training_step returned None)
        ones = torch.ones((), device=value.device)
        scale = scaler.scale(ones) if scaler is not None else ones  # the factor the stored grads carry
        loss = _DeliverGradients.apply(value, [grads], scale.float(), *params)
        if isinstance(output, dict):
            return {**output, "loss": loss}
        return loss

    # ---- one evaluation step (sanity check, validation, test, predict) ----------------------------
    def _eval_step(
        self,
        trainer: pl.Trainer,
        module: pl.LightningModule,
        original: Callable[..., Any],
        batch: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        if not any(cb is self for cb in trainer.callbacks):
            return original(batch, *args, **kwargs)  # detached (see _step)
        total = extract_batch_size(batch)
        batch_idx = args[0] if args else kwargs.get("batch_idx", 0)
        guard = self._guard(module, "eval")
        guard.step_start()
        held = _HeldLogs(module)
        outputs: list[Any] = []
        sizes: list[int] = []
        done = 0
        while done < total:
            size = min(self.eval_micro_batch_size or total, total - done)
            snapshot = guard.snapshot()
            failed, oom_text, out = False, None, None
            with held.attempt(size):
                try:
                    out = original(_cut(batch, done, done + size, total), *args, **kwargs)
                except Exception as err:  # noqa: BLE001 - only OOM is handled, the rest re-raised
                    if not is_out_of_memory(err):
                        raise
                    failed, oom_text = True, messages.first_line(err)
            failures = count_failures(trainer, failed)
            if failures:  # this try's logs are dropped and its metric updates undone, on every process
                out = None
                guard.restore(snapshot)
                self._adapt(trainer, module, size, total, failures, oom_text, batch_idx=batch_idx)
                continue
            held.keep()
            outputs.append(out)
            sizes.append(size)
            done += size
        held.commit()
        guard.step_end()
        return _combine(outputs, sizes) if outputs else None

    def _adapt(
        self,
        trainer: pl.Trainer,
        module: pl.LightningModule,
        size: int,
        total: int,
        failures: int,
        oom_text: str | None,
        batch_idx: int | None = None,
    ) -> None:
        """Release the failed attempt's memory and halve the micro-batch, or give up at 1 sample.

        ``batch_idx`` is given for an evaluation step (its own micro-batch), ``None`` for training.
        """
        gc.collect()  # the exception's frames held the failed forward's tensors
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.empty_cache()
        if size <= 1:
            raise torch.OutOfMemoryError(
                oom_text or "CUDA out of memory on another process, even with a micro-batch of 1 sample"
            )
        evaluating = batch_idx is not None
        before = (self.eval_micro_batch_size if evaluating else self.micro_batch_size) or total
        micro = (size + 1) // 2
        if evaluating:
            self.eval_micro_batch_size = micro
        else:
            self.micro_batch_size = micro
        self.adaptations += 1
        was = f"batch {total}" if before >= total else f"batch {total} (micro-batch {before})"
        count = math.ceil(total / micro)
        if evaluating:
            line = oom_lines.OOM_ADAPTED_EVAL.format(
                loop=loop_words(trainer), index=batch_idx, was=was, micro=micro, count=count
            )
        else:
            batch = trainer.fit_loop.epoch_loop.batch_idx + 1  # the batch in progress, counted from 1
            point = numbering.fit_point(trainer, batch)
            line = oom_lines.OOM_ADAPTED.format(
                step=trainer.global_step, point=point, was=was, micro=micro, count=count
            )
        if trainer.world_size > 1:
            line += oom_lines.OOM_ADAPTED_PROCESSES.format(world=trainer.world_size, failed=failures)
        if not evaluating and has_batchnorm(module):  # evaluation uses the running statistics
            line += oom_lines.OOM_ADAPTED_BATCHNORM.format(micro=micro, total=total)
        messages.tell(line)

    def _announce_restored(self, total: int) -> None:
        if self._announced:
            return
        self._announced = True
        micro = self.micro_batch_size
        if self._restored and micro and micro < total:
            messages.tell(
                oom_lines.MICRO_BATCH_FROM_CHECKPOINT.format(micro=micro, count=math.ceil(total / micro))
            )

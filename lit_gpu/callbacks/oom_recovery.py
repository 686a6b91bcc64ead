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
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy
from lightning.pytorch.utilities.data import extract_batch_size
from lightning_utilities.core.apply_func import apply_to_collection
from torch import Tensor, nn
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.errors import LitGpuError
from lit_gpu.strategies.dp import DataParallelStrategy
from lit_gpu.translate import is_out_of_memory

__all__ = ["OOMRecovery", "has_batchnorm"]

_BATCHNORM = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.LazyBatchNorm1d,
    nn.LazyBatchNorm2d,
    nn.LazyBatchNorm3d,
    nn.SyncBatchNorm,
)


def has_batchnorm(module: nn.Module) -> bool:
    """Whether ``module`` contains BatchNorm layers (their statistics depend on the micro-batch)."""
    return any(isinstance(m, _BATCHNORM) for m in module.modules())


class _DeliverGradients(torch.autograd.Function):
    """A loss whose value is given and whose backward hands precomputed gradients to the parameters.

    ``backward`` returns ``stored * grad_output / scale``: exactly what a backward of the real
    full-batch loss would produce for the same incoming gradient (``scale`` is the GradScaler factor
    the stored gradients already carry, 1 without one). The stored tensors are handed over, not
    copied, so AccumulateGrad adopts them when ``.grad`` is empty.
    """

    @staticmethod
    def forward(ctx: Any, value: Tensor, holder: list, scale: Tensor, *params: Tensor) -> Tensor:
        ctx.holder = holder
        ctx.save_for_backward(scale)
        return value.detach().clone()

    @staticmethod
    def backward(ctx: Any, grad_output: Tensor) -> tuple[Tensor | None, ...]:
        (scale,) = ctx.saved_tensors
        grads = ctx.holder.pop() if ctx.holder else []
        ctx.holder = None
        factor = grad_output.float() / scale
        out = tuple(None if g is None else g.mul_(factor.to(g.dtype)) for g in grads)
        return (None, None, None, *out)


def _cut(batch: Any, start: int, end: int, total: int) -> Any:
    """Samples ``start:end`` of ``batch``: every tensor whose first dimension is the batch is sliced."""
    if start == 0 and end == total:
        return batch
    return apply_to_collection(
        batch, Tensor, lambda t: t[start:end] if t.dim() > 0 and t.shape[0] == total else t
    )


def _loss_of(output: Any) -> Tensor | None:
    if isinstance(output, dict):
        return output.get("loss")
    return output if isinstance(output, Tensor) else None


class OOMRecovery(Callback):
    """On out of memory in a training step: halve the micro-batch, keep the effective batch, go on.

    Added by ``lit-gpu fit --oom_recovery true``; usable with any Lightning Trainer and any
    LightningModule with automatic optimization whose loss is a mean over the batch. Supported
    strategies: one device, ``ddp`` (and its spawn/fork variants) and lit_gpu's ``dp`` (each
    micro-batch is what DataParallel splits across the GPUs).

    Args:
        micro_batch_size: Start with this micro-batch (samples per forward/backward) instead of the
            whole batch; ``None`` (default) starts with the whole batch and halves only on OOM. A
            checkpoint's value (from an earlier recovery) wins on resume.
    """

    def __init__(self, micro_batch_size: int | None = None) -> None:
        super().__init__()
        if micro_batch_size is not None and micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1 or None, got {micro_batch_size}")
        self.micro_batch_size = micro_batch_size
        self.adaptations = 0
        self._restored = False
        self._announced = False

    # ---- state in checkpoints ---------------------------------------------------------------
    @override
    def state_dict(self) -> dict[str, Any]:
        return {"micro_batch_size": self.micro_batch_size}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        micro = state_dict.get("micro_batch_size")
        if micro is not None:
            self.micro_batch_size = int(micro)
            self._restored = True
            self._announced = False

    # ---- install / remove the wrapper -------------------------------------------------------
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        if not pl_module.automatic_optimization:
            raise LitGpuError(
                messages.OOM_RECOVERY_MANUAL_OPTIMIZATION.format(module=type(pl_module).__name__)
            )
        strategy = trainer.strategy
        if not isinstance(strategy, SingleDeviceStrategy | DDPStrategy | DataParallelStrategy):
            raise LitGpuError(messages.OOM_RECOVERY_STRATEGY.format(strategy=type(strategy).__name__))
        current = pl_module.__dict__.get("training_step")
        if getattr(current, "_lit_gpu_oom_recovery", None) is self:
            return
        original: Callable[..., Any] = pl_module.training_step

        def training_step(batch: Any, *args: Any, **kwargs: Any) -> Any:
            return self._step(trainer, pl_module, original, batch, *args, **kwargs)

        training_step.__wrapped__ = original  # type: ignore[attr-defined]  # Lightning reads the signature
        training_step.__doc__ = original.__doc__
        training_step._lit_gpu_oom_recovery = self  # type: ignore[attr-defined]
        pl_module.training_step = training_step  # type: ignore[method-assign]

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # after strategy.setup, when trainer.sync_batchnorm has converted the layers
        if trainer.world_size > 1 and any(isinstance(m, nn.SyncBatchNorm) for m in pl_module.modules()):
            raise LitGpuError(messages.OOM_RECOVERY_SYNC_BATCHNORM)

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if getattr(pl_module.__dict__.get("training_step"), "_lit_gpu_oom_recovery", None) is self:
            del pl_module.__dict__["training_step"]

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
        value: Tensor | None = None
        output: Any = None
        done = 0
        while done < total:
            size = min(self.micro_batch_size or total, total - done)
            failed, oom_text = False, None
            out = loss = None
            try:
                out = original(_cut(batch, done, done + size, total), *args, **kwargs)
                loss = _loss_of(out)
            except Exception as err:  # noqa: BLE001 - only OOM is handled, the rest re-raised
                if not is_out_of_memory(err):
                    raise
                failed, oom_text = True, messages.first_line(err)
            failures = self._count_failures(trainer, failed)
            if failures:
                out = loss = None  # drop this micro-batch's graph before releasing memory
                self._adapt(trainer, module, size, total, failures, oom_text)
                continue  # gradients of the finished micro-batches stay
            if loss is not None:
                try:
                    self._backward(module, loss * (size / total), scaler)
                except Exception as err:  # noqa: BLE001
                    if not is_out_of_memory(err):
                        raise
                    failed, oom_text = True, messages.first_line(err)
                failures = self._count_failures(trainer, failed)
                if failures:
                    out = loss = None
                    for p in params:  # partly written by the failed backward: start the batch again
                        p.grad = None
                    value, output, done = None, None, 0
                    self._adapt(trainer, module, size, total, failures, oom_text)
                    continue
                part = loss.detach().float() * (size / total)
                value = part if value is None else value + part
            output = out
            done += size

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

    @staticmethod
    def _backward(module: pl.LightningModule, loss: Tensor, scaler: Any) -> None:
        """Back-propagate one micro-batch as Lightning would (fp16 GradScaler, the module's backward hook)."""
        module.backward(scaler.scale(loss) if scaler is not None else loss)

    @staticmethod
    def _count_failures(trainer: pl.Trainer, failed: bool) -> int:
        """How many processes ran out of memory; every process gets the same answer (one all-reduce)."""
        if trainer.world_size == 1:
            return int(failed)
        flag = torch.tensor(1.0 if failed else 0.0, device=trainer.strategy.root_device)
        return round(trainer.strategy.reduce(flag, reduce_op="sum").item())

    def _adapt(
        self,
        trainer: pl.Trainer,
        module: pl.LightningModule,
        size: int,
        total: int,
        failures: int,
        oom_text: str | None,
    ) -> None:
        """Release the failed attempt's memory and halve the micro-batch, or give up at 1 sample."""
        gc.collect()  # the exception's frames held the failed forward's tensors
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.empty_cache()
        if size <= 1:
            raise torch.OutOfMemoryError(
                oom_text or "CUDA out of memory on another process, even with a micro-batch of 1 sample"
            )
        before = self.micro_batch_size or total
        micro = self.micro_batch_size = (size + 1) // 2
        self.adaptations += 1
        was = f"batch {total}" if before >= total else f"batch {total} (micro-batch {before})"
        line = messages.OOM_ADAPTED.format(
            step=trainer.global_step, was=was, micro=micro, count=math.ceil(total / micro)
        )
        if trainer.world_size > 1:
            line += messages.OOM_ADAPTED_PROCESSES.format(world=trainer.world_size, failed=failures)
        if has_batchnorm(module):
            line += messages.OOM_ADAPTED_BATCHNORM.format(micro=micro, total=total)
        messages.tell(line)

    def _announce_restored(self, total: int) -> None:
        if self._announced:
            return
        self._announced = True
        micro = self.micro_batch_size
        if self._restored and micro and micro < total:
            messages.tell(
                messages.MICRO_BATCH_FROM_CHECKPOINT.format(micro=micro, count=math.ceil(total / micro))
            )

"""Shared LightningModule logic: one ``_step`` for every stage, injectable optimizer and scheduler."""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import nn
from typing_extensions import Self, override

from lit_gpu import messages
from lit_gpu.checkpoints.build import NET_SPEC_KEY, net_spec
from lit_gpu.errors import LitGpuError
from lit_gpu.explain import beyond_float32, init_arg_error, net_input_mismatch
from lit_gpu.fastpath import PlainHookName
from lit_gpu.resume.state import LOGGING_STATE_KEY
from lit_gpu.upstream import attached_trainer, loggers_record_this_step, restricted_classmethod


def _one_param() -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.zeros(1))]


def _build(key: str, factory: Any, arg: Any) -> Any:
    """``factory(arg)``; a config init_arg torch refuses (``lr: -1``, ``momentum: null``) becomes one line."""
    if (huge := beyond_float32(factory)) is not None:
        reason = f"{huge[1]!r} is beyond float32's range (at most 3.4e+38), the parameters' precision"
        raise LitGpuError(
            messages.BAD_OPTIMIZER_SETTING.format(key=f"{key}.init_args.{huge[0]}", reason=reason)
        )
    try:
        return factory(arg)
    except (ValueError, TypeError) as err:
        make_arg = _one_param if key == "model.optimizer" else lambda: torch.optim.SGD(_one_param(), lr=0.1)
        message = init_arg_error(key, factory, err, make_arg)
        if message is None:
            raise
        raise LitGpuError(message) from err


class LitModule(PlainHookName, pl.LightningModule):
    """Base module: wraps ``net`` and runs the same ``_step(batch, stage)`` for train/val/test.

    Subclass it and override:
        * ``compute_loss(outputs, targets)`` to change the loss;
        * ``update_metrics(outputs, targets, stage)`` to add metrics.

    Args:
        net: Any ``nn.Module`` mapping inputs to outputs. Available as ``self.net``.
        optimizer: Callable ``params -> Optimizer`` (LightningCLI injects it from ``--optimizer``).
        scheduler: Optional callable ``optimizer -> LRScheduler`` (``--lr_scheduler`` in the CLI).
        scheduler_interval: ``"epoch"`` or ``"step"``: when the scheduler steps.
        scale_lr_by_world_size: Multiply every param group's LR by the number of processes
            (DDP world size): the linear scaling rule for a global batch that grows with the GPUs.
    """

    def __init__(
        self,
        net: nn.Module,
        optimizer: OptimizerCallable = torch.optim.Adam,
        scheduler: LRSchedulerCallable | None = None,
        scheduler_interval: str = "epoch",
        scale_lr_by_world_size: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["net", "optimizer", "scheduler"])
        self.net = net
        # class path + init args of the net, stored in checkpoints for `lit-gpu export`
        self.net_spec = net_spec(net)
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.scheduler_interval = scheduler_interval
        self.scale_lr_by_world_size = scale_lr_by_world_size
        self._train_loss_sum: torch.Tensor | None = None
        self._train_loss_count = 0  # samples in _train_loss_sum
        self._train_losses: list[tuple[torch.Tensor, int]] = []  # (step loss, batch size) not yet summed

    # ---- things a researcher overrides -------------------------------------------------
    def compute_loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Loss between ``net(inputs)`` and ``targets``. Override in subclasses."""
        raise NotImplementedError

    def update_metrics(self, outputs: torch.Tensor, targets: torch.Tensor, stage: str) -> None:
        """Update and log stage metrics (called after the loss). Default: nothing."""

    # ---- shared plumbing ---------------------------------------------------------------
    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def _forward_batch(self, inputs: Any) -> torch.Tensor:
        """``self(inputs)``; a batch that does not fit the net's first layer becomes one line."""
        try:
            return self(inputs)
        except RuntimeError as err:
            message = net_input_mismatch(self.net, inputs, err)
            if message is None:
                raise
            raise LitGpuError(message) from err

    def _step(self, batch: Any, stage: str) -> torch.Tensor:
        inputs, targets = batch[0], batch[1]
        outputs = self._forward_batch(inputs)
        loss = self.compute_loss(outputs, targets)
        self._record_step(stage, inputs, targets, outputs, loss)
        return loss

    def _record_step(
        self, stage: str, inputs: Any, targets: Any, outputs: torch.Tensor, loss: torch.Tensor
    ) -> None:
        """The step's logging and metrics, apart from its arithmetic: whole-step capture
        (``--speed.cuda_graph``) replays the arithmetic as a CUDA graph and calls this after it."""
        if stage == "train":
            # the batch size; len() of a tensor is a Python call (Tensor.__len__)
            size = inputs.shape[0] if type(inputs) is torch.Tensor else len(inputs)
            self._log_train_loss(loss.detach(), size)
        else:
            self.log(
                f"{stage}/loss",
                loss,
                prog_bar=stage == "val",
                on_epoch=True,
                sync_dist=True,
                batch_size=len(inputs),
            )
        self.update_metrics(outputs.detach(), targets, stage)

    def _log_train_loss(self, loss: torch.Tensor, batch_size: int) -> None:
        """``train/loss`` as ``self.log(on_step=True, on_epoch=True)`` would log it, only cheaper.

        ``self.log`` costs about 1 ms a call on CPU (Lightning's result collection), 4-5 % of a
        small MNIST step (docs/benchmarks.md, "lit_gpu overhead"). So the step value is logged on
        the steps the loggers record (every ``log_every_n_steps``), and the epoch mean is kept in
        two on-device accumulators and logged once in :meth:`on_train_epoch_end`. The keys stay
        Lightning's: ``train/loss_step``, ``train/loss_epoch`` and ``train/loss``. A step only keeps
        its loss tensor; they are summed every :attr:`LOSS_FOLD` steps (one device op for many, no
        host sync), so the step path launches no kernel for it.
        """
        self._train_losses.append((loss, batch_size))  # counted when folded: no attribute write a step
        if len(self._train_losses) >= self.LOSS_FOLD:
            self._fold_train_losses()
        if loggers_record_this_step(attached_trainer(self)):  # no public API says it (lit_gpu.upstream)
            self.log("train/loss_step", loss, on_step=True, on_epoch=False, prog_bar=True)
            self.log("train/loss", loss, on_step=True, on_epoch=False, logger=False)

    def train_loss_mark(self) -> tuple[list[tuple[torch.Tensor, int]], int, torch.Tensor | None]:
        """The epoch's train-loss bookkeeping now, for :meth:`rewind_train_loss` (OOM recovery retries)."""
        return list(self._train_losses), self._train_loss_count, self._train_loss_sum

    def rewind_train_loss(
        self, mark: tuple[list[tuple[torch.Tensor, int]], int, torch.Tensor | None]
    ) -> None:
        """Forget the train losses kept since ``mark``: a step retried after an OOM counts once."""
        losses, self._train_loss_count, self._train_loss_sum = mark
        self._train_losses[:] = losses

    #: steps whose losses are kept before they are summed into the epoch total
    LOSS_FOLD = 128

    def _fold_train_losses(self) -> None:
        """Add the kept step losses, weighted by their batch sizes, to the epoch's on-device sum."""
        if not self._train_losses:
            return
        losses = torch.stack([loss.float() for loss, _ in self._train_losses])
        sizes = {size for _, size in self._train_losses}
        self._train_loss_count += sum(size for _, size in self._train_losses)
        if len(sizes) == 1:
            total = losses.sum() * sizes.pop()
        else:  # the epoch's last, smaller batch; or OOM-recovery micro-batches
            weights = torch.tensor([size for _, size in self._train_losses], dtype=torch.float32)
            total = (losses * weights.to(losses.device, non_blocking=True)).sum()
        self._train_loss_sum = total if self._train_loss_sum is None else self._train_loss_sum + total
        self._train_losses.clear()

    @override
    def on_train_epoch_end(self) -> None:
        """Log the epoch mean of ``train/loss`` (subclasses overriding this call ``super()``)."""
        self._fold_train_losses()
        if self._train_loss_count:
            mean = self._train_loss_sum / self._train_loss_count
            self.log("train/loss_epoch", mean, on_epoch=True, sync_dist=True)
            self.log("train/loss", mean, on_epoch=True, sync_dist=True, logger=False)
        self._train_loss_sum, self._train_loss_count = None, 0
        self._train_losses.clear()

    @override
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    @override
    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "val")

    @override
    def test_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "test")

    @override
    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        inputs = batch[0] if isinstance(batch, list | tuple) else batch
        return self._forward_batch(inputs)

    @restricted_classmethod  # Lightning's own class-only classmethod (lit_gpu.upstream)
    @override
    def load_from_checkpoint(
        cls,
        checkpoint_path: str | Path | IO,
        map_location: Any = None,
        hparams_file: str | Path | None = None,
        strict: bool | None = None,
        weights_only: bool | None = None,
        **kwargs: Any,
    ) -> Self:
        """:func:`lit_gpu.checkpoints.load_lightning_module`: Lightning's, after checking the file's hparams.

        The same function loads any LightningModule safely (``load_lightning_module(MyModule, path)``).
        """
        from lit_gpu.checkpoints import load_lightning_module  # the loading machinery, only when loading

        return load_lightning_module(
            cls, checkpoint_path, map_location, hparams_file, strict, weights_only, **kwargs
        )

    @override
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint.setdefault(NET_SPEC_KEY, self.net_spec)  # the CLI's own record (its config) wins
        logging_state = checkpoint.get(LOGGING_STATE_KEY)
        if isinstance(logging_state, dict):  # a save inside an epoch (lit_gpu.callbacks.LoggingStateCallback)
            total = self._train_loss_sum
            kept = self._train_losses
            logging_state["train_loss"] = {
                "sum": None if total is None else total.detach().clone(),
                "count": self._train_loss_count,
                "losses": torch.stack([loss.detach() for loss, _ in kept]) if kept else None,
                "sizes": [size for _, size in kept],
            }

    def restore_contract(self, pl_module: Any = None) -> list[Any]:
        """The epoch's train-loss accumulators: a scalar float sum, a count, one float loss per batch size."""
        from lit_gpu.checkpoints import contracts as c

        def same_length(saved: Any) -> str | None:
            losses, sizes = saved.get("losses"), saved.get("sizes")
            count = 0 if losses is None else losses.numel()
            if not isinstance(sizes, list) or len(sizes) != count:
                return f"{count} losses and {len(sizes) if isinstance(sizes, list) else 'no list of'} sizes"
            return None

        spec = c.fields(
            {
                "sum": c.optional(c.tensor((), dtypes="float")),
                "count": c.integer(0, 2**62),
                "losses": c.optional(c.tensor((None,), dtypes="float", max_numel=2**24)),
                "sizes": c.list_of(c.integer(0, 2**62), max_len=2**24),
            },
            required=("sum", "count", "losses", "sizes"),
        )
        where = (LOGGING_STATE_KEY, "train_loss")
        return [
            c.Contract(
                (LOGGING_STATE_KEY,), c.checked("a dict", lambda v: None if isinstance(v, dict) else "")
            ),
            c.Contract(where, c.optional(spec)),
            c.Contract(where, c.optional(c.checked("as many losses as batch sizes", same_length))),
        ]

    @override
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """The epoch's train-loss accumulators of a save made inside an epoch: its ``train/loss_epoch``
        then covers every step of the epoch, before and after the resume (checked first: its contract)."""
        from lit_gpu.checkpoints.contracts import check_contracts

        check_contracts(checkpoint, self.restore_contract(), "the checkpoint")
        logging_state = checkpoint.get(LOGGING_STATE_KEY)
        saved = logging_state.get("train_loss") if isinstance(logging_state, dict) else None
        if saved is not None:
            self._train_loss_sum, self._train_loss_count = saved["sum"], int(saved["count"])
            losses = [] if saved["losses"] is None else saved["losses"].unbind()
            self._train_losses[:] = list(zip(losses, saved["sizes"], strict=True))

    @override
    def on_train_start(self) -> None:
        """Restored train-loss accumulators (loaded on the CPU) go where the module's losses are."""
        if self._train_loss_sum is not None:
            self._train_loss_sum = self._train_loss_sum.to(self.device)
        self._train_losses[:] = [(loss.to(self.device), size) for loss, size in self._train_losses]

    @override
    def configure_optimizers(self) -> Any:
        optimizer = _build("model.optimizer", self.optimizer_factory, self.parameters())
        if self.scale_lr_by_world_size:
            world = max(1, self.trainer.world_size if attached_trainer(self) is not None else 1)
            for group in optimizer.param_groups:
                group["lr"] = group["lr"] * world
                if "initial_lr" in group:
                    group["initial_lr"] = group["initial_lr"] * world
                # OneCycleLR and friends read these instead of "lr"
                if "max_lr" in group:
                    group["max_lr"] = group["max_lr"] * world
        if self.scheduler_factory is None:
            return optimizer
        scheduler = _build("model.scheduler", self.scheduler_factory, optimizer)
        config: dict[str, Any] = {"scheduler": scheduler, "interval": self.scheduler_interval}
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            config["monitor"] = "val/loss"
        return {"optimizer": optimizer, "lr_scheduler": config}

    @override
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if batch_idx == 0 and self.trainer is not None and self.trainer.optimizers:
            lr = self.trainer.optimizers[0].param_groups[0]["lr"]
            self.log("train/lr", lr, on_step=True, on_epoch=False, rank_zero_only=True)

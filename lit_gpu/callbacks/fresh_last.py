"""FreshLastCheckpoint: a ModelCheckpoint whose ``last.ckpt`` always holds the latest save point.

It overrides ModelCheckpoint's protected save and remove hooks and reads its trigger state, as the upstream
table declares for this module (features ``fresh last`` and ``removal guard``); where the gate finds another
``ModelCheckpoint`` than the one verified, the save hooks are Lightning's own.
"""

from __future__ import annotations

import os
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.upstream import open_accumulation, stands_aside


class FreshLastCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint``, with ``last.ckpt`` refreshed at every save point.

    Lightning 2.6 rewrites ``last.ckpt`` only when a top-k checkpoint was written at the same step.
    With a ``monitor``, a run whose metric stops improving would keep an old ``last.ckpt``, and
    ``--ckpt_path last`` would silently resume from that older epoch. Here ``last.ckpt`` follows
    every validation (or epoch end), whether or not the monitored metric improved.

    Mid-epoch save points (``every_n_train_steps``, ``train_time_interval``) write ``last.ckpt``
    too, also before the first validation: Lightning defers the whole save until the monitored
    metric exists, which would leave the first epoch without any mid-epoch checkpoint. A fit
    that ends mid-epoch at ``max_steps`` writes ``last.ckpt`` at its last step, so that
    ``--ckpt_path last`` continues that epoch.

    It extends Lightning's protected hooks and reads its trigger state (the gate's feature ``fresh last``:
    where the installed ``ModelCheckpoint`` is not the one verified, Lightning's own ``last.ckpt`` runs).

    Nothing outside its own folder is ever deleted: paths in restored state that resolve outside
    ``dirpath`` (``..``, absolute, symlinks) are dropped with one line, and :meth:`remove_checkpoint`
    removes only what resolves inside ``dirpath`` (Lightning's own guard compares ``Path.absolute()``,
    which keeps ``..``, then removes recursively).

    Under gradient accumulation ``last.ckpt`` is written only at an optimizer step boundary: a
    checkpoint holds no accumulated gradients, so one saved between the micro-batches of a step would
    resume without them. A save point that falls between them (a time trigger, a validation every N
    batches) writes ``last.ckpt`` at the next step boundary instead (the gate's feature ``whole steps``).

    With :attr:`monitor_fallback` set (the ``lit-gpu`` CLI sets it for its default ``val/loss``),
    a module that never logs ``monitor`` keeps ``last.ckpt`` only, and one line says so, instead of
    Lightning's error at the end of the first validation.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._last_written_at_step: int | None = None
        self._last_due = False  # a last.ckpt refused between micro-batches: written at the next step boundary
        self.monitor_fallback = False
        self._fixed_state_key = super().state_key  # unchanged when the fallback drops `monitor`
        self._trainer: pl.Trainer | None = None  # for the step in file names (setup)

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self._trainer = trainer

    @property
    @override
    def state_key(self) -> str:
        return self._fixed_state_key

    @override
    def format_checkpoint_name(
        self,
        metrics: dict[str, Tensor],
        filename: str | None = None,
        ver: int | None = None,
        prefix: str | None = None,
    ) -> str:
        """Lightning's name, with ``{step}`` the loggers' step of the last training step (metrics.csv's:
        global step - 1) and ``{epoch}`` Lightning's 0-based one: ``best-epoch03-step1719`` is metrics.csv's
        row at epoch 3, step 1719 (docs/runs.md, "What the numbers mean")."""
        if "step" in metrics and self._trainer is not None:
            metrics = {**metrics, "step": torch.tensor(messages.logged_step(self._trainer))}
        return super().format_checkpoint_name(metrics, filename=filename, ver=ver, prefix=prefix)

    def _fall_back_to_last(self, trainer: pl.Trainer, monitor_candidates: dict[str, Tensor]) -> None:
        logged = sorted(k for k in monitor_candidates if k not in ("epoch", "step"))
        shown = ", ".join(logged[:8]) + (", ..." if len(logged) > 8 else "")
        module = type(trainer.lightning_module).__name__ if trainer.lightning_module else "the model"
        messages.tell(
            messages.MONITOR_FALLBACK.format(
                model=module,
                monitor=self.monitor,
                logged=f"it logs: {shown}" if logged else "it logs no metrics",
            )
        )
        self.monitor, self.save_top_k, self.monitor_fallback = None, 0, False

    def restore_contract(self, pl_module: Any = None) -> list[Any]:
        """ModelCheckpoint's state: paths are strings, scores finite-or-inf scalar tensors, best_k a dict."""
        from lit_gpu.checkpoints import contracts as c
        from lit_gpu.checkpoints.contracts import model_checkpoint_state

        return [c.Contract(("callbacks", self.state_key), model_checkpoint_state())]

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        from lit_gpu.checkpoints.contracts import drop_outside_state_paths

        state = dict(state_dict)
        # Lightning restores these paths only when the state's dirpath is this callback's own
        restored = state.get("dirpath", self.dirpath) == self.dirpath
        if restored and self.dirpath and "://" not in str(self.dirpath):
            dropped = drop_outside_state_paths(state, self.dirpath)
            if dropped:
                messages.tell(
                    messages.STATE_PATHS_DROPPED.format(
                        ckpt="the checkpoint",
                        count=len(dropped),
                        folder=self.dirpath,
                        fields="; ".join(dropped[:4]),
                    )
                )
        super().load_state_dict(state)

    @property
    def fresh_last_on(self) -> bool:
        """Whether the fresh-``last`` behaviour runs (else the gate's line said why, once)."""
        return not stands_aside("fresh last")

    # ---- Lightning's protected hooks, routed to this class's own (Lightning's where the gate says so) ---
    @override
    def _save_topk_checkpoint(self, trainer: pl.Trainer, monitor_candidates: dict[str, Tensor]) -> None:
        if self.fresh_last_on:
            self.write_topk(trainer, monitor_candidates)
        else:
            super()._save_topk_checkpoint(trainer, monitor_candidates)

    @override
    def _save_last_checkpoint(self, trainer: pl.Trainer, monitor_candidates: dict[str, Tensor]) -> None:
        if self.fresh_last_on:
            self.write_last(trainer, monitor_candidates)
        else:
            super()._save_last_checkpoint(trainer, monitor_candidates)

    @override
    def _remove_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        stands_aside("removal guard")  # cannot stand aside: on a mismatch the line says so, the guard runs
        self.remove_checkpoint(trainer, filepath)

    def remove_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        """Lightning's removal of an old checkpoint, for a path that resolves inside ``dirpath`` only."""
        from lit_gpu.checkpoints.contracts import inside

        local = "://" not in str(filepath) and self.dirpath and "://" not in str(self.dirpath)
        used = os.path.expanduser(str(filepath))  # fsspec, which removes it, expands ~ as inside() does
        if local and not (inside(filepath, self.dirpath) and not os.path.islink(used)):
            real = os.path.realpath(str(filepath))
            messages.tell(
                messages.REMOVE_OUTSIDE_REFUSED.format(path=filepath, dirpath=self.dirpath, real=real)
            )
            return
        super()._remove_checkpoint(trainer, filepath)

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last_due = False
        super().on_train_start(trainer, pl_module)

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self.fresh_last_on:  # the gate's line said why: Lightning's ModelCheckpoint as it is
            return super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if open_accumulation(trainer):
            return  # between the micro-batches of one step: every trigger waits for the step's end
        if self._last_due and self.save_last and not self._should_skip_saving_checkpoint(trainer):
            saved_at = self._last_global_step_saved  # a top-k save due at this step still runs
            self.write_last(trainer, self._monitor_candidates(trainer))
            self._last_global_step_saved = saved_at
        time_checked = self._last_time_checked
        automatic = pl_module.automatic_optimization
        every = self._every_n_train_steps
        if not (automatic and every < 1 and self._train_time_interval is None):
            # with no step or time trigger, Lightning's hook only reads state and returns (pinned)
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if not self.save_last or not automatic:
            return
        time_due = self._last_time_checked != time_checked  # Lightning's time trigger fired
        # trainer.max_steps and trainer.global_step (automatic optimization: the optimizer steps), read
        # without their seven property calls a step; pinned in tests/unit/test_upstream_pins.py
        epoch_loop = trainer.fit_loop.epoch_loop
        max_steps = epoch_loop.max_steps
        if every < 1 and not time_due and max_steps <= 0:
            return  # nothing can be due at this step
        global_step = epoch_loop.automatic_optimization.optim_progress.optimizer.step.total.completed
        step_due = every >= 1 and global_step % every == 0
        # the fit stops here (max_steps): save now, while the loop state is still mid-epoch; the
        # save after the final validation would mark the epoch processed and a resume would skip
        # the rest of it
        final = 0 < max_steps <= global_step
        if not (step_due or time_due or final) or self._last_written_at_step == global_step:
            return
        if self._should_skip_saving_checkpoint(trainer):
            return
        # a save point whose top-k save Lightning deferred (or skipped): write last.ckpt now, and
        # leave Lightning's "saved at this step" mark as it was, so that a top-k save later at this
        # step (the deferred one, after validation) still runs. At an epoch's last batch that later
        # save may rewrite last.ckpt (an epoch-end state is as good); at the final step it must not
        saved_at, written_at = self._last_global_step_saved, self._last_written_at_step
        self.write_last(trainer, self._monitor_candidates(trainer))
        self._last_global_step_saved = saved_at
        if not final:
            self._last_written_at_step = written_at

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning's save_last at the end of training skips its fast_dev_run check (2.6): a fast_dev_run
        # saves nothing ("Logging and checkpointing is suppressed"), as with Lightning's default callback
        if trainer.fast_dev_run:
            return
        super().on_train_end(trainer, pl_module)

    def write_topk(self, trainer: pl.Trainer, monitor_candidates: dict[str, Tensor]) -> None:
        """Lightning's top-k save, then ``last.ckpt`` if that save did not write it."""
        if self.monitor_fallback and self.monitor is not None and self.monitor not in monitor_candidates:
            self._fall_back_to_last(trainer, monitor_candidates)
        super()._save_topk_checkpoint(trainer, monitor_candidates)
        if self.save_last and self._last_global_step_saved != trainer.global_step:
            self.write_last(trainer, monitor_candidates)

    def write_last(self, trainer: pl.Trainer, monitor_candidates: dict[str, Tensor]) -> None:
        """Lightning's ``last.ckpt`` save, once a step, at an optimizer step boundary only."""
        if self._last_written_at_step == trainer.global_step and self.last_model_path:
            return  # already written for this step (Lightning asks twice after our refresh)
        if self.save_last and open_accumulation(trainer):
            self._last_due = True  # a resume from it would lose the accumulated gradients
            return
        super()._save_last_checkpoint(trainer, monitor_candidates)
        if self.save_last:
            self._last_written_at_step, self._last_due = trainer.global_step, False

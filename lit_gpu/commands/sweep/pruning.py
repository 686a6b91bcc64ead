"""``SweepPruning``: report the metric to the Optuna trial after each validation; stop pruned trials."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override


class SweepPruning(Callback):
    """Reports ``metric`` to an Optuna trial after every validation; stops the fit when it is pruned.

    Step ``k`` is the ``k``-th validation of the run (sanity checks excluded). The count is saved in
    the checkpoint, so a trial continued from its ``last.ckpt`` goes on counting where it stopped;
    steps the trial already reported before it was stopped (``reported``) are not reported again.
    Only global rank 0 talks to the storage; under DDP its decision is broadcast so that every rank
    stops together. Stopping sets ``trainer.should_stop`` (the fit ends normally and leaves its
    ``last.ckpt``); the sweep then records the trial as pruned.

    Args:
        trial: The ``optuna.Trial`` (``None`` on ranks other than 0, or when ``connect`` is given).
        metric: Key in ``trainer.callback_metrics``, e.g. ``val/loss``.
        reported: Steps already in the trial's intermediate values.
        connect: A function that loads the trial from storage on rank 0 (trials in a child process).
    """

    def __init__(
        self,
        trial: Any,
        metric: str,
        reported: Iterable[int] = (),
        connect: Callable[[], Any] | None = None,
    ) -> None:
        self.trial = trial
        self.metric = metric
        self.reported = set(reported)
        self.connect = connect
        self.reports = 0
        self.last_value: float | None = None
        self.pruned_at: int | None = None
        self.logged: list[str] = []

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"reports": self.reports}

    def restore_contract(self, pl_module: Any = None) -> list[Any]:
        """The number of reports made: an int >= 0 (anything else restarts the count)."""
        from lit_gpu.checkpoints import contracts as c

        return [c.Contract(("callbacks", self.state_key), c.fields({"reports": c.anything()}))]

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        reports = state_dict.get("reports", 0)
        self.reports = reports if isinstance(reports, int) and reports >= 0 else 0

    def _rank_zero_trial(self) -> Any:
        if self.trial is None and self.connect is not None:
            self.trial = self.connect()
        return self.trial

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.logged = sorted(trainer.callback_metrics)
        value = trainer.callback_metrics.get(self.metric)
        if value is None:
            return
        self.last_value = float(value)
        step, self.reports = self.reports, self.reports + 1
        prune = False
        if trainer.is_global_zero:
            trial = self._rank_zero_trial()
            if trial is not None:
                if step not in self.reported:  # a continued trial: reported before its stop
                    trial.report(self.last_value, step)
                    self.reported.add(step)
                prune = bool(trial.should_prune())
        if trainer.world_size > 1:
            prune = bool(trainer.strategy.broadcast(prune, src=0))
        if prune:
            self.pruned_at = step
            trainer.should_stop = True

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.logged:  # no validation ran: say what was logged at all
            self.logged = sorted(trainer.callback_metrics)

"""``ModelCheckpoint``'s protected hooks and trigger state behind public names (for ``FreshLastCheckpoint``).

:class:`CheckpointHooks` routes Lightning's ``_save_topk_checkpoint``, ``_save_last_checkpoint`` and
``_remove_checkpoint`` to public methods a subclass overrides (:meth:`write_topk`, :meth:`write_last`,
:meth:`remove_checkpoint`), and reads the trigger state through properties. Where the gate finds another
``ModelCheckpoint`` than the one verified (feature ``fresh last``), the save hooks are Lightning's own.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint
from typing_extensions import override

from lit_gpu.upstream.gate import stands_aside


class CheckpointHooks(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` with its protected hooks under public names."""

    @property
    def fresh_last_on(self) -> bool:
        """Whether the fresh-``last`` behaviour runs (else the gate's line said why, once)."""
        return not stands_aside("fresh last")

    # ---- hooks a subclass overrides (each defaults to Lightning's) ----------------------------
    def write_topk(self, trainer: Any, monitor_candidates: dict[str, Any]) -> None:
        """Lightning's top-k save (``_save_topk_checkpoint``)."""
        super()._save_topk_checkpoint(trainer, monitor_candidates)

    def write_last(self, trainer: Any, monitor_candidates: dict[str, Any]) -> None:
        """Lightning's ``last.ckpt`` save (``_save_last_checkpoint``)."""
        super()._save_last_checkpoint(trainer, monitor_candidates)

    def remove_checkpoint(self, trainer: Any, filepath: str) -> None:
        """Lightning's removal of an old checkpoint (``_remove_checkpoint``)."""
        super()._remove_checkpoint(trainer, filepath)

    def should_skip_saving(self, trainer: Any) -> bool:
        """Lightning's test for a save point to skip (sanity check, fast_dev_run, saved at this step...)."""
        return self._should_skip_saving_checkpoint(trainer)

    def monitor_candidates(self, trainer: Any) -> dict[str, Any]:
        """The metrics a save point sees (``_monitor_candidates``)."""
        return self._monitor_candidates(trainer)

    # ---- trigger state ----------------------------------------------------------------------
    @property
    def every_n_train_steps(self) -> int:
        """The step trigger (0: none)."""
        return self._every_n_train_steps

    @property
    def train_time_interval(self) -> Any:
        """The time trigger (a ``timedelta``, or None)."""
        return self._train_time_interval

    @property
    def last_time_checked(self) -> float | None:
        """When the time trigger last looked."""
        return self._last_time_checked

    @property
    def last_global_step_saved(self) -> int:
        """The step of the last save Lightning counts."""
        return self._last_global_step_saved

    @last_global_step_saved.setter
    def last_global_step_saved(self, step: int) -> None:
        self._last_global_step_saved = step

    # ---- Lightning's protected hooks, routed ------------------------------------------------
    @override
    def _save_topk_checkpoint(self, trainer: Any, monitor_candidates: dict[str, Any]) -> None:
        if self.fresh_last_on:
            self.write_topk(trainer, monitor_candidates)
        else:
            super()._save_topk_checkpoint(trainer, monitor_candidates)

    @override
    def _save_last_checkpoint(self, trainer: Any, monitor_candidates: dict[str, Any]) -> None:
        if self.fresh_last_on:
            self.write_last(trainer, monitor_candidates)
        else:
            super()._save_last_checkpoint(trainer, monitor_candidates)

    @override
    def _remove_checkpoint(self, trainer: Any, filepath: str) -> None:
        stands_aside("removal guard")  # cannot stand aside: on a mismatch the line says so, the guard runs
        self.remove_checkpoint(trainer, filepath)


__all__ = ["CheckpointHooks"]

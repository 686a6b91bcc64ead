"""``config.yaml`` of a run folder: saved when the run starts; a continued run keeps it.

A run never silently replaces another run's ``config.yaml`` (LightningCLI's ``overwrite=False``): lit_gpu's
loggers give each run its own folder; where fits share one (``trainer.logger: false``), the second stops
with one line before anything runs, as LightningCLI stops, unless ``save_config_kwargs={"overwrite": True}``;
an evaluation there (validate/test/predict) saves a changed config beside the folder's newest one.

A fit resumed from a checkpoint continues the checkpoint's run folder (:mod:`lit_gpu.run.folder`). Its
``config.yaml`` stays as it is; a config that differs from the newest one saved there is written
beside it as ``config.<n>.yaml``, and one line names the change.
"""

from __future__ import annotations

import os
from pathlib import Path

import lightning.pytorch as pl
import yaml
from lightning.pytorch.cli import SaveConfigCallback
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.errors import LitGpuError
from lit_gpu.run.config import config_changes, next_config_path, read_plain, saved_configs
from lit_gpu.run.folder import RunFolder


def continued_run(trainer: pl.Trainer) -> RunFolder | None:
    """The run folder lit_gpu's loggers continue, or ``None`` (a new folder, or other loggers)."""
    for logger in trainer.loggers:
        run = getattr(logger, "run", None)
        if isinstance(run, RunFolder):
            return run if run.continues is not None else None
    return None


class RunConfigSaver(SaveConfigCallback):
    """Lightning's config saver; a continued run folder (or a folder evaluations share) keeps ``config.yaml``,
    a change is saved beside."""

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # a continued run keeps its config.yaml; so does a folder an evaluation shares with earlier ones
        # (validate/test/predict with the loggers off): a changed config goes beside it, never over it
        beside = (
            continued_run(trainer) is not None
            or (stage == "fit" and self._resumes_its_own_folder(trainer))
            or (stage != "fit" and not self.overwrite)
        )
        if self.already_saved or not self.save_to_log_dir or not beside:
            try:
                super().setup(trainer, pl_module, stage)
            except RuntimeError as err:  # Lightning's stop before an earlier run's config.yaml: one line
                if "Aborting to avoid overwriting" not in str(err):
                    raise
                path = os.path.join(str(trainer.log_dir), self.config_filename)
                raise LitGpuError(messages.CONFIG_EXISTS.format(path=path)) from err
            return
        log_dir = trainer.log_dir  # broadcast from rank 0, as Lightning's saver does
        if trainer.is_global_zero:
            self._save_beside(Path(str(log_dir)))
            self.save_config(trainer, pl_module, stage)
        self.already_saved = trainer.strategy.broadcast(True)

    def _resumes_its_own_folder(self, trainer: pl.Trainer) -> bool:
        """A fit resumed from a checkpoint inside the folder it logs into (a sweep trial continued, a logger
        with a fixed ``version``): that run, continued, whichever loggers write it."""
        ckpt = self.config.get("ckpt_path") if hasattr(self.config, "get") else None
        log_dir = trainer.log_dir
        if not isinstance(ckpt, str | os.PathLike) or not ckpt or log_dir is None:
            return False
        try:
            return Path(ckpt).resolve().is_relative_to(Path(log_dir).resolve())
        except (OSError, ValueError):
            return False

    def _save_beside(self, folder: Path) -> None:
        saved = saved_configs(folder)
        if not saved:
            folder.mkdir(parents=True, exist_ok=True)
            self.parser.save(self.config, folder / self.config_filename, skip_none=False, overwrite=True)
            return
        old = read_plain(saved[-1]) or {}
        new = yaml.safe_load(self.parser.dump(self.config, skip_none=False)) or {}  # as config.yaml is saved
        changes = config_changes(old if isinstance(old, dict) else {}, new)
        if not changes:
            return
        path = next_config_path(folder)
        self.parser.save(self.config, path, skip_none=False, overwrite=False, multifile=self.multifile)
        messages.tell(
            messages.CONFIG_CHANGED.format(old=saved[-1].name, changes="; ".join(changes), new=path.name)
        )

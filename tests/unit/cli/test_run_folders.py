"""lit_gpu/cli/run_folders.py: the default loggers, the progress bar, and a build that claims no folder."""

from __future__ import annotations

import pytest
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar

from lit_gpu.callbacks.progress import REFRESHES_PER_SECOND, LitProgressBar
from lit_gpu.cli import LitGpuCLI
from tests.helpers.paths import CONFIGS

SIMPLE = ["--config", str(CONFIGS / "simple.yaml")]


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["lit-gpu"])
    return tmp_path


def test_building_the_trainer_claims_no_folder_and_redraws_slowly(here, monkeypatch):
    monkeypatch.setattr("lit_gpu.callbacks.progress.live_bar_fits", lambda: True)  # as on a terminal
    cli = LitGpuCLI(args=[*SIMPLE, "--trainer.accelerator", "cpu"], run=False)
    bar = cli.trainer.progress_bar_callback
    assert isinstance(bar, LitProgressBar) and bar.refresh_rate == REFRESHES_PER_SECOND
    assert [type(lg).__name__ for lg in cli.trainer.loggers] == ["RunTensorBoardLogger", "RunCSVLogger"]
    assert not (here / "runs").exists()  # claimed only when the run starts


def test_no_bar_added_when_off_or_given(here):
    off = LitGpuCLI(args=[*SIMPLE, "--config", str(CONFIGS / "debug.yaml")], run=False)
    assert off.trainer.progress_bar_callback is None
    own = LitGpuCLI(
        args=[*SIMPLE, "--trainer.accelerator", "cpu", "--trainer.callbacks+=TQDMProgressBar"], run=False
    )
    bars = [c for c in own.trainer.callbacks if isinstance(c, TQDMProgressBar | RichProgressBar)]
    assert len(bars) == 1 and isinstance(bars[0], TQDMProgressBar)


def test_loggers_flag_and_user_logger(here):
    none = LitGpuCLI(args=[*SIMPLE, "--trainer.accelerator", "cpu", "--loggers", "[]"], run=False)
    assert none.trainer.loggers == [] and none.run_folder is None
    own = LitGpuCLI(
        args=[*SIMPLE, "--trainer.accelerator", "cpu", "--trainer.logger", "CSVLogger",
              "--trainer.logger.save_dir", "mine"],
        run=False,
    )  # fmt: skip
    assert [type(lg).__name__ for lg in own.trainer.loggers] == ["CSVLogger"] and own.run_folder is None

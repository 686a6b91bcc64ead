"""A config naming a Lightning class whose optional package is missing (``WandbLogger`` without ``wandb``):
one line with Lightning's own requirement and the install command, not jsonargparse's wall of Union errors."""

from __future__ import annotations

import importlib.util

import pytest

from lit_gpu.cli.errors import missing_requirement
from lit_gpu.cli.lightning_cli import LitGpuCLI
from lit_gpu.errors import LitGpuError

BORING = "lightning.pytorch.demos.boring_classes.BoringModel"


def test_lightning_utilities_hint_forms_are_read():
    quoted = ValueError(
        "x\\n Requirement 'wandb>=0.12.10' not met. HINT: Try running `pip install -U 'wandb>=0.12.10'`"
    )
    module = ValueError("Module not found: 'comet_ml'. HINT: Try running `pip install -U comet_ml`")
    assert missing_requirement(quoted).endswith("pip install -U 'wandb>=0.12.10'")
    assert "needs comet_ml," in missing_requirement(module)
    assert missing_requirement(ValueError("no hint here")) is None


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed here")
def test_an_offline_wandb_logger_without_wandb_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["--model", BORING, "--trainer.logger+=WandbLogger", "--trainer.logger.offline", "true",
            "--trainer.logger+=CSVLogger", "--trainer.logger.save_dir", "csv"]  # fmt: skip
    with pytest.raises(LitGpuError, match=r"needs wandb>=[0-9.]+, not installed here: pip install -U 'wandb"):
        LitGpuCLI(args=argv, run=False)

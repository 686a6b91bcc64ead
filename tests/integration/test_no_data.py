"""A run rebuilt from its ``config.yaml`` whose ``data:`` is a URL (or no data at all): one line, not
Lightning's "`test_dataloader` must be implemented" traceback (issue 50)."""

from __future__ import annotations

import pytest
import yaml

from lit_gpu.cli import LitGpuCLI, main
from lit_gpu.cli.errors import check_has_data
from lit_gpu.errors import LitGpuError
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
from tests.helpers.paths import CONFIGS

SIMPLE = ["--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]


def test_a_url_as_data_beside_a_checkpoint_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    LitGpuCLI(args=["fit", *SIMPLE, "--trainer.max_epochs", "1", "--trainer.default_root_dir", "exp"])
    run = tmp_path / "exp" / "lit_gpu" / "version_0"
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["data"] = "https://example.com/data.yaml"
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    capsys.readouterr()
    for command in ("test", "validate"):
        with pytest.raises(SystemExit) as info:
            main([command, "--ckpt_path", str(run / "checkpoints" / "last.ckpt")])
        assert info.value.code == 2
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if line.startswith("lit-gpu: error: ")]
        assert errors == [line for line in err.splitlines() if "rror" in line]  # no traceback
        assert len(errors) == 1 and f"no data to {command} on" in errors[0], err
        assert "left out: data" in err  # the rebuild line said why


def test_a_data_module_without_the_commands_loader_is_one_line():
    from lit_gpu.data import SyntheticRegressionDataModule

    class NoTest(SyntheticRegressionDataModule):
        test_dataloader = None  # type: ignore[assignment]

    model = RegressionModule(SimpleModel(10, 10))
    with pytest.raises(LitGpuError, match="has no test_dataloader"):
        check_has_data(model, NoTest(), "test")
    check_has_data(model, SyntheticRegressionDataModule(), "test")  # it has one: no error

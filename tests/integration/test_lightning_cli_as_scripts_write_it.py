"""``LitGpuCLI`` as real LightningCLI scripts write it (issue 64): LightningCLI's constructor with its
positions, ``trainer_defaults`` with LightningCLI's meaning, a user's script answering a mistake in one line,
a stop line that runs as pasted (a module found through ``PYTHONPATH=.``, ``run=False`` then
``cli.trainer.fit``, after ``--fresh_optimizer true``), and config inputs LightningCLI accepts."""

from __future__ import annotations

import inspect
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel

from lit_gpu.callbacks.fresh_last import FreshLastCheckpoint
from lit_gpu.cli import LitGpuCLI
from tests.helpers.forked_cli import run_cli
from tests.helpers.simple_run import SIMPLE
from tests.helpers.stop_at import ENV

SHORT = [
    "--trainer.max_epochs",
    "1",
    "--trainer.limit_train_batches",
    "2",
    "--trainer.limit_val_batches",
    "1",
]
STOP = "--trainer.callbacks+=tests.helpers.stop_at.SigintAtStepFromEnv"
BIN = Path(sys.executable).parent


class EntropyModel(BoringModel):
    """A module recording numpy's ``SeedSequence().entropy`` (a 128-bit integer), as numpy's docs advise."""

    def __init__(self, entropy: int = 0) -> None:
        super().__init__()
        self.entropy = entropy


# ---- the constructor ------------------------------------------------------------------------------------
def test_litgpucli_takes_lightningclis_parameters_in_lightningclis_order():
    ours = list(inspect.signature(LitGpuCLI.__init__).parameters)
    assert ours == list(inspect.signature(LightningCLI.__init__).parameters)


def test_model_and_datamodule_positionally_as_lightnings_docs_write_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = LitGpuCLI(BoringModel, BoringDataModule, args=["fit", *SHORT])
    assert type(cli.model) is BoringModel and type(cli.datamodule) is BoringDataModule
    assert cli.trainer.global_step == 2


def test_trainer_defaults_progress_bar_and_checkpoint_replace_lit_gpus(tmp_path, monkeypatch):
    """imagenet.py's ``trainer_defaults``: its bar and its ModelCheckpoint, not two of each."""
    monkeypatch.chdir(tmp_path)
    bar, checkpoint = TQDMProgressBar(refresh_rate=10), ModelCheckpoint(save_last=True)
    defaults = {"max_epochs": 1, "logger": False, "callbacks": [bar, checkpoint]}
    cli = LitGpuCLI(BoringModel, trainer_defaults=defaults, args=["fit", *SHORT[2:]])
    assert cli.trainer.progress_bar_callback is bar
    assert cli.trainer.checkpoint_callbacks == [checkpoint]
    assert not any(isinstance(c, FreshLastCheckpoint) for c in cli.trainer.callbacks)
    assert cli.trainer.global_step == 2


# ---- a user's own script ---------------------------------------------------------------------------------
SCRIPT = """\
from lightning.pytorch.demos.boring_classes import BoringModel
from lit_gpu.cli import LitGpuCLI

if __name__ == "__main__":
    LitGpuCLI(BoringModel, trainer_defaults={"max_epochs": 1})
"""


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "error" in line.lower() or "Traceback" in line]


def test_a_users_script_answers_a_mistake_in_one_line_exit_2(tmp_path, cli_env):
    (tmp_path / "train.py").write_text(SCRIPT)
    done = subprocess.run([sys.executable, "train.py", "fit", "--trainer.devices", "0"], cwd=tmp_path,
                          env=cli_env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    (line,) = _errors(done.stderr)
    assert line.startswith("lit-gpu: error: --trainer.devices 0: invalid trainer setting"), line


def test_lit_gpu_fit_with_no_arguments_says_what_lightningcli_says(tmp_path, cli_env):
    done = run_cli(["fit"], tmp_path, cli_env, timeout=120)
    assert done.returncode == 2
    (line,) = _errors(done.stderr)
    assert "the following arguments are required: fit.model" in line, line


# ---- the stop line, pasted -------------------------------------------------------------------------------
def _stop_command(stderr: str) -> str:
    (stop,) = [line for line in stderr.splitlines() if "stopped by SIGINT" in line]
    return stop.split("resume with: ", 1)[1]


def _new_shell(env: dict[str, str]) -> dict[str, str]:
    """A new shell's environment: no PYTHONPATH, the venv's programs on PATH."""
    env = {k: v for k, v in env.items() if k not in ("PYTHONPATH", ENV)}
    return dict(env, PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_stop_line_of_a_module_found_through_pythonpath_runs_pasted(tmp_path, cli_env):
    """A ``lit-gpu init`` project: its module is importable only with ``PYTHONPATH=.``; so is the resume."""
    if not (BIN / "lit-gpu").is_file():
        pytest.skip("needs the lit-gpu console script")
    (tmp_path / "mine.py").write_text("from lightning.pytorch.demos.boring_classes import BoringModel\n\n"
                                      "class Mine(BoringModel):\n    pass\n")  # fmt: skip
    argv = ["fit", "--model", "mine.Mine", "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "4",
            "--trainer.limit_val_batches", "1", "--trainer.enable_progress_bar", "false", STOP]  # fmt: skip
    env = dict(cli_env, PYTHONPATH=f".{os.pathsep}{cli_env['PYTHONPATH']}", **{ENV: "5"})
    first = subprocess.run([str(BIN / "lit-gpu"), *argv], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)  # fmt: skip
    assert first.returncode == 130, first.stderr[-3000:]
    command = _stop_command(first.stderr)
    assert command.startswith(f"PYTHONPATH={shlex.quote(env['PYTHONPATH'])} lit-gpu fit "), command
    resumed = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=_new_shell(cli_env),
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "from step 6" in resumed.stderr, resumed.stderr[-2000:]


NOTEBOOK = """\
import sys
from lit_gpu.cli import LitGpuCLI

cli = LitGpuCLI(args=sys.argv[1:], run=False)
cli.trainer.fit(cli.model, datamodule=cli.datamodule)
"""


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_stop_line_of_a_run_false_cli_names_fit_and_runs_pasted(tmp_path, cli_env):
    """The notebook way: ``LitGpuCLI(args=[...], run=False)`` then ``cli.trainer.fit(...)``."""
    if not (BIN / "lit-gpu").is_file():
        pytest.skip("needs the lit-gpu console script")
    (tmp_path / "nb.py").write_text(NOTEBOOK)
    argv = [*SIMPLE, STOP]
    first = subprocess.run([sys.executable, "nb.py", *argv], cwd=tmp_path, env=dict(cli_env, **{ENV: "5"}),
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    command = _stop_command(first.stderr)
    assert command.startswith("lit-gpu fit --config "), command
    env = dict(_new_shell(cli_env), PYTHONPATH=cli_env["PYTHONPATH"])  # lit_gpu and tests.helpers
    resumed = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "from step 6" in resumed.stderr, resumed.stderr[-2000:]


def test_the_stop_line_after_fresh_optimizer_true_does_not_repeat_it(tmp_path, cli_env):
    first = run_cli(["fit", *SIMPLE, "--trainer.max_epochs", "1"], tmp_path, cli_env, timeout=120)
    assert first.returncode == 0, first.stderr[-3000:]
    argv = [
        "fit",
        *SIMPLE,
        "--trainer.max_epochs",
        "3",
        "--ckpt_path",
        "last",
        "--fresh_optimizer",
        "true",
        STOP,
    ]
    stopped = run_cli(argv, tmp_path, dict(cli_env, **{ENV: "6"}), timeout=120)
    assert stopped.returncode == 130, stopped.stderr[-3000:]
    words = shlex.split(_stop_command(stopped.stderr))
    assert "--fresh_optimizer" not in words, words
    resumed = run_cli(words[1:], tmp_path, cli_env, timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "from step 7" in resumed.stderr, resumed.stderr[-2000:]
    last = tmp_path / "runs" / "lit_gpu" / "version_0" / "checkpoints" / "last.ckpt"
    state = torch.load(last, map_location="cpu", weights_only=True)
    assert state["global_step"] == 12


# ---- config inputs LightningCLI accepts -------------------------------------------------------------------
def test_a_128_bit_integer_in_a_config_is_read_as_lightningcli_reads_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    entropy = 219263148931498715227883396389123654321  # numpy's SeedSequence().entropy is 128 bits
    config = {"model": {"class_path": f"{__name__}.EntropyModel", "init_args": {"entropy": entropy}}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    cli = LitGpuCLI(args=["fit", "--config", "c.yaml", *SHORT])
    assert cli.model.entropy == entropy
    saved = yaml.safe_load((tmp_path / "runs" / "lit_gpu" / "version_0" / "config.yaml").read_text())
    assert saved["model"]["init_args"]["entropy"] == entropy


def test_weights_only_false_typed_before_a_second_config_counts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    LitGpuCLI(args=["fit", "--model", "lightning.pytorch.demos.boring_classes.BoringModel", *SHORT])
    (tmp_path / "a.yaml").write_text("model: lightning.pytorch.demos.boring_classes.BoringModel\n")
    (tmp_path / "b.yaml").write_text("trainer:\n  limit_val_batches: 1\n")
    args = ["validate", "--config", "a.yaml", "--weights_only=false", "--config", "b.yaml"]
    cli = LitGpuCLI(args=[*args, "--ckpt_path", "last", "--trainer.logger", "false"])
    assert cli.trainer.state.finished


# ---- configs saved as the user wrote them ----------------------------------------------------------------
SWA = """\
model: lightning.pytorch.demos.boring_classes.BoringModel
optimizer:  # no scheduler (BoringModel's StepLR and SWA's own: lands with CKPT, see below)
  class_path: torch.optim.SGD
  init_args:
    lr: 0.1
trainer:
  max_epochs: 4
  limit_train_batches: 2
  limit_val_batches: 1
  enable_progress_bar: false
  callbacks+:
    - class_path: lightning.pytorch.callbacks.StochasticWeightAveraging
      init_args:
        swa_lrs: 0.01
        swa_epoch_start: {start}
"""


def _swa_stop_and_resume(tmp_path, cli_env, start: int) -> subprocess.CompletedProcess:
    (tmp_path / "swa.yaml").write_text(SWA.format(start=start))
    stopped = run_cli(
        ["fit", "--config", "swa.yaml", STOP], tmp_path, dict(cli_env, **{ENV: "4"}), timeout=120
    )
    assert stopped.returncode == 130, stopped.stderr[-3000:]
    words = shlex.split(_stop_command(stopped.stderr))
    return run_cli(words[1:], tmp_path, cli_env, timeout=120)


def test_a_swa_run_resumed_with_its_own_command_saves_no_changed_config(tmp_path, cli_env):
    """StochasticWeightAveraging: jsonargparse dumps its ``avg_fn: None``; config.yaml is saved with it."""
    resumed = _swa_stop_and_resume(tmp_path, cli_env, start=4)  # averaging from epoch index 3; stopped in 2
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "config differs" not in resumed.stderr, resumed.stderr[-3000:]
    assert [p.name for p in (tmp_path / "runs" / "lit_gpu" / "version_0").glob("config*.yaml")] == [
        "config.yaml"
    ]


def test_a_swa_run_stopped_mid_averaging_resumes_with_its_own_command(tmp_path, cli_env):
    resumed = _swa_stop_and_resume(tmp_path, cli_env, start=1)  # averaging from epoch index 0, stopped in 2
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "config differs" not in resumed.stderr


def test_a_command_line_given_first_as_before_still_runs(tmp_path, monkeypatch):
    """``LitGpuCLI([...])``, written when ``args`` came first: a list is never a model class."""
    monkeypatch.chdir(tmp_path)
    cli = LitGpuCLI(["fit", "--model", "lightning.pytorch.demos.boring_classes.BoringModel", *SHORT])
    assert type(cli.model) is BoringModel and cli.trainer.global_step == 2

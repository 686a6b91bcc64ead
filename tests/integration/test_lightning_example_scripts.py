"""Lightning's own LightningCLI example scripts, ``LightningCLI`` -> ``LitGpuCLI``, run as their users run
them (``python <script>.py fit ...``) with tiny offline data (issue 64): fit, a SIGTERM and its printed
resume pasted into bash, ``--ckpt_path last`` for validate/test, export. The scripts, faithful to the
published ones but for their data, are in ``tests/helpers/lightning_scripts/``.

What fails because another part of issue 63/64 has not landed yet, or a gap found here, is marked
``xfail(strict=False)`` with its owner and reason.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.lightning_scripts import ENV, HERE

STOP = "--trainer.callbacks+=tests.helpers.lightning_scripts.SigtermAtStepFromEnv"
QUIET = ["--trainer.enable_progress_bar", "false"]

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _script(name: str, argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HERE / f"{name}.py"), *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def _pasted(stderr: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The stop line's ``resume with:`` command, run by bash as printed."""
    (stop,) = [line for line in stderr.splitlines() if "stopped by SIGTERM" in line]
    command = stop.split("resume with: ", 1)[1]
    assert command.startswith(f"{shlex.quote(sys.executable)} {shlex.quote(str(HERE))}/"), command
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def _no_traceback(done: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


# ---- computer_vision_fine_tuning.py: MyLightningCLI(Model, DataModule), link_arguments, BaseFinetuning --
FINE_TUNING = ["--trainer.max_epochs", "4", "--trainer.limit_train_batches", "2",
               "--trainer.limit_val_batches", "1", "--finetuning.milestones", "[1, 2]",
               "--data.batch_size", "4", *QUIET]  # fmt: skip


def test_fine_tuning_fits_with_its_own_cli_subclass_and_linked_arguments(tmp_path, cli_env):
    done = _script("fine_tuning", ["fit", *FINE_TUNING], tmp_path, cli_env)
    assert done.returncode == 0, done.stderr[-3000:]
    last = tmp_path / "runs" / "lit_gpu" / "version_0" / "checkpoints" / "last.ckpt"
    state = torch.load(last, map_location="cpu", weights_only=True)
    assert state["global_step"] == 8
    assert len(state["optimizer_states"][0]["param_groups"]) == 3  # the milestones added two groups
    assert state["hyper_parameters"]["batch_size"] == 4  # data.batch_size -> model.batch_size


def test_fine_tuning_stopped_by_sigterm_resumes_with_its_printed_command(tmp_path, cli_env):
    stopped = _script("fine_tuning", ["fit", *FINE_TUNING, STOP], tmp_path, dict(cli_env, **{ENV: "3"}))
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    resumed = _pasted(stopped.stderr, tmp_path, cli_env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "from step 4" in resumed.stderr, resumed.stderr[-3000:]


def test_fine_tuning_validates_its_last_checkpoint(tmp_path, cli_env):
    assert _script("fine_tuning", ["fit", *FINE_TUNING], tmp_path, cli_env).returncode == 0
    done = _script("fine_tuning", ["validate", "--ckpt_path", "last", *QUIET], tmp_path, cli_env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "val_acc" in done.stdout


# ---- imagenet.py: LightningCLI(Model, trainer_defaults={... TQDMProgressBar, ModelCheckpoint ...}) --------
IMAGENET = ["--model.data_path", "unused", "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "3",
            "--trainer.limit_val_batches", "1", "--trainer.accelerator", "cpu"]  # fmt: skip


def test_imagenet_fits_with_its_trainer_defaults_bar_and_checkpoint(tmp_path, cli_env):
    done = _script("imagenet", ["fit", *IMAGENET], tmp_path, cli_env)
    assert done.returncode == 0, done.stderr[-3000:]
    _no_traceback(done)
    saved = sorted(p.name for p in tmp_path.rglob("*.ckpt"))
    assert saved == ["epoch=0-step=3.ckpt"] or len(saved) == 1, saved  # its ModelCheckpoint: the best one


@pytest.mark.full
@pytest.mark.xfail(
    strict=False,
    reason="RUN: trainer_defaults' logger: False puts last.ckpt in runs/checkpoints, config.yaml in runs/; "
    "--ckpt_path FILE alone looks for a ROOT/NAME/version_N layout, and --ckpt_path last for runs/lit_gpu",
)
def test_imagenet_stopped_by_sigterm_resumes_and_tests_its_last_checkpoint(tmp_path, cli_env):
    stopped = _script("imagenet", ["fit", *IMAGENET, STOP], tmp_path, dict(cli_env, **{ENV: "4"}))
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    resumed = _pasted(stopped.stderr, tmp_path, cli_env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    tested = _script(
        "imagenet", ["test", "--model.data_path", "unused", "--ckpt_path", "last"], tmp_path, cli_env
    )
    assert tested.returncode == 0, tested.stderr[-3000:]


# ---- reinforce_learn_Qnet.py: an IterableDataset, LightningCLI(DQNLightning, trainer_defaults=...) ---------
QNET = ["--trainer.max_steps", "12", "--model.warm_start_steps", "50", "--model.episode_length", "8", *QUIET]


@pytest.mark.full  # the stop-and-resume test below fits the same script in the default tier
def test_qnet_fits_on_its_iterable_dataset(tmp_path, cli_env):
    done = _script("qnet", ["fit", *QNET], tmp_path, cli_env)
    assert done.returncode == 0, done.stderr[-3000:]
    last = tmp_path / "runs" / "lit_gpu" / "version_0" / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 12


def test_qnet_stopped_by_sigterm_resumes_with_its_printed_command(tmp_path, cli_env):
    stopped = _script("qnet", ["fit", *QNET, STOP], tmp_path, dict(cli_env, **{ENV: "5"}))
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    resumed = _pasted(stopped.stderr, tmp_path, cli_env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "from step 6" in resumed.stderr, resumed.stderr[-3000:]


GENUINE_BEST = pytest.mark.xfail(
    strict=False,
    reason="genuine, callbacks/fresh_last.py (FAST's): a module that never logs the default monitor val/loss "
    "keeps last.ckpt only and best_model_path stays empty, where plain LightningCLI's "
    "ModelCheckpoint(monitor=None) makes the latest checkpoint the best: test(ckpt_path='best') is refused",
)


# ---- backbone_image_classifier.py: LightningCLI(Model, DataModule, ..., run=False), then fit/test/predict -
@pytest.mark.full
@GENUINE_BEST
def test_backbone_classifier_runs_its_run_false_script(tmp_path, cli_env):
    argv = [
        "--trainer.max_epochs",
        "1",
        "--trainer.limit_train_batches",
        "2",
        "--data.batch_size",
        "8",
        *QUIET,
    ]
    done = _script("backbone_classifier", argv, tmp_path, cli_env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tensor(" in done.stdout  # predictions[0], printed by the script


# ---- export ----------------------------------------------------------------------------------------------
@pytest.mark.full
@pytest.mark.xfail(
    strict=False,
    reason="genuine (export, RUN/CKPT): a script's classes live in __main__ ('__main__.DQNLightning'), which "
    "export refuses to import; the run would need the script's own module name or file",
)
def test_a_fixed_model_class_run_exports(tmp_path, cli_env):
    assert _script("qnet", ["fit", *QNET], tmp_path, cli_env).returncode == 0
    last = tmp_path / "runs" / "lit_gpu" / "version_0" / "checkpoints" / "last.ckpt"
    done = subprocess.run([sys.executable, "-m", "lit_gpu", "export", str(last), "--out", "net.pt"],
                          cwd=tmp_path, env=cli_env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]

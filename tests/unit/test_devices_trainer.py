"""``lit_gpu.devices``: ``free:N`` / ``precision: auto`` in a parsed config; device errors as one line."""

from __future__ import annotations

import os

import pytest
from jsonargparse import Namespace
from lightning.fabric.utilities.exceptions import MisconfigurationException

from lit_gpu import devices, messages
from lit_gpu.devices import explain_device_error, resolve_trainer_config, setting_source
from tests.helpers.fake_nvml import FakeGpu, install
from tests.helpers.paths import CONFIGS


def test_resolve_trainer_config_rewrites_free_and_auto(monkeypatch):
    install(monkeypatch, [FakeGpu(free_gib=3, capability=(7, 5)), FakeGpu(free_gib=9, capability=(8, 0))])
    monkeypatch.setattr(devices, "_cuda_available", lambda: True)
    monkeypatch.setattr(devices, "_cuda_initialized", lambda: False)  # a fresh process
    trainer = Namespace(accelerator="gpu", devices="free:1", precision="auto")
    choice = resolve_trainer_config(trainer)
    assert trainer.devices == [0] and [g.index for g in choice.gpus] == [1]  # handed down as cuda:0
    assert trainer.precision == "bf16-mixed"  # the picked GPU (physical 1, now cuda:0) has bf16
    untouched = Namespace(accelerator="cpu", devices=1, precision="16-mixed")
    assert resolve_trainer_config(untouched) is None
    assert untouched == Namespace(accelerator="cpu", devices=1, precision="16-mixed")


def test_free_n_is_handed_down_and_other_devices_values_are_left_alone(monkeypatch):
    fake = install(monkeypatch, [FakeGpu(free_gib=1), FakeGpu(free_gib=9)])
    monkeypatch.setattr(devices, "_cuda_initialized", lambda: False)  # a fresh process
    trainer = Namespace(accelerator="gpu", devices="free:1")
    assert resolve_trainer_config(trainer) is not None
    assert trainer.devices == [0]  # cuda:0 of the handed-down visibility
    assert os.environ["CUDA_VISIBLE_DEVICES"] == fake.gpus[1].uuid
    for value in ("auto", 2, [0], "0,1", -1):
        trainer = Namespace(accelerator="gpu", devices=value)
        assert resolve_trainer_config(trainer) is None and trainer.devices == value


def test_setting_source_names_the_last_flag_or_config_file():
    gpu_yaml = str(CONFIGS / "trainer" / "gpu.yaml")
    assert setting_source("trainer.accelerator", ["--config", gpu_yaml]) == (
        f"{gpu_yaml} (trainer.accelerator: gpu)"
    )
    argv = ["--config", gpu_yaml, "--trainer.accelerator=cuda"]
    assert setting_source("trainer.accelerator", argv) == "--trainer.accelerator cuda"
    assert setting_source("trainer.devices", ["--config", gpu_yaml, "--trainer.devices", "4"]) == (
        "--trainer.devices 4"
    )
    assert setting_source("trainer.accelerator", ["fit"]) is None


def test_no_gpu_answer_names_the_setting_and_the_cpu_fix():
    err = MisconfigurationException(
        "`CUDAAccelerator` can not run on your system since the accelerator is not available."
    )
    line = explain_device_error(err, ["--trainer.accelerator", "gpu"])
    assert line is not None and line.startswith(
        "--trainer.accelerator gpu asks for a GPU, but none is available"
    )
    assert messages.CPU_FIX in line and "\n" not in line


def test_no_gpu_answer_says_when_cuda_visible_devices_hides_them(monkeypatch):
    """A SLURM CPU job asked for a GPU: the line names slurmd's NoDevFiles as CUDA reads it (no GPU)."""
    import torch

    monkeypatch.setattr(torch.version, "cuda", "12.4")
    err = MisconfigurationException(
        "`CUDAAccelerator` can not run on your system since the accelerator is not available."
    )
    for value in ("NoDevFiles", "", "-1", "0,0"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
        line = explain_device_error(err, ["--trainer.accelerator", "gpu"])
        assert line is not None and f"(CUDA_VISIBLE_DEVICES={value!r} hides all GPUs)" in line
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,")
    assert "hides" not in (explain_device_error(err, ["--trainer.accelerator", "gpu"]) or "")


def test_too_few_gpus_answer_counts_the_visible_ones():
    err = MisconfigurationException("You requested gpu: [0, 1, 2, 3]\n But your machine only has: [0]")
    line = explain_device_error(err, ["--trainer.devices", "4"])
    assert line == messages.TOO_FEW_GPUS.format(
        source="--trainer.devices 4", requested="[0, 1, 2, 3]", count=1, verb="is", available="[0]"
    )


def test_other_errors_are_left_alone():
    assert explain_device_error(MisconfigurationException("something else"), []) is None
    assert (
        explain_device_error(ValueError("You requested gpu: [0]\nBut your machine only has: []"), []) is None
    )


def test_free_n_choice_is_logged_by_the_deciding_process_of_every_node(monkeypatch, capsys):
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    fake = install(monkeypatch, [FakeGpu(free_gib=3), FakeGpu(free_gib=9)])
    monkeypatch.setattr(devices, "_cuda_initialized", lambda: False)  # a fresh process
    monkeypatch.setattr(rank_zero_only, "rank", 1)  # e.g. node 1 of a one-process-per-node job
    resolve_trainer_config(Namespace(accelerator="gpu", devices="free:1"))
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("lit-gpu: free:1 chose local rank 0 -> GPU 1") and fake.gpus[1].uuid in line
    monkeypatch.setenv("LOCAL_RANK", "1")  # a rank Lightning started: inherits, says nothing
    child = Namespace(accelerator="gpu", devices="free:1")
    resolve_trainer_config(child)
    assert child.devices == [0] and capsys.readouterr().err == ""


def test_invalid_trainer_settings_name_the_flag_and_keep_lightnings_reason():
    from lightning.pytorch import Trainer

    from lit_gpu.devices import explain_trainer_error

    argv = ["--config", str(CONFIGS / "simple.yaml"), "--trainer.max_epochs", "-5"]
    try:
        Trainer(max_epochs=-5, accelerator="cpu", logger=False)
    except MisconfigurationException as err:
        line = explain_trainer_error(err, argv)
    assert line is not None and line.startswith(
        "--trainer.max_epochs -5: invalid trainer setting: `max_epochs`"
    )
    try:
        Trainer(strategy="ddpp", accelerator="cpu", logger=False)
    except ValueError as err:
        line = explain_trainer_error(err, ["--trainer.strategy=ddpp"])
    assert line is not None and line.startswith("--trainer.strategy ddpp: invalid trainer setting")
    # a ValueError that names no Trainer argument (e.g. from a user's callback) keeps its traceback
    assert explain_trainer_error(ValueError("bad threshold"), argv) is None


@pytest.mark.parametrize(
    ("key", "value", "given"),
    [("limit_train_batches", float("nan"), ".nan"), ("val_check_interval", float("inf"), "!!float .inf")],
)
def test_a_setting_lightning_names_bare_is_blamed_not_the_accelerator(key, value, given):
    """``--trainer.limit_train_batches .nan`` (YAML's NaN, which jsonargparse reads) was blamed on
    ``debug.yaml (trainer.accelerator: cpu)``: Lightning names the setting without backticks."""
    from lightning.pytorch import Trainer

    from lit_gpu.devices import explain_trainer_error

    argv = ["--config", str(CONFIGS / "debug.yaml"), f"--trainer.{key}", given]
    with pytest.raises(MisconfigurationException) as info:
        Trainer(**{key: value}, accelerator="cpu", logger=False)
    line = explain_trainer_error(info.value, argv)
    assert line is not None and line.startswith(f"--trainer.{key} {given}: invalid trainer setting")

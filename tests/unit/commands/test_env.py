"""``lit-gpu env`` with a faked GPU environment (NVML, torch build, nvcc), and for real on this machine."""

from __future__ import annotations

import json
import stat

import pytest
import torch

from lit_gpu.cli import main
from lit_gpu.commands import env
from tests.helpers.fake_nvml import FakeGpu, install


@pytest.fixture
def cuda_torch(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "12.4")


@pytest.fixture
def fake_nvcc(tmp_path, monkeypatch):
    script = tmp_path / "nvcc"
    script.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(env.shutil, "which", lambda name: str(script) if name == "nvcc" else None)


def test_report_lists_gpus_driver_and_versions(monkeypatch, cuda_torch, fake_nvcc):
    install(
        monkeypatch,
        [
            FakeGpu(free_gib=60),
            FakeGpu(name="Tesla V100-SXM2-16GB", total_gib=16, free_gib=3, capability=(7, 0)),
        ],
    )
    report = env.collect(env={})
    assert report["driver"] == {"driver": "550.54.15", "driver_cuda": "12.4", "nvml_error": None}
    assert report["nvcc"] == "12.4"
    assert report["torch"]["cuda_build"] == "12.4" and report["torch"]["cpu_only_build"] is False
    a100, v100 = report["gpus"]
    assert (a100["name"], a100["capability"], a100["bf16"], a100["cuda_ordinal"]) == (
        "NVIDIA A100-SXM4-80GB",
        "8.0",
        True,
        0,
    )
    assert v100["total_bytes"] == 16 * 2**30 and v100["free_bytes"] == 3 * 2**30 and v100["bf16"] is False
    assert set(report["packages"]) == {"lightning", "torchvision", "torchmetrics"}
    assert report["packages"]["lightning"]
    assert report["cuda_visible_devices"] is None
    assert any("no bf16 on cuda:1 Tesla V100" in line and "16-mixed" in line for line in report["advice"])
    assert any("prefer lit_gpu:trainer/ddp over dp" in line for line in report["advice"])


def test_gpu_with_cpu_only_torch_advises_the_cuda_wheel(monkeypatch):
    install(monkeypatch, [FakeGpu()], cuda_driver=12010)
    monkeypatch.setattr(torch.version, "cuda", None)
    report = env.collect(env={})
    assert report["torch"]["cpu_only_build"] is True
    advice = [line for line in report["advice"] if line.startswith("GPU present but CPU-only torch")]
    assert advice and "whl/cu121" in advice[0]


def test_no_gpu_says_training_runs_on_cpu(monkeypatch, cuda_torch):
    install(monkeypatch, [], fail_init=True)
    report = env.collect(env={})
    assert report["gpus"] == [] and "NVML is not available" in report["nvml_error"]
    assert report["driver"]["driver"] is None
    assert any(line.startswith("no GPU: training runs on CPU") for line in report["advice"])


def test_cuda_visible_devices_hiding_everything(monkeypatch, cuda_torch):
    install(monkeypatch, [FakeGpu(), FakeGpu()])
    report = env.collect(env={"CUDA_VISIBLE_DEVICES": ""})
    assert [g["cuda_ordinal"] for g in report["gpus"]] == [None, None]
    assert any("CUDA_VISIBLE_DEVICES='' hides all GPUs" in line for line in report["advice"])


def test_cuda_visible_devices_subset_maps_ordinals(monkeypatch, cuda_torch):
    gpus = [FakeGpu(), FakeGpu(), FakeGpu()]
    install(monkeypatch, gpus)
    report = env.collect(env={"CUDA_VISIBLE_DEVICES": f"2,{gpus[0].uuid}"})
    assert [g["cuda_ordinal"] for g in report["gpus"]] == [1, None, 0]
    assert report["cuda_visible_devices"] == f"2,{gpus[0].uuid}"


def test_torch_newer_than_driver_is_flagged(monkeypatch):
    install(monkeypatch, [FakeGpu()], cuda_driver=12020)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    report = env.collect(env={})
    assert any("built for CUDA 13.0 but the driver supports only 12.2" in line for line in report["advice"])


def test_healthy_single_gpu_is_ready(monkeypatch, cuda_torch):
    install(monkeypatch, [FakeGpu(capability=(9, 0))])
    monkeypatch.setattr("lit_gpu.devices._cuda_available", lambda: True)
    report = env.collect(env={})
    assert report["advice"] == ["ready: 1 GPU, precision auto = bf16-mixed"]


def test_missing_nvcc_is_reported_as_none(monkeypatch):
    monkeypatch.setattr(env.shutil, "which", lambda name: None)
    assert env._nvcc_version() is None


def test_json_output_is_machine_readable(monkeypatch, capsys, cuda_torch, fake_nvcc):
    install(monkeypatch, [FakeGpu(free_gib=12.5)])
    with pytest.raises(SystemExit) as info:
        main(["env", "--json"])
    assert info.value.code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpus"][0]["free_bytes"] == int(12.5 * 2**30)
    assert data["nvcc"] == "12.4"
    assert {"python", "torch", "driver", "gpus", "cuda_visible_devices", "packages", "advice"} <= set(data)


def test_screen_output_shows_gpu_table_and_advice(monkeypatch, capsys, cuda_torch, fake_nvcc):
    install(
        monkeypatch, [FakeGpu(name="NVIDIA H100", total_gib=80, free_gib=79.5, capability=(9, 0)), FakeGpu()]
    )
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("COLUMNS", "160")
    assert env.main([]) == 0
    out = capsys.readouterr().out
    for text in ("NVIDIA H100", "79.5 GiB", "9.0", "hidden", "cuda:0", "CUDA 12.4", "'1'", "torchmetrics"):
        assert text in out, text
    assert "> " in out  # at least one advice line


def test_real_machine_report_works(capsys):
    # whatever this machine is: the command runs, and its JSON agrees with torch
    assert env.main(["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["torch"]["version"] == torch.__version__
    assert data["advice"], "there is always at least one advice line"
    assert not torch.cuda.is_initialized()  # no CUDA context was created

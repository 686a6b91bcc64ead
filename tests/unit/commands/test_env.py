"""``lit-gpu env`` with a faked GPU environment (NVML, torch build, nvcc), and for real on this machine."""

from __future__ import annotations

import json
import stat

import pytest
import torch

from lit_gpu import messages
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


def test_screen_without_a_driver_keeps_each_line_whole_and_no_nvcc(
    monkeypatch, capsys, cuda_torch, fake_nvcc
):
    """No driver: no compiler row beside "not found" (JSON keeps it); the NVML line and the
    advice are one line each, however narrow the console, wrapped by the terminal, not cut by rich."""
    install(monkeypatch, [], fail_init=True)
    monkeypatch.setenv("COLUMNS", "40")
    assert env.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert not [ln for ln in lines if "nvcc" in ln]
    nvml = [ln for ln in lines if ln.startswith("GPUs: none (NVML is not available")]
    assert len(nvml) == 1 and nvml[0].endswith(")") and len(nvml[0]) > 40
    advice = [ln for ln in lines if ln.startswith("> no GPU: training runs on CPU")]
    assert len(advice[0]) > 40 and advice[0].endswith(")")  # longer than the console: one line all the same
    assert env.collect(env={})["nvcc"] == "12.4"


def test_cuda_visible_devices_hiding_everything(monkeypatch, cuda_torch):
    install(monkeypatch, [FakeGpu(), FakeGpu()])
    report = env.collect(env={"CUDA_VISIBLE_DEVICES": ""})
    assert [g["cuda_ordinal"] for g in report["gpus"]] == [None, None]
    assert any("CUDA_VISIBLE_DEVICES='' hides all GPUs" in line for line in report["advice"])


def test_cuda_visible_devices_subset_maps_ordinals(monkeypatch, cuda_torch):
    gpus = [FakeGpu(), FakeGpu(), FakeGpu()]
    install(monkeypatch, gpus)
    report = env.collect(env={"CUDA_VISIBLE_DEVICES": "2,0,"})  # the empty entry ends the list
    assert [g["cuda_ordinal"] for g in report["gpus"]] == [1, None, 0]
    assert report["cuda_visible_devices"] == "2,0,"
    assert not any("CUDA_VISIBLE_DEVICES" in line for line in report["advice"])


def test_a_value_cuda_reads_in_part_is_reported_as_cuda_reads_it(monkeypatch, cuda_torch):
    gpus = [FakeGpu(), FakeGpu(), FakeGpu()]
    install(monkeypatch, gpus)
    value = f"2,{gpus[0].uuid}"  # an index list ends at the UUID (torch's _parse_visible_devices)
    report = env.collect(env={"CUDA_VISIBLE_DEVICES": value})
    assert [g["cuda_ordinal"] for g in report["gpus"]] == [None, None, 0]
    assert f"CUDA_VISIBLE_DEVICES={value!r}: CUDA reads it as [2]" in "\n".join(report["advice"])


def test_a_slurm_cpu_job_is_reported_not_refused(monkeypatch, cuda_torch):
    install(monkeypatch, [FakeGpu(), FakeGpu()])
    report = env.collect(env={"CUDA_VISIBLE_DEVICES": "NoDevFiles", "RANK": "abc"})
    assert [g["cuda_ordinal"] for g in report["gpus"]] == [None, None]
    advice = "\n".join(report["advice"])
    assert "CUDA_VISIBLE_DEVICES='NoDevFiles' hides all GPUs (slurmd's value for a job without GPUs" in advice
    assert "environment variable RANK='abc': a whole number >= 0" in advice


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
    assert data["versions"]["source"].startswith("lit-gpu ")


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


_REQUIRES = [
    "torch>=2.4",
    "lightning<3,>=2.6.0",
    "jsonargparse[signatures]>=4.39.0",
    "optuna>=4.0",
    "pytest>=8; extra == 'dev'",
]
_FOUND = {"torch": "2.15.0+cu132", "lightning": "2.5.6", "jsonargparse": "4.53.0", "optuna": None}


@pytest.fixture
def fake_metadata(monkeypatch):
    """lit-gpu's declared requirements and the versions found, as an environment with lightning too old."""
    real_requires, real_version = env.metadata.requires, env.metadata.version

    def requires(dist):
        return list(_REQUIRES) if dist == "lit-gpu" else real_requires(dist)

    def version(dist):
        if dist == "lit-gpu":
            return "0.1.0"
        if dist in _FOUND:
            if _FOUND[dist] is None:
                raise env.metadata.PackageNotFoundError(dist)
            return _FOUND[dist]
        return real_version(dist)

    monkeypatch.setattr(env.metadata, "requires", requires)
    monkeypatch.setattr(env.metadata, "version", version)


def test_versions_are_checked_against_the_declared_ranges(fake_metadata):
    versions = env.dependency_versions()
    assert versions["source"] == "lit-gpu 0.1.0"
    rows = {row["name"]: row for row in versions["dependencies"]}
    assert list(rows) == ["torch", "lightning", "jsonargparse", "optuna"]  # extras' tools are not checked
    assert rows["torch"]["ok"] is True  # a local version label (+cu132) is in range
    assert rows["lightning"] == {
        "name": "lightning",
        "found": "2.5.6",
        "supported": ">=2.6.0,<3",
        "ok": False,
        "requirement": "lightning>=2.6.0,<3",
    }
    assert rows["jsonargparse"]["ok"] is True
    assert rows["jsonargparse"]["requirement"] == "jsonargparse[signatures]>=4.39.0"
    assert rows["optuna"]["found"] is None and rows["optuna"]["ok"] is False


def test_out_of_range_versions_become_advice_and_are_flagged_on_screen(
    fake_metadata, monkeypatch, capsys, cuda_torch
):
    install(monkeypatch, [], fail_init=True)
    report = env.collect(env={})
    assert report["advice"][:2] == [
        messages.DEPENDENCY_OUT_OF_RANGE.format(
            name="lightning", found="2.5.6", supported=">=2.6.0,<3", requirement="lightning>=2.6.0,<3"
        ),
        "optuna not installed: lit-gpu supports >=4.0; pip install 'optuna>=4.0'",
    ]
    monkeypatch.setenv("COLUMNS", "160")
    assert env.main([]) == 0
    out = capsys.readouterr().out
    lightning_row = next(line for line in out.splitlines() if "lightning" in line and "2.5.6" in line)
    assert ">=2.6.0,<3" in lightning_row and "OUT OF RANGE" in lightning_row
    torch_row = next(line for line in out.splitlines() if line.startswith("│ torch "))
    assert "2.15.0+cu132" in torch_row and "ok" in torch_row and "OUT OF RANGE" not in torch_row


def test_without_lit_gpu_metadata_the_ranges_are_unknown(monkeypatch, capsys):
    def requires(dist):
        raise env.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(env.metadata, "requires", requires)
    assert env.dependency_versions() == {"source": None, "dependencies": []}
    assert env.main([]) == 0
    assert "lit-gpu is not installed (no metadata), supported ranges unknown" in capsys.readouterr().out


def test_this_environment_is_in_the_supported_range():
    """The environment the tests run in (newest resolved, or CI's lower bounds) is one lit-gpu supports."""
    versions = env.dependency_versions()
    assert versions["source"] is not None, "install lit-gpu (pip install -e .) to read its declared ranges"
    out_of_range = [row for row in versions["dependencies"] if not row["ok"]]
    assert not out_of_range, out_of_range


@pytest.mark.parametrize("value", ["\u00b2", "0,\u00b2", "\u0661"])
def test_a_value_torch_cannot_read_as_cuda_does_is_reported_not_a_traceback(monkeypatch, cuda_torch, value):
    """``CUDA_VISIBLE_DEVICES=²`` made ``lit-gpu env`` end in torch's ``ValueError`` (its ``_strtoul``
    takes any ``str.isdigit``); now the GPUs are those CUDA shows and the advice names the disagreement."""
    install(monkeypatch, [FakeGpu(), FakeGpu()])
    report = env.collect(env={"CUDA_VISIBLE_DEVICES": value})
    shown = [0, None] if value.startswith("0,") else [None, None]  # CUDA's reading: digits 0-9 only
    assert [g["cuda_ordinal"] for g in report["gpus"]] == shown
    assert f"environment variable CUDA_VISIBLE_DEVICES={value!r}: torch" in "\n".join(report["advice"])

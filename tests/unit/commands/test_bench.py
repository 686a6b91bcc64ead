"""``lit-gpu bench``: mode planning, skip reasons, and a real CPU run on a tiny config."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lit_gpu.cli.main import COMMANDS
from lit_gpu.commands import bench


def _no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def test_plan_without_cuda(monkeypatch):
    _no_cuda(monkeypatch)
    assert bench.plan_mode("cpu").skip is None
    for mode in ("gpu", "amp"):
        assert "no CUDA device" in bench.plan_mode(mode).skip
    bf16 = bench.plan_mode("bf16")
    assert (bf16.skip, bf16.accelerator, bf16.precision) == (None, "cpu", "bf16-mixed")
    ddp = bench.plan_mode("ddp")
    assert (ddp.skip, ddp.accelerator, ddp.devices, ddp.strategy) == (None, "cpu", 2, "ddp")
    assert bench.plan_mode("dp").skip  # DataParallel needs GPUs (or is not registered)
    with pytest.raises(ValueError, match="unknown mode"):
        bench.plan_mode("tpu")


def test_plan_with_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert bench.plan_mode("amp").precision == "16-mixed"
    assert bench.plan_mode("bf16").accelerator == "gpu"
    ddp = bench.plan_mode("ddp")
    assert (ddp.accelerator, ddp.devices, ddp.skip) == ("gpu", 4, None)


def test_markdown_speedup_column():
    rows = [
        bench.BenchResult("cpu", "cpux1", 1000.0, 55.0, 300, "RSS", 0.5, 1.0),
        bench.BenchResult("gpu", status="skipped: no CUDA device"),
    ]
    md = bench.to_markdown(rows)
    assert "| cpu | cpux1 | 1000 | 55.00 | 0.50 | 300 (RSS) | 1.00x | ok |" in md
    assert "skipped: no CUDA device" in md


def _plant_yaml(folder: Path) -> Path:
    """A ``yaml.py`` in ``folder`` that leaves a marker file when it is imported; returns the marker."""
    marker = folder / "planted_yaml_ran"
    (folder / "yaml.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\nraise ImportError('planted')\n"
    )
    return marker


@pytest.mark.parametrize("version", [(3, 10), sys.version_info[:2]])
def test_child_python_keeps_the_working_folder_off_sys_path(version, tmp_path, monkeypatch):
    """A module the child runs imports the real ``yaml``, not the one planted in its working folder."""
    work, code = tmp_path / "work", tmp_path / "code"
    work.mkdir()
    code.mkdir()
    marker = _plant_yaml(work)
    (code / "uses_yaml.py").write_text("import yaml\nprint(yaml.safe_load('a: 1')['a'])\n")
    monkeypatch.setenv("PYTHONPATH", f"{code}{os.pathsep}")  # the stray empty entry means "here"
    plain = subprocess.run([sys.executable, "-m", "uses_yaml"], cwd=work, capture_output=True, text=True)
    assert plain.returncode != 0 and marker.is_file()  # the trap works on a plain `python -m`
    marker.unlink()

    monkeypatch.setattr(sys, "version_info", version)
    command, env = bench.child_python("uses_yaml")
    assert ("-P" in command) == (version >= (3, 11)) and env["PYTHONPATH"] == str(code)
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr
    assert not marker.exists()


@pytest.mark.integration
@pytest.mark.full  # a timed CPU mode in a child process: the full tier
def test_bench_cpu_run_and_gpu_skip(fake_mnist_dir: Path, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv(
        "PYTHONPATH", str(Path(__file__).resolve().parents[2]) + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    _no_cuda(monkeypatch)
    marker = _plant_yaml(tmp_path)  # the working folder is data: the mode's child never imports it
    config = tmp_path / "tiny.yaml"
    config.write_text(
        "model:\n  class_path: lit_gpu.modules.ClassificationModule\n  init_args:\n"
        "    net:\n      class_path: lit_gpu.nets.FastMnistNet\n      init_args: {c1: 4, c2: 8}\n"
        "data:\n  class_path: lit_gpu.data.MNISTDataModule\n  init_args:\n"
        f"    data_dir: {fake_mnist_dir}\n    val_size: 100\n    batch_size: 25\n    storage: tensor\n"
        "    download: false\n"
    )
    out_md, out_csv = tmp_path / "bench.md", tmp_path / "bench.csv"
    assert "bench" in COMMANDS
    code = bench.main(
        [
            "--config",
            str(config),
            "--modes",
            "cpu,gpu",
            "--steps",
            "12",
            "--warmup",
            "2",
            "--markdown",
            str(out_md),
            "--csv",
            str(out_csv),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert "gpu: skipped: no CUDA device (torch.cuda.is_available() is False)" in printed
    assert "samples/s" in printed and "speedup" in printed
    md = out_md.read_text()
    cpu_row = next(line for line in md.splitlines() if line.startswith("| cpu |"))
    cells = [c.strip() for c in cpu_row.strip("|").split("|")]
    assert float(cells[2]) > 0 and float(cells[3]) > 0 and float(cells[4]) > 0  # samples/s, s/epoch, warm-up
    assert cells[6] == "1.00x" and cells[7] == "ok"
    assert "(RSS)" in cells[5]
    assert out_csv.read_text().splitlines()[0].startswith("mode,setup,samples/s")
    assert not marker.exists()

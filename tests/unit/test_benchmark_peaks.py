"""The GPU-bound benchmark's table of dense bf16 peaks (benchmarks/resnet50_gpu.py), by device name."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.helpers.paths import REPO_ROOT


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts benchmarks/ first: undone after
    spec = importlib.util.spec_from_file_location(
        "resnet50_gpu", REPO_ROOT / "benchmarks" / "resnet50_gpu.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989.0),  # the SXM part names itself by its memory
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA H200 NVL", None),  # another part, another peak: not guessed
        ("NVIDIA H100 NVL", None),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_peaks_are_read_by_device_name(bench, name, peak):
    assert bench.peak_tflops(name) == peak

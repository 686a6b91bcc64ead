"""``lit-gpu env`` names a torch/torchvision build mismatch and its fix in one line."""

from __future__ import annotations

import sys

import pytest
import torch

from lit_gpu.commands import env
from tests.helpers.fake_nvml import install

NMS = "operator torchvision::nms does not exist"


@pytest.fixture
def no_gpu(monkeypatch):
    install(monkeypatch, [], fail_init=True)


def _versions(monkeypatch, torch_version: str, vision: str | None) -> None:
    monkeypatch.setattr(torch, "__version__", torch_version)
    real = env._version
    monkeypatch.setattr(env, "_version", lambda dist: vision if dist == "torchvision" else real(dist))


def _mismatch_lines(report: dict) -> list[str]:
    return [line for line in report["advice"] if "does not fit torch" in line]


def test_a_torchvision_that_fails_to_import_is_named_with_the_pair_to_install(monkeypatch, no_gpu):
    _versions(monkeypatch, "2.14.1+cpu", "0.29.1")
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(env, "_import_torchvision", lambda: NMS)
    (line,) = _mismatch_lines(env.collect())
    assert line == (
        f"torchvision 0.29.1 does not fit torch 2.14.1+cpu ({NMS}): they come from different "
        "builds; install the pair from one index: pip install --force-reinstall 'torch==2.14.1' "
        "'torchvision==0.29.*' --index-url https://download.pytorch.org/whl/cpu"
    )


def test_a_torchvision_of_another_torch_release_is_named(monkeypatch, no_gpu):
    _versions(monkeypatch, "2.5.1+cu124", "0.19.0")
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(env, "_import_torchvision", lambda: None)
    (line,) = _mismatch_lines(env.collect())
    assert "(torch 2.5 pairs with torchvision 0.20)" in line
    assert line.endswith(
        "'torch==2.5.1' 'torchvision==0.20.*' --index-url https://download.pytorch.org/whl/cu124"
    )


@pytest.mark.parametrize(
    "torch_version, vision", [("2.5.1+cpu", "0.20.1+cpu"), ("2.14.1+cu130", "0.29.1"), ("2.14.1", None)]
)
def test_a_matching_pair_or_no_torchvision_says_nothing(monkeypatch, no_gpu, torch_version, vision):
    _versions(monkeypatch, torch_version, vision)
    monkeypatch.setattr(env, "_import_torchvision", lambda: None)
    assert _mismatch_lines(env.collect()) == []


def test_the_import_check_catches_the_error_torchvision_raises(monkeypatch, tmp_path):
    fake = tmp_path / "torchvision"
    fake.mkdir()
    (fake / "__init__.py").write_text(f"raise RuntimeError({NMS!r})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        monkeypatch.delitem(sys.modules, name)
    assert env._import_torchvision() == NMS


def test_this_machines_pair_imports_and_says_nothing():
    report = env.collect()
    assert report["torchvision"]["import_error"] is None and report["torchvision"]["pairs"]
    assert _mismatch_lines(report) == []

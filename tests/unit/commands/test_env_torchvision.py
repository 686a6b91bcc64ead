"""``lit-gpu env`` names a torch/torchvision build mismatch and its fix in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from lit_gpu.commands import env
from tests.helpers.fake_nvml import install
from tests.helpers.paths import REPO_ROOT


@pytest.fixture
def no_gpu(monkeypatch):
    install(monkeypatch, [], fail_init=True)


def _versions(monkeypatch, torch_version: str, vision: str | None) -> None:
    monkeypatch.setattr(torch, "__version__", torch_version)
    real = env._version
    monkeypatch.setattr(env, "_version", lambda dist: vision if dist == "torchvision" else real(dist))


def _mismatch_lines(report: dict) -> list[str]:
    return [line for line in report["advice"] if "does not fit torch" in line]


FIX_CPU = (
    "torchvision 0.29.1 does not fit torch 2.14.1+cpu (torch is the CPU-only build, torchvision a PyPI "
    "build): they come from different builds; install the pair from one index: pip install --force-reinstall "
    "'torch==2.14.1' 'torchvision==0.29.*' --index-url https://download.pytorch.org/whl/cpu"
)


def test_a_torchvision_of_another_build_is_named_with_the_pair_to_install(monkeypatch, no_gpu):
    _versions(monkeypatch, "2.14.1+cpu", "0.29.1")
    monkeypatch.setattr(torch.version, "cuda", None)
    (line,) = _mismatch_lines(env.collect())
    assert line == FIX_CPU


@pytest.mark.parametrize(
    "torch_version, vision, why",
    [
        ("2.14.1+cpu", "0.29.1+cpu", None),
        ("2.14.1+cu130", "0.29.1+cu130", None),
        ("2.14.1", "0.29.1", None),
        ("2.14.1+cu130", "0.29.1", None),  # PyPI's torchvision is a CUDA build too
        ("2.14.1+cu130", "0.29.1+cpu", "torch is the cu130 build, torchvision the CPU-only build"),
        ("2.14.1", "0.29.1+cpu", "torch is a PyPI build, torchvision the CPU-only build"),
        ("2.14.1+cu126", "0.29.1+cu130", "torch is the cu126 build, torchvision the cu130 build"),
    ],
)
def test_the_build_is_read_from_the_installed_versions(torch_version, vision, why):
    assert env.other_build(torch_version, vision) == why


def test_the_fix_line_is_printed_whole_on_a_terminal(monkeypatch, no_gpu, capsys):
    """An 80-column terminal wraps the advice; rich never cuts it (the command must paste whole)."""
    _versions(monkeypatch, "2.14.1+cpu", "0.29.1")
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setenv("COLUMNS", "80")
    env.render(env.collect())
    out = capsys.readouterr().out
    assert FIX_CPU in out.replace("\n", "") and "\u2026" not in out


def test_env_imports_no_torchvision_to_name_the_pair():
    """``import torchvision`` costs seconds: the pair is read from the installed distributions' metadata."""
    code = "import sys; from lit_gpu.commands import env; env.collect(); print('torchvision' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True
    )
    assert done.stdout.split()[-1] == "False"


def test_a_torchvision_of_another_torch_release_is_named(monkeypatch, no_gpu):
    _versions(monkeypatch, "2.5.1+cu124", "0.19.0")
    monkeypatch.setattr(torch.version, "cuda", "12.4")
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
    assert _mismatch_lines(env.collect()) == []


def test_this_machines_pair_says_nothing():
    report = env.collect()
    assert report["torchvision"]["other_build"] is None and report["torchvision"]["pairs"]
    assert _mismatch_lines(report) == []

"""``--ckpt_path FILE``: read once; the bytes its resolution checked are the bytes Lightning loads.

A file replaced (atomic rename) between the resolution and Lightning's load is not what is loaded, and the
checkpoint file is opened exactly once during ``lit-gpu test --ckpt_path FILE``.
"""

from __future__ import annotations

import builtins
import io
import os
import sys
from pathlib import Path

import pytest
import torch

from lit_gpu.checkpoints import read as checkpoint_files
from lit_gpu.cli import lightning_cli, main
from tests.helpers.payload import Payload as _Payload
from tests.helpers.simple_run import SIMPLE, fit_simple


@pytest.fixture(scope="module")
def good_ckpt(tmp_path_factory) -> Path:
    """A real last.ckpt of configs/simple.yaml (one short in-process fit)."""
    return fit_simple(tmp_path_factory.mktemp("good_run"))


def _other_file(good_ckpt: Path, out: Path, marker: Path) -> Path:
    """Another model's checkpoint, with other weights and a pickle payload: refused had it been checked."""
    checkpoint = torch.load(good_ckpt, weights_only=True)
    checkpoint["hyper_parameters"] = {"_class_path": "lit_gpu.modules.ClassificationModule", "num_classes": 3}
    checkpoint["state_dict"] = {k: v + 100 for k, v in checkpoint["state_dict"].items()}
    checkpoint["extra"] = _Payload(marker)
    torch.save(checkpoint, out)
    return out


@pytest.mark.parametrize("subcommand", ["test", "fit"])
def test_a_file_replaced_after_the_resolution_is_not_what_is_loaded(
    subcommand, good_ckpt, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])
    ckpt = tmp_path / "mine.ckpt"
    ckpt.write_bytes(good_ckpt.read_bytes())
    marker = tmp_path / "marker"
    other = _other_file(good_ckpt, tmp_path / "other.ckpt", marker)
    resolve = lightning_cli.resolve_ckpt_path

    def resolve_then_swap(config, *args):  # right after the resolution, long before Lightning's load
        resolution = resolve(config, *args)
        os.replace(other, ckpt)
        return resolution

    loaded = []
    read_for_resume = checkpoint_files.read_for_resume

    def recording(*args, **kwargs):
        loaded.append(read_for_resume(*args, **kwargs))
        return loaded[-1]

    monkeypatch.setattr(lightning_cli, "resolve_ckpt_path", resolve_then_swap)
    monkeypatch.setattr(checkpoint_files, "read_for_resume", recording)
    expected = torch.load(good_ckpt, weights_only=True)["state_dict"]
    main([subcommand, *SIMPLE, "--ckpt_path", str(ckpt), "--trainer.max_epochs", "2"])
    assert not marker.exists()
    assert len(loaded) == 1 and loaded[0]["hyper_parameters"].get("_class_path") != (
        "lit_gpu.modules.ClassificationModule"
    )
    assert loaded[0]["state_dict"].keys() == expected.keys()
    assert all(torch.equal(loaded[0]["state_dict"][k], v) for k, v in expected.items())


def test_test_ckpt_path_opens_the_file_once(good_ckpt, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])
    ckpt = tmp_path / "mine.ckpt"
    ckpt.write_bytes(good_ckpt.read_bytes())
    target = os.path.realpath(ckpt)
    opens: list[str] = []
    loads: list[str] = []

    def ours(file) -> bool:
        return isinstance(file, str | os.PathLike) and os.path.realpath(file) == target

    def counting(real):
        def opener(file, *args, **kwargs):
            if ours(file):
                opens.append(real.__name__)
            return real(file, *args, **kwargs)

        return opener

    torch_load = torch.load

    def load(source, *args, **kwargs):  # torch never gets the path itself (its C++ reader would open it)
        loads.append(type(source).__name__)
        return torch_load(source, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting(builtins.open))
    monkeypatch.setattr(io, "open", counting(io.open))
    monkeypatch.setattr(os, "open", counting(os.open))
    monkeypatch.setattr(torch, "load", load)
    main(["test", *SIMPLE, "--ckpt_path", str(ckpt)])
    assert "test/loss" in capsys.readouterr().out
    assert opens == ["open"], opens
    assert loads and set(loads) == {"BytesIO"}, loads

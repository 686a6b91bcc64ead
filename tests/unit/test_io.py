"""Atomic checkpoint writes: an interrupted save never replaces a good file."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from lit_gpu.io import AtomicCheckpointIO, atomic_torch_save, install_atomic_checkpoint_io


def test_interrupted_write_keeps_previous_file_and_leaves_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": 1, "w": torch.ones(3)}, path)
    good = path.read_bytes()

    real_save = torch.save

    def dies_half_way(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 partial bytes of a checkpoint")  # a truncated write...
        raise KeyboardInterrupt  # ...then the process is interrupted

    monkeypatch.setattr(torch, "save", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"step": 2, "w": torch.zeros(3)}, path)
    monkeypatch.setattr(torch, "save", real_save)

    assert path.read_bytes() == good
    assert torch.load(path, weights_only=True)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_atomic_save_replaces_and_round_trips(tmp_path):
    path = tmp_path / "sub" / "x.pt"
    atomic_torch_save({"a": torch.arange(3)}, path)
    atomic_torch_save({"a": torch.arange(5)}, path)
    assert torch.equal(torch.load(path, weights_only=True)["a"], torch.arange(5))


def test_installed_on_a_plain_trainer():
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    assert install_atomic_checkpoint_io(trainer)
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)
    assert not install_atomic_checkpoint_io(trainer)  # a non-default IO is left alone

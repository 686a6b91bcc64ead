"""Atomic checkpoint writes: an interrupted or failed save never replaces a good file nor leaves litter."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
import time

import lightning.pytorch as pl
import pytest
import torch

from lit_gpu.checkpoints.io import (
    STALE_AFTER_S,
    AtomicCheckpointIO,
    DiskFullError,
    atomic_torch_save,
    checkpoint_size,
    clean_stale_temp_files,
    install_atomic_checkpoint_io,
    tensor_bytes,
)


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


# ---- disk full ----------------------------------------------------------------------------------
def test_disk_full_is_one_line_with_size_and_keeps_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": 1, "w": torch.ones(3)}, path)
    good = path.read_bytes()

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)  # the write "succeeds" into the page cache; fsync fails
    with pytest.raises(DiskFullError) as info:
        io.save_checkpoint({"step": 2, "w": torch.zeros(1000, 250)}, path)  # 1.0 MB of tensors
    monkeypatch.undo()
    message = str(info.value)
    assert message.startswith(f"disk full: could not save checkpoint {path} (about 1.0 MB, ")
    assert "\n" not in message and "the previous last.ckpt is intact, no partial file was left" in message
    assert path.read_bytes() == good
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_other_save_errors_keep_their_traceback(tmp_path, monkeypatch):
    def broken(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError, match="Input/output error"):
        AtomicCheckpointIO().save_checkpoint({"w": torch.ones(3)}, tmp_path / "x.ckpt")


def test_checkpoint_size_is_about_what_torch_save_writes(tmp_path):
    w = torch.zeros(100, dtype=torch.float32)
    checkpoint = {"a": w, "b": [w, w[:10]], "c": {"d": torch.zeros(5, dtype=torch.int64)}, "step": 3}
    assert tensor_bytes(checkpoint) == 440  # shared storage counted once
    torch.save(checkpoint, tmp_path / "x.ckpt")
    written = (tmp_path / "x.ckpt").stat().st_size
    assert abs(checkpoint_size(checkpoint) - written) < 0.1 * written  # zip record names differ


def test_disk_full_on_a_real_small_filesystem(tiny_tmpfs):
    path = tiny_tmpfs / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": 1, "w": torch.ones(1000)}, path)  # 4 KB: fits
    good = path.read_bytes()
    with pytest.raises(DiskFullError) as info:
        io.save_checkpoint({"step": 2, "w": torch.ones(200_000)}, path)  # 800 KB: does not
    message = str(info.value)
    assert message.startswith(f"disk full: could not save checkpoint {path} (about 80"), message
    size = float(re.search(r"about ([\d.]+) KB, ([\d.]+) KB free there", message).group(1))
    assert 800 < size < 810  # 800 KB of tensors + the pickle

    assert path.read_bytes() == good and torch.load(path, weights_only=True)["step"] == 1
    assert [p.name for p in tiny_tmpfs.iterdir()] == ["last.ckpt"]


# ---- temp files left by killed saves ------------------------------------------------------------
@pytest.mark.integration
def test_sigkilled_save_leaves_a_temp_that_a_later_cleanup_removes(tmp_path):
    code = (
        "import os, signal, sys; from lit_gpu.checkpoints.io import atomic_write\n"
        "def write(f):\n    f.write(b'half a checkpoint'); f.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
        "atomic_write(sys.argv[1], write)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "last.ckpt")], check=False)
    litter = list(tmp_path.glob(".last.ckpt.*.tmp"))
    assert len(litter) == 1  # what SIGKILL leaves
    assert clean_stale_temp_files(tmp_path) == []  # a save may still be writing it
    removed = clean_stale_temp_files(tmp_path, now=time.time() + STALE_AFTER_S + 60)
    assert removed == [f"{litter[0]} (17 B)"] and not litter[0].exists()


def test_cleanup_takes_lit_gpus_temp_names_once_an_hour_old(tmp_path):
    names = [".last.ckpt.lit_gpu-abcd1234.tmp", ".last.ckpt.host-4026531836.123.abcd1234.tmp"]
    names += [".last.ckpt.k2j4h5g6.tmp", ".notes.tmp", ".last.ckpt.lit_gpu-abcd.tmp"]
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    assert clean_stale_temp_files(tmp_path) == []  # fresh: a live save writes continuously
    removed = clean_stale_temp_files(tmp_path, now=time.time() + STALE_AFTER_S + 60)
    assert sorted(removed) == sorted(f"{tmp_path / name} (1 B)" for name in names[:3])
    assert all((tmp_path / name).exists() for name in names[3:])  # not names lit_gpu gives: left alone

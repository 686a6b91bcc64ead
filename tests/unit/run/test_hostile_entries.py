"""Hostile entries in a run folder (issue 46's red team): a FIFO, a device or a folder named like a
checkpoint, version folders and config files that are links out, names with control characters. The
store never waits on one, never reads past the run folder, and says so in one line.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import pytest
import torch

from lit_gpu.checkpoints import load_state_dict
from lit_gpu.checkpoints import read as checkpoint
from lit_gpu.errors import LitGpuError
from lit_gpu.run import store
from lit_gpu.run import store as run_config
from lit_gpu.run.store import resolve_ckpt_path
from tests.helpers.run_store import run_folder, subcommand


def _plant(path: Path, kind: str) -> None:
    if path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zeros":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()


@contextlib.contextmanager
def _writer_after(fifo: Path, seconds: float = 5.0):
    """A reader blocked on ``fifo`` (the bug) is let go after ``seconds`` (a writer comes and goes, each
    second after that): the test then fails instead of hanging."""
    stop = threading.Event()

    def come_and_go() -> None:
        if stop.wait(seconds):
            return
        while not stop.is_set():
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            stop.wait(1.0)

    helper = threading.Thread(target=come_and_go, daemon=True)
    helper.start()
    try:
        yield
    finally:
        stop.set()
        helper.join()


KINDS = ["fifo", "zeros", "folder"]


@pytest.mark.parametrize("kind", KINDS)
def test_last_passes_over_a_fifo_a_device_or_a_folder_named_like_a_checkpoint(tmp_path, kind, capsys):
    run = run_folder(tmp_path)
    newer = run / "checkpoints" / "last-v9.ckpt"
    _plant(newer, kind)
    with _writer_after(newer):
        chosen = resolve_ckpt_path(subcommand(tmp_path, "last"))
    assert chosen is not None and chosen.path == str(run / "checkpoints" / "last.ckpt")
    _plant(run / "checkpoints" / "last.ckpt", kind)  # the only one: none to resume, a fresh fit says so
    os.rmdir(newer) if kind == "folder" else newer.unlink()
    with _writer_after(run / "checkpoints" / "last.ckpt"):
        chosen = resolve_ckpt_path(subcommand(tmp_path, "last"))
    assert chosen is None or chosen.path is None
    said = capsys.readouterr()
    assert "training from scratch" in said.err + said.out


@pytest.mark.parametrize("kind", ["fifo", "zeros"])
def test_a_fifo_or_a_device_given_as_the_file_is_one_line_saying_so(tmp_path, kind):
    named = tmp_path / "model.ckpt"
    _plant(named, kind)
    with _writer_after(named), pytest.raises(LitGpuError, match="is not a regular file"):
        resolve_ckpt_path(subcommand(tmp_path / "root", str(named), "test"))
    with _writer_after(named), pytest.raises(LitGpuError, match="is not a regular file"):
        load_state_dict(named)


def test_a_fifo_put_in_place_after_the_entry_was_checked_is_never_waited_on(tmp_path, monkeypatch):
    """Between the look at the entry and the open, a file can become a FIFO: the open does not wait."""
    fifo = tmp_path / "swapped.ckpt"
    os.mkfifo(fifo)
    monkeypatch.setattr(checkpoint, "_check_entry", lambda path: Path(path))  # it was a file when looked at
    with _writer_after(fifo), pytest.raises(LitGpuError, match="is not a regular file"):
        load_state_dict(fifo)
    with _writer_after(fifo), pytest.raises(LitGpuError, match="is not a regular file"):
        checkpoint.read_into_memory(fifo)


@pytest.mark.parametrize("owner", ["mine", "another user's"])
def test_a_version_folder_that_is_a_link_out_is_never_chosen_nor_read(tmp_path, owner, monkeypatch):
    if owner != "mine" and os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    outside = run_folder(tmp_path / "elsewhere", step=50)  # a newer step than the run of the root's
    if owner != "mine":
        for path in [outside, *outside.rglob("*")]:
            os.chown(path, 65534, 65534, follow_symlinks=False)
    run_folder(tmp_path / "root")
    (tmp_path / "root" / "lit_gpu" / "version_7").symlink_to(outside)
    read: list[str] = []
    for module, name in ((store, "inspect"), (run_config, "read_yaml")):
        real = getattr(module, name)
        monkeypatch.setattr(
            module, name, lambda path, *a, real=real, **k: read.append(str(path)) or real(path, *a, **k)
        )
    chosen = resolve_ckpt_path(subcommand(tmp_path / "root", "last"))
    assert chosen is not None and "version_0" in str(chosen.path)
    assert read and not [path for path in read if "version_7" in path or "elsewhere" in path]


def test_a_config_yaml_that_is_a_link_does_not_choose_its_run(tmp_path, capsys):
    """The run is chosen by its own files: a config.yaml linking to another run's config names nothing."""
    run = run_folder(tmp_path)
    real = tmp_path / "outside.yaml"
    (run / "config.yaml").rename(real)
    (run / "config.yaml").symlink_to(real)
    chosen = resolve_ckpt_path(subcommand(tmp_path, "last"))
    assert chosen is None or chosen.path is None
    said = capsys.readouterr()
    assert "no config.yaml" in said.err + said.out


def test_a_checkpoint_named_with_control_characters_is_shown_escaped(tmp_path):
    run = run_folder(tmp_path)
    odd = run / "checkpoints" / "last-v1\x1b[2J\nlit-gpu: forged.ckpt"
    header = {"global_step": 9, "epoch": 0, "state_dict": {}, "pytorch-lightning_version": "2.6.6"}
    torch.save(header, odd)
    chosen = resolve_ckpt_path(subcommand(tmp_path, "last"))
    assert chosen is not None and chosen.path == str(odd)
    assert "\x1b" not in chosen.line and "\n" not in chosen.line and "\\x1b[2J\\n" in chosen.line

"""Where a config's runs keep checkpoints, and the clean-up of killed saves' temp files there."""

from __future__ import annotations

import os
import time

from jsonargparse import Namespace

from lit_gpu.checkpoints.io import STALE_AFTER_S
from lit_gpu.run.store import checkpoint_dirs, clean_run_folders


def _stale_temp(folder):
    folder.mkdir(parents=True, exist_ok=True)
    temp = folder / ".last.ckpt.k2j4h5g6.tmp"  # an earlier lit_gpu's naming: stale after an hour
    temp.write_bytes(b"x")
    old = time.time() - STALE_AFTER_S - 600
    os.utime(temp, (old, old))
    return temp


def test_clean_up_removes_stale_temps_in_runs_but_never_through_a_link_out(tmp_path, capsys):
    root = tmp_path / "runs"
    mine = _stale_temp(root / "lit_gpu" / "version_0" / "checkpoints")
    outside = _stale_temp(tmp_path / "someone_elses" / "checkpoints")
    (root / "lit_gpu" / "version_1").mkdir()
    (root / "lit_gpu" / "version_1" / "checkpoints").symlink_to(outside.parent)
    config = Namespace(trainer=Namespace(default_root_dir=str(root), logger=None), checkpoint=None)
    assert str(root / "lit_gpu" / "version_*" / "checkpoints") in checkpoint_dirs(config)
    clean_run_folders(config)
    assert not mine.exists()
    assert outside.exists()  # lit_gpu deletes nothing outside a run folder
    said = capsys.readouterr()
    assert f"removed {mine}" in said.out + said.err


def test_the_users_own_dirpath_is_cleaned_wherever_it_is(tmp_path):
    temp = _stale_temp(tmp_path / "scratch" / "ckpts")
    link = tmp_path / "ckpts_link"
    link.symlink_to(temp.parent)
    config = Namespace(
        trainer=Namespace(default_root_dir=str(tmp_path)), checkpoint=Namespace(dirpath=str(link))
    )
    clean_run_folders(config)
    assert not temp.exists()


def test_clean_up_never_follows_a_planted_version_folder_link(tmp_path):
    """Found attacking the doors: a ``version_7 -> /elsewhere`` link made any fit delete temps there."""
    root = tmp_path / "runs"
    (root / "lit_gpu").mkdir(parents=True)
    outside = _stale_temp(tmp_path / "victim_dir" / "checkpoints")
    (root / "lit_gpu" / "version_7").symlink_to(tmp_path / "victim_dir")
    clean_run_folders(Namespace(trainer=Namespace(default_root_dir=str(root), logger=None), checkpoint=None))
    assert outside.exists()


def test_a_linked_runs_root_is_still_cleaned(tmp_path):
    scratch = tmp_path / "scratch"
    temp = _stale_temp(scratch / "lit_gpu" / "version_0" / "checkpoints")
    (tmp_path / "runs").symlink_to(scratch)
    clean_run_folders(
        Namespace(trainer=Namespace(default_root_dir=str(tmp_path / "runs"), logger=None), checkpoint=None)
    )
    assert not temp.exists()

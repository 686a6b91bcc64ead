"""The store's owner rule on every branch of ``--ckpt_path last|best``: another user's file is never chosen.

Issue 57: with ``--checkpoint.dirpath`` a shared folder, another user's newer ``last-v1.ckpt`` was chosen
(the rule was only applied to run folders). Another owner is faked with ``os.chown`` (root only).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from lit_gpu.errors import LitGpuError
from lit_gpu.run import store
from tests.helpers.run_store import MODEL, run_folder, subcommand

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
THEM = 65534  # nobody


def _ckpt(path: Path, step: int, owner: int | None = None, score: float | None = None) -> Path:
    loops = {"fit_loop": _loops(step)}
    callbacks = {} if score is None else {"ModelCheckpoint": {"monitor": "val/loss", "current_score": score}}
    header = {"global_step": step, "epoch": 0, "state_dict": {}, "pytorch-lightning_version": "2.6.6"}
    torch.save(
        {**header, "loops": loops, "callbacks": callbacks, "hyper_parameters": {"_class_path": MODEL}}, path
    )
    if owner is not None:
        os.chown(path, owner, owner)
    return path


def _loops(step: int) -> dict:
    tracker = {"ready": step, "started": step, "processed": step, "completed": step}
    return {
        "epoch_progress": {"total": dict.fromkeys(tracker, 0), "current": dict.fromkeys(tracker, 0)},
        "epoch_loop.automatic_optimization.optim_progress": {
            "optimizer": {"step": {"total": tracker, "current": tracker}, "zero_grad": {}}
        },
    }


def _shared(tmp_path: Path) -> Path:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    return shared


@pytest.mark.parametrize("which", ["last", "best"])
def test_another_users_file_in_a_shared_dirpath_is_passed_over(tmp_path, which):
    shared = _shared(tmp_path)
    mine = _ckpt(shared / f"{which}.ckpt", 3, score=0.5)
    _ckpt(shared / f"{which}-v1.ckpt", 9, owner=THEM, score=0.1)  # newer, and better
    config = subcommand(tmp_path, which, command="validate")
    config.validate.checkpoint.dirpath = str(shared)
    resolved = store.resolve(config)
    assert resolved.path == str(mine)
    assert f"passed over {which}-v1.ckpt: owned by nobody (uid {THEM}), not by you" in resolved.line


def test_a_shared_dirpath_with_only_another_users_file_is_one_line(tmp_path):
    shared = _shared(tmp_path)
    _ckpt(shared / "last.ckpt", 9, owner=THEM)
    config = subcommand(tmp_path, "last", command="fit")
    config.fit.checkpoint.dirpath = str(shared)
    with pytest.raises(LitGpuError, match=r"no last\*\.ckpt in checkpoint\.dirpath .*passed over last\.ckpt"):
        store.resolve(config)


def test_another_users_file_in_your_own_run_is_passed_over(tmp_path):
    run = run_folder(tmp_path, 0, step=3)
    _ckpt(run / "checkpoints" / "last-v1.ckpt", 9, owner=THEM)
    resolved = store.resolve(subcommand(tmp_path, "last"))
    assert resolved.path == str(run / "checkpoints" / "last.ckpt")
    assert "passed over last-v1.ckpt: owned by nobody" in resolved.line

"""Lightning's cluster checkpoints (``hpc_ckpt_N.ckpt`` under SLURM) by the owner rules of ``last``/``best``.

Under SLURM with no ``--ckpt_path``, Lightning resumes by itself from the newest ``hpc_ckpt_N.ckpt`` in
``trainer.default_root_dir``: in a root several users share it took another user's file, and a planted
``hpc_ckpt_.ckpt`` stopped every fit with a ``ValueError``. The run store now chooses (issue 46, 48).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from jsonargparse import Namespace

from lit_gpu.cli import LitGpuCLI
from lit_gpu.run import layout, store
from lit_gpu.run.store import resolve_ckpt_path
from tests.helpers.paths import CONFIGS

SIMPLE = ["--config", str(CONFIGS / "simple.yaml")]
OTHER_UID = 65534


@pytest.fixture
def slurm(monkeypatch):
    """The variables a SLURM job step has (what Lightning's SLURMEnvironment.detect() reads)."""
    for name, value in {
        "SLURM_NTASKS": "1",
        "SLURM_JOB_NAME": "train",
        "SLURM_JOB_ID": "4242",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
    }.items():
        monkeypatch.setenv(name, value)


def _hpc(root: Path, name: str, step: int | None = 3, owner: int | None = None) -> Path:
    path = root / name
    if step is None:
        path.write_bytes(b"")
    else:
        torch.save(
            {"global_step": step, "epoch": 0, "state_dict": {}, "pytorch-lightning_version": "2.6.6"}, path
        )
    if owner is not None:
        os.chown(path, owner, owner)
    return path


def _fit_config(root: Path) -> Namespace:
    return Namespace(
        subcommand="fit", fit=Namespace(ckpt_path=None, trainer=Namespace(default_root_dir=str(root)))
    )


def test_the_newest_cluster_checkpoint_of_yours_is_taken_another_users_and_odd_names_passed_over(
    tmp_path, slurm, capsys
):
    mine = _hpc(tmp_path, "hpc_ckpt_1.ckpt", step=3)
    _hpc(tmp_path, "hpc_ckpt_2.ckpt", step=9, owner=OTHER_UID)  # newer, not yours
    _hpc(tmp_path, "hpc_ckpt_.ckpt", step=None)  # malformed: Lightning's int('') traceback
    config = _fit_config(tmp_path)
    resolution = resolve_ckpt_path(config)
    assert resolution is not None and resolution.path == str(mine) and config["fit.ckpt_path"] == str(mine)
    assert resolution.header is not None and resolution.header.step == 3 and not resolution.no_cluster_resume
    said = capsys.readouterr()
    line = said.out + said.err
    assert f"resuming from {mine} (step 3; the newest cluster checkpoint (hpc_ckpt_N.ckpt) of yours" in line
    assert f"hpc_ckpt_2.ckpt: owned by {layout.owner_name(OTHER_UID)}, not by you" in line
    assert "hpc_ckpt_.ckpt: not a cluster checkpoint" in line


def test_with_none_of_yours_the_fit_starts_fresh_and_says_so(tmp_path, slurm):
    _hpc(tmp_path, "hpc_ckpt_5.ckpt", owner=OTHER_UID)
    _hpc(tmp_path, "hpc_ckpt_.ckpt", step=None)
    where = store.Where(None, [tmp_path / "lit_gpu"], root=tmp_path)
    resolution = store.resolve(_fit_config(tmp_path), where)
    assert resolution is not None and resolution.path is None and resolution.no_cluster_resume
    assert resolution.line is not None and resolution.line.startswith("starting a new run, not resuming")
    assert "hpc_ckpt_5.ckpt: owned by" in resolution.line and "\n" not in resolution.line


def test_outside_slurm_or_with_no_cluster_checkpoint_lightning_is_left_alone(tmp_path, monkeypatch, slurm):
    where = store.Where(None, [tmp_path / "lit_gpu"], root=tmp_path)
    assert store.resolve(_fit_config(tmp_path), where) is None  # nothing there
    _hpc(tmp_path, "hpc_ckpt_5.ckpt", owner=OTHER_UID)
    monkeypatch.delenv("SLURM_NTASKS")
    assert store.resolve(_fit_config(tmp_path), where) is None  # not a SLURM job


def test_cluster_checkpoint_names_are_one_rule():
    assert layout.cluster_checkpoint_number("hpc_ckpt_12.ckpt") == 12
    for odd in ("hpc_ckpt_.ckpt", "hpc_ckpt_1x.ckpt", "hpc_ckpt_01.ckpt", "hpc_ckpt_" + "9" * 40 + ".ckpt"):
        assert layout.cluster_checkpoint_number(odd) is None


@pytest.mark.integration
def test_a_slurm_fit_in_a_shared_root_with_planted_cluster_checkpoints_trains_from_scratch(
    tmp_path, slurm, monkeypatch, capsys
):
    """End to end: another user's newer ``hpc_ckpt_7.ckpt`` and an empty ``hpc_ckpt_.ckpt`` in the root; the
    fit neither continues their file nor stops with a traceback."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["lit-gpu"])
    _hpc(tmp_path, "hpc_ckpt_7.ckpt", step=700, owner=OTHER_UID)
    _hpc(tmp_path, "hpc_ckpt_.ckpt", step=None)
    args = ["fit", *SIMPLE, "--trainer.default_root_dir", str(tmp_path), "--trainer.accelerator", "cpu"]
    args += [
        "--trainer.max_steps",
        "2",
        "--trainer.limit_val_batches",
        "0",
        "--trainer.enable_progress_bar",
        "false",
    ]
    cli = LitGpuCLI(args=args)
    assert cli.trainer.global_step == 2  # from scratch, not from step 700
    said = capsys.readouterr()
    assert "starting a new run, not resuming a cluster checkpoint" in said.out + said.err
    # the requeue save (SIGUSR1) is numbered by the store: Lightning's own numbering raised ValueError here
    save_path = cli.trainer._checkpoint_connector.hpc_save_path(cli.trainer.default_root_dir)
    assert save_path == str(tmp_path / "hpc_ckpt_1.ckpt")


def test_a_requeue_save_is_numbered_after_your_own_cluster_checkpoints_at_a_free_name(tmp_path):
    """Lightning numbers its requeue save after every name holding ``ckpt_``: a planted ``hpc_ckpt_.ckpt``
    stops it with a ValueError (the save is lost), and another user's ``hpc_ckpt_999999999.ckpt`` pushes it
    to a number the store's next resume passes over. The store numbers it after your own, at a free name."""
    from lightning.pytorch.trainer.connectors.checkpoint_connector import _CheckpointConnector

    _hpc(tmp_path, "hpc_ckpt_2.ckpt")
    _hpc(tmp_path, "hpc_ckpt_3.ckpt", owner=OTHER_UID)  # taken: not overwritten
    _hpc(tmp_path, "hpc_ckpt_999999999.ckpt", owner=OTHER_UID)
    _hpc(tmp_path, "hpc_ckpt_.ckpt", step=None)
    (tmp_path / "hpc_ckpt_4.ckpt").symlink_to(tmp_path / "elsewhere")  # a dangling link: taken too
    with pytest.raises(ValueError):
        _CheckpointConnector.hpc_save_path(tmp_path)
    assert layout.next_cluster_checkpoint(tmp_path) == str(tmp_path / "hpc_ckpt_5.ckpt")
    assert layout.cluster_checkpoint_number("hpc_ckpt_5.ckpt") == 5  # the next resume finds it

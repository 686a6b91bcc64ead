"""Pieces of ``lit-gpu sweep`` that need no training: arguments, storages, trial placement, GPU claims."""

from __future__ import annotations

import json
import os

import optuna
import pytest

from lit_gpu.commands import sweep
from lit_gpu.errors import LitGpuError
from tests.helpers.fake_nvml import FakeGpu, install


def test_sweep_flags_are_split_from_the_fit_arguments():
    options, fit_args = sweep.parse_argv(
        [
            "--config",
            "a.yaml",
            "--search",
            "s.yaml",
            "--trainer.max_epochs=3",
            "--n_trials",
            "7",
            "--config",
            "b.yaml",
        ]
    )
    assert fit_args == ["--config", "a.yaml", "--trainer.max_epochs=3", "--config", "b.yaml"]
    assert (options.search, options.n_trials, options.study, options.metric) == ("s.yaml", 7, "s", "val/loss")
    assert str(options.sweep_dir) == os.path.join("runs", "sweeps", "s")


@pytest.mark.parametrize(
    "argv", [["--search", "s.yaml", "--n_trials", "-1"], ["--search", "s.yaml", "--gpus_per_trial", "-1"]]
)
def test_bad_counts_are_refused(argv):
    with pytest.raises(LitGpuError):
        sweep.parse_argv(argv)


def test_storage_kinds(tmp_path):
    journal = sweep.make_storage(None, tmp_path / "study")
    assert isinstance(journal, optuna.storages.JournalStorage)
    assert (tmp_path / "study" / sweep.JOURNAL_NAME).is_file()
    assert isinstance(sweep.make_storage(str(tmp_path / "j.log"), tmp_path), optuna.storages.JournalStorage)
    rdb = sweep.make_storage(f"sqlite:///{tmp_path / 's.db'}", tmp_path)
    assert isinstance(rdb, optuna.storages.RDBStorage)
    with pytest.raises(LitGpuError, match="unknown scheme 'redis'"):
        sweep.make_storage("redis://localhost", tmp_path)


def test_reopening_a_study_with_another_direction_or_metric_is_refused(tmp_path):
    options = sweep.SweepOptions(search="s.yaml", root=str(tmp_path))
    sweep.open_study(options)
    with pytest.raises(LitGpuError, match="created with --direction minimize"):
        sweep.open_study(sweep.SweepOptions(search="s.yaml", root=str(tmp_path), direction="maximize"))
    with pytest.raises(LitGpuError, match="optimises val/loss, not val/acc"):
        sweep.open_study(sweep.SweepOptions(search="s.yaml", root=str(tmp_path), metric="val/acc"))


@pytest.mark.parametrize(
    ("trainer", "gpus_per_trial", "child"),
    [
        ({"accelerator": "cpu", "devices": "auto"}, 0, False),
        ({"devices": 1}, 0, False),
        ({"devices": [3]}, 0, False),
        ({"devices": "1"}, 0, False),
        ({"devices": 2}, 0, True),
        ({"devices": "0,1"}, 0, True),
        ({"devices": "free:2"}, 0, True),
        ({"devices": -1}, 0, True),
        ({"devices": 1, "strategy": "ddp"}, 0, True),
        ({"devices": 1, "num_nodes": 2}, 0, True),
        ({"devices": "auto"}, 1, False),
        ({"devices": 1}, 2, True),
    ],
)
def test_multi_process_trials_run_in_a_child(trainer, gpus_per_trial, child):
    assert sweep.needs_child_process(trainer, gpus_per_trial) is child


def test_short_names_are_unambiguous_suffixes():
    keys = ["model.init_args.optimizer.init_args.lr", "model.init_args.net.init_args.c1", "data.init_args.lr"]
    assert sweep.short_names(keys) == {
        "model.init_args.optimizer.init_args.lr": "optimizer.lr",
        "model.init_args.net.init_args.c1": "c1",
        "data.init_args.lr": "data.lr",
    }


def test_trials_log_to_their_own_version_folder(tmp_path):
    flag = sweep.logger_flag(tmp_path / "runs" / "study", 7)
    logger = json.loads(flag.split("=", 1)[1])
    assert logger["init_args"] == {"save_dir": str(tmp_path / "runs"), "name": "study", "version": 7}


def test_workers_on_one_machine_spread_over_its_gpus(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    install(monkeypatch, [FakeGpu(free_gib=f) for f in (30, 70, 50, 10)])
    first = sweep.GpuClaims(tmp_path)
    assert first.claim(2) == [1, 2]  # most free memory first
    second = sweep.GpuClaims(tmp_path)
    second.mine = second.folder / f"{second.host}@{os.getppid()}.json"  # another live process
    assert second.claim(2) == [0, 3]  # the GPUs the first worker does not hold
    first.release()
    assert second.claim(1) == [1]
    dead = second.folder / f"{second.host}@999999999.json"
    dead.write_text("[1, 2]")  # a worker that died without releasing: ignored and cleaned up
    assert first.claim(1) == [2] and not dead.exists()  # 1 is held by the second worker


def test_asking_for_more_gpus_than_the_machine_has(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    install(monkeypatch, [FakeGpu()])
    with pytest.raises(LitGpuError, match="asks for 2 GPUs but only 1 is visible"):
        sweep.GpuClaims(tmp_path).claim(2)

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


@pytest.mark.integration  # runs trials: not the inner loop (--fast)
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


@pytest.mark.parametrize(
    ("devices", "accelerator", "count"),
    [
        ("auto", "cpu", 1),
        (1, "gpu", 1),
        ("0,1,3", "gpu", 3),
        ([0, 2], "gpu", 2),
        ("free:3", "gpu", 3),
        (-1, "gpu", 0),
    ],
)
def test_device_count_reads_the_request_as_devices_py_does(devices, accelerator, count):
    assert sweep.device_count(devices, accelerator) == count


def test_until_complete_and_n_trials_are_one_budget():
    options, _ = sweep.parse_argv(["--search", "s.yaml", "--until_complete", "12"])
    assert (options.until_complete, options.n_trials) == (12, 10)
    with pytest.raises(LitGpuError, match="--n_trials and --until_complete both given"):
        sweep.parse_argv(["--search", "s.yaml", "--until_complete", "12", "--n_trials", "3"])


@pytest.mark.integration  # runs trials: not the inner loop (--fast)
def test_a_fixed_seed_draws_new_points_in_a_rerun_and_the_same_ones_from_scratch(tmp_path):
    """Each trial draws with seed + its number: a re-run (a new sampler, as in a new process) or a
    second worker with the same --seed continues the sequence instead of repeating it."""
    from lit_gpu.commands.sweep.study import make_sampler

    def run(storage, n):
        study = optuna.create_study(
            study_name="s", storage=storage, sampler=make_sampler(0), load_if_exists=True
        )
        study.optimize(lambda t: t.suggest_float("x", 0, 1) + t.suggest_int("k", 0, 10**6), n_trials=n)
        return [t.params for t in study.get_trials()]

    url = f"sqlite:///{tmp_path / 'a.db'}"
    first = run(url, 3)
    both = run(url, 3)  # the same command again
    assert both[:3] == first and len(both) == 6
    assert all(p not in first for p in both[3:])
    assert run(f"sqlite:///{tmp_path / 'b.db'}", 6) == both  # reproducible from scratch


def test_without_optuna_the_sweep_says_so_in_one_line(monkeypatch, capsys):
    import sys

    from lit_gpu.cli import main

    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna -> ImportError
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "--search", "s.yaml"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lit-gpu: error: lit-gpu sweep needs optuna")
    assert "pip install 'lit-gpu[sweep]'" in err[0]


def test_stale_trials(monkeypatch):
    import datetime as dt
    import socket
    import time

    from lit_gpu.commands.sweep.storage import Owner
    from lit_gpu.commands.sweep.worker import STALE_AFTER_S, process_start, stale_reason

    host, now = socket.gethostname(), time.time()
    me = Owner(pid=os.getpid(), host=host, beat=now, started=process_start(os.getpid()))
    assert stale_reason(me, None) is None  # a live worker keeps its trial
    assert stale_reason(Owner(**{**me.__dict__, "state": "stopped"}), None) == "stopped by a signal"
    dead = Owner(pid=999_999_999, host=host, beat=now)
    assert stale_reason(dead, None) == "its worker (pid 999999999) died"
    reused = Owner(pid=os.getpid(), host=host, beat=now, started="1")  # same pid, another process
    assert stale_reason(reused, None) == f"its worker (pid {os.getpid()}) died"
    child_alive = Owner(pid=999_999_999, host=host, beat=now, child_pid=os.getpid())
    assert stale_reason(child_alive, None) is None  # its trial process still saves/finishes
    far = Owner(pid=1, host="elsewhere", beat=now - STALE_AFTER_S - 5)
    assert stale_reason(far, None, now=now).startswith("no heartbeat from elsewhere for ")
    assert stale_reason(Owner(pid=1, host="elsewhere", beat=now - 5), None, now=now) is None
    assert stale_reason(None, dt.datetime.now()) is None  # just created: its record is coming
    assert stale_reason(None, dt.datetime.now() - dt.timedelta(seconds=STALE_AFTER_S + 5)) is not None


def test_heartbeat_refreshes_and_hands_over(tmp_path, monkeypatch):
    import time

    from lit_gpu.commands.sweep import worker as owners
    from lit_gpu.commands.sweep.storage import read_owner

    monkeypatch.setattr(owners, "HEARTBEAT_S", 0.05)
    beat = owners.Heartbeat()
    path = tmp_path / ".owners" / "version_0.json"
    beat.start(path)
    first = read_owner(path).beat
    time.sleep(0.3)
    assert read_owner(path).beat > first and read_owner(path).pid == os.getpid()
    beat.stop(stopped=True)
    assert read_owner(path).state == "stopped"
    beat.start(path)
    beat.stop(stopped=False)
    assert not path.exists()


def test_a_continued_trial_keeps_one_metrics_csv(tmp_path):
    from lit_gpu.commands.sweep import trial as metrics_csv

    (tmp_path / "metrics.csv").write_text("epoch,step,train/loss\n0,0,5\n0,1,4\n0,2,3\n0,3,2.5\n")
    metrics_csv.set_aside(tmp_path)  # continued from the checkpoint of step 2
    assert not (tmp_path / "metrics.csv").exists()
    (tmp_path / "metrics.csv").write_text("epoch,step,train/loss,val/loss\n0,2,3,\n0,3,2.5,\n1,4,2,1.5\n")
    metrics_csv.put_back(tmp_path)
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert rows == [
        "epoch,step,train/loss,val/loss",
        "0,0,5,",
        "0,1,4,",
        "0,2,3,",
        "0,3,2.5,",
        "1,4,2,1.5",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.csv"]


def test_trial_children_start_without_the_working_folder_on_sys_path():
    import sys

    from lit_gpu.commands.sweep.trial import child_command

    command, env = child_command()
    assert command[:2] == [sys.executable, "-P"] and command[2:] == ["-m", "lit_gpu", "sweep"]
    assert env["PYTHONSAFEPATH"] == "1"  # inherited by the ranks Lightning's DDP launcher starts


def test_trial_children_get_no_working_folder_on_their_path(monkeypatch, tmp_path):
    """An empty PYTHONPATH entry (often a stray ``:``) means the working folder: the child's env drops it.

    An explicit ``.`` (``PYTHONPATH=. lit-gpu sweep`` for the user's own module) is the user's choice.
    """
    from lit_gpu.commands.sweep.trial import child_command

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/abs/one", "", ".", "/abs/two", ""]))
    command, env = child_command()
    assert env["PYTHONPATH"] == os.pathsep.join(["/abs/one", str(tmp_path), "/abs/two"])
    assert env["PYTHONSAFEPATH"] == "1" and command[1:4] == ["-P", "-m", "lit_gpu"]

"""``lit-gpu sweep`` end to end on configs/simple.yaml + configs/debug.yaml (tiny trials, CPU).

Single-process trials run inside the sweep (and here inside pytest: no start-up cost); the two-worker
test starts real ``python -m lit_gpu sweep`` processes on one journal file.
"""

from __future__ import annotations

import csv
import statistics
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from lit_gpu.cli import LitGpuCLI, main
from lit_gpu.commands import sweep as sweep_cmd
from tests.helpers.forked_cli import popen
from tests.helpers.paths import CONFIGS

BASE = ["--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]
SPACE = str(CONFIGS / "sweeps" / "simple.yaml")
LR = "model.init_args.optimizer.init_args.lr"


def _sweep(*args: str) -> int:
    return sweep_cmd.main([*BASE, *args])


def _study(sweep_dir: Path, name: str) -> optuna.Study:
    storage = sweep_cmd.make_storage(None, sweep_dir)
    return optuna.load_study(study_name=name, storage=storage)


def _val_rows(run_dir: Path) -> int:
    with open(run_dir / "metrics.csv", newline="") as f:
        return sum(1 for row in csv.DictReader(f) if row.get("val/loss"))


def _space(tmp_path: Path, text: str) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return str(path)


def test_four_trials_table_best_yaml_plot_then_a_second_invocation_adds(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:  # through the real `lit-gpu` dispatch
        main(["sweep", *BASE, "--search", SPACE, "--n_trials", "4", "--seed", "1"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    sweep_dir = Path("runs/sweeps/simple")
    study = _study(sweep_dir, "simple")
    trials = study.get_trials()
    assert [t.number for t in trials] == [0, 1, 2, 3]
    assert all(t.state == TrialState.COMPLETE for t in trials)
    for t in trials:  # each trial is a normal run: its own folder, config.yaml with the sampled values
        run_dir = Path(t.user_attrs["run_dir"])
        assert run_dir == sweep_dir / f"version_{t.number}"
        assert t.user_attrs["params"] == t.params
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert config["model"]["init_args"]["optimizer"]["init_args"]["lr"] == pytest.approx(t.params[LR])
        assert config["data"]["init_args"]["batch_size"] == t.params["data.init_args.batch_size"]
        assert (run_dir / "checkpoints" / "last.ckpt").is_file()
        assert _val_rows(run_dir) == 2  # debug.yaml: 2 epochs, one validation each
    # the table: every completed trial, best first, with its metric and run folder
    best = study.best_trial
    rows = [  # the table's rows (each trial's own run and done lines name its folder too)
        line for line in out.splitlines() if "runs/sweeps/simple/version_" in line and "lit-gpu: " not in line
    ]
    assert len(rows) == 4
    assert f"runs/sweeps/simple/version_{best.number}" in rows[0]
    assert f"{best.value:.6g}" in rows[0]
    assert "val/loss" in out and "lr" in out and "batch_size" in out
    # best.yaml = the best trial's config, logging to the default runs/lit_gpu; it fits as is
    best_yaml = sweep_dir / "best.yaml"
    config = yaml.safe_load(best_yaml.read_text())
    assert config["model"]["init_args"]["optimizer"]["init_args"]["lr"] == pytest.approx(best.params[LR])
    assert "logger" not in config["trainer"]
    fit = LitGpuCLI(args=["fit", "--config", str(best_yaml)])
    assert fit.trainer.state.finished and Path("runs/lit_gpu/version_0/checkpoints/last.ckpt").is_file()
    # the plot: a PNG of the plot command's size
    from matplotlib.image import imread

    image = imread(sweep_dir / "sweep.png")
    assert image.shape[:2] == (450, 1200)

    # the same command again continues the study
    assert _sweep("--search", SPACE, "--n_trials", "2", "--pruner", "none") == 0
    trials = _study(sweep_dir, "simple").get_trials()
    assert [t.number for t in trials] == list(range(6))
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert (sweep_dir / "version_5" / "config.yaml").is_file()


@pytest.mark.full  # a second sweep process at once: the full tier (the in-process sweeps: the sample)
def test_two_workers_share_one_journal_storage(tmp_path, monkeypatch, cli_env):
    """Two workers at once on one journal file: a `python -m lit_gpu sweep` process and this one."""
    monkeypatch.chdir(tmp_path)
    storage = tmp_path / "shared.journal"
    args = [*BASE, "--search", SPACE, "--n_trials", "2", "--storage", str(storage), "--study_name", "pair"]
    args += ["--pruner", "none"]
    other = popen(["sweep", *args, "--seed", "2"], tmp_path, cli_env, stdout=subprocess.DEVNULL, text=True)
    try:
        assert sweep_cmd.main([*args, "--seed", "1"]) == 0
    finally:
        _, err = other.communicate(timeout=300)
    assert other.returncode == 0, err[-3000:]
    study = optuna.load_study(
        study_name="pair",
        storage=optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(storage))),
    )
    trials = study.get_trials()
    assert sorted(t.number for t in trials) == [0, 1, 2, 3]
    assert all(t.state == TrialState.COMPLETE for t in trials)
    folders = {t.user_attrs["run_dir"] for t in trials}
    assert len(folders) == 4 and all((tmp_path / f / "config.yaml").is_file() for f in folders)
    theirs = sorted(int(line.split()[2]) for line in err.splitlines() if " finished: " in line)
    assert len(theirs) == 2  # the other process ran two of the four trials


@pytest.mark.full  # many in-process trials; the default tier samples the sweep with the tests around it
def test_sqlite_storage(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'sweep.db'}"
    args = ["--search", SPACE, "--n_trials", "2", "--storage", url, "--study_name", "db"]
    assert _sweep(*args) == 0
    assert _sweep(*args[:2], "--n_trials", "1", *args[4:]) == 0
    study = optuna.load_study(study_name="db", storage=url)
    assert [t.state for t in study.get_trials()] == [TrialState.COMPLETE] * 3
    assert not (tmp_path / "runs/sweeps/db/optuna_journal.log").exists()
    assert (tmp_path / "runs/sweeps/db/best.yaml").is_file()


@pytest.mark.full  # many in-process trials; the default tier samples the sweep with the tests around it
def test_the_same_command_with_a_fixed_seed_samples_new_points_and_until_complete_is_a_target(
    tmp_path, monkeypatch, capsys
):
    """A requeued job starts the identical command: with ``--seed 0`` it must not draw the earlier trials'
    parameters again, and ``--until_complete N`` stops once the study holds N finished trials."""
    monkeypatch.chdir(tmp_path)
    command = ["--search", SPACE, "--seed", "0", "--pruner", "none", "--trainer.max_epochs", "1"]
    assert _sweep(*command, "--n_trials", "2") == 0
    assert _sweep(*command, "--n_trials", "2") == 0  # the very same command again
    sweep_dir = Path("runs/sweeps/simple")
    params = [t.params for t in _study(sweep_dir, "simple").get_trials()]
    assert len(params) == 4
    assert all(p not in params[:2] for p in params[2:]), params  # new points, not trials 0 and 1 again
    assert len({p[LR] for p in params}) == 4
    # reproducible from scratch: a new study with the same seed draws the same sequence
    (tmp_path / "fresh").mkdir()
    monkeypatch.chdir(tmp_path / "fresh")
    assert _sweep(*command, "--n_trials", "4") == 0
    assert [t.params for t in _study(Path("runs/sweeps/simple"), "simple").get_trials()] == params

    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    for _ in range(2):  # a requeued job: the same command, however often; the study ends with 5 trials
        assert _sweep(*command, "--until_complete", "5") == 0
    trials = _study(sweep_dir, "simple").get_trials()
    assert len(trials) == 5 and all(t.state == TrialState.COMPLETE for t in trials)
    assert trials[4].params not in params
    assert capsys.readouterr().err.count(" finished: ") == 1  # the second call ran no trial


def test_a_crashing_trial_is_recorded_failed_and_the_sweep_goes_on(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    # out_features 3 against 10 regression targets: the loss raises inside fit
    space = _space(
        tmp_path, "model.init_args.net.init_args.out_features: {type: categorical, choices: [10, 3]}\n"
    )
    assert _sweep("--search", space, "--n_trials", "4", "--seed", "0") == 0
    trials = _study(Path("runs/sweeps/space"), "space").get_trials()
    assert len(trials) == 4
    states = {t.number: (t.params["model.init_args.net.init_args.out_features"], t.state) for t in trials}
    assert {s for _, s in states.values()} == {TrialState.COMPLETE, TrialState.FAIL}
    for t in trials:
        if t.params["model.init_args.net.init_args.out_features"] == 3:
            assert t.state == TrialState.FAIL
            assert "must match the size" in t.user_attrs["error"]
            assert "Traceback" in (Path(t.user_attrs["run_dir"]) / "sweep_error.txt").read_text()
        else:
            assert t.state == TrialState.COMPLETE
    err = capsys.readouterr().err
    assert err.count("failed: RuntimeError") == sum(s == TrialState.FAIL for _, s in states.values())


@pytest.mark.full  # many in-process trials; the default tier samples the sweep with the tests around it
def test_bad_trials_are_pruned(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # learning rates over 5 decades: the slow ones are far behind the median after one validation
    space = _space(tmp_path, f"{LR}: {{type: float, low: 1.0e-6, high: 0.1, log: true}}\n")
    args = ["--search", space, "--n_trials", "8", "--seed", "0", "--pruner_startup_trials", "2"]
    assert _sweep(*args, "--trainer.max_epochs", "3") == 0
    trials = _study(Path("runs/sweeps/space"), "space").get_trials()
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert pruned and complete and len(pruned) + len(complete) == 8
    for t in pruned:  # stopped early: fewer validations than the 3 epochs, reported step by step
        assert _val_rows(Path(t.user_attrs["run_dir"])) < 3
        assert sorted(t.intermediate_values) == list(range(_val_rows(Path(t.user_attrs["run_dir"]))))
        assert (Path(t.user_attrs["run_dir"]) / "checkpoints" / "last.ckpt").is_file()
    for t in complete:
        assert _val_rows(Path(t.user_attrs["run_dir"])) == 3
    for t in pruned:  # worse than the median of the trials completed before it, at the same step
        step = max(t.intermediate_values)
        earlier = [c.intermediate_values[step] for c in complete if c.number < t.number]
        assert t.intermediate_values[step] > statistics.median(earlier)


def test_a_metric_that_is_never_logged_ends_the_sweep_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", *BASE, "--search", SPACE, "--n_trials", "3", "--metric", "val/acc"])
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lit-gpu: error:")]
    assert len(errors) == 1 and "--metric val/acc was never logged by trial 0" in errors[0]
    assert "val/loss" in errors[0]
    trials = _study(Path("runs/sweeps/simple"), "simple").get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL]  # stopped after the first trial


@pytest.mark.parametrize(
    ("space_text", "expected"),
    [
        (f"{LR}: {{type: floaty, low: 0.1, high: 1}}\n", "unknown type 'floaty'"),
        ("model.init_args.optimizer.init_args.lrr: {type: float, low: 0.1, high: 1}\n", "did you mean " + LR),
        (f"{LR}: {{type: float, low: 1, high: 0.1}}\n", "low (1) is above high (0.1)"),
    ],
    ids=["unknown-type", "unknown-key", "low-above-high"],
)
def test_a_bad_search_space_is_one_line_and_exit_2(space_text, expected, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    space = _space(tmp_path, space_text)
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", *BASE, "--search", space, "--n_trials", "1"])
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lit-gpu: error:")]
    assert len(errors) == 1 and expected in errors[0], errors
    assert not list(tmp_path.glob("runs/sweeps/space/version_*"))  # no trial started


@pytest.mark.slow
def test_ddp_trials_run_in_a_child_process_and_prune_across_ranks(tmp_path, cli_env):
    """Two CPU processes per trial (gloo): each trial is a child `python -m lit_gpu sweep`."""
    space = _space(tmp_path, f"{LR}: {{type: float, low: 1.0e-6, high: 0.1, log: true}}\n")
    command = [sys.executable, "-P", "-m", "lit_gpu", "sweep", *BASE, "--search", space, "--n_trials", "3"]
    command += ["--seed", "0", "--pruner_startup_trials", "1", "--trainer.max_epochs", "3"]
    command += ["--trainer.devices", "2", "--trainer.strategy", "ddp"]
    env = {k: v for k, v in cli_env.items() if k not in ("MASTER_PORT", "MASTER_ADDR")}
    marker = tmp_path / "marker"  # the trial child and the DDP rank Lightning starts never import it
    (tmp_path / "yaml.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not marker.exists()
    assert "each in a child process" in proc.stderr
    trials = _study(tmp_path / "runs/sweeps/space", "space").get_trials()
    assert len(trials) == 3 and all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)
    assert all(len(t.intermediate_values) >= 1 for t in trials)

"""Sweep storages and working folders are data (issue 18, vectors 7 and 8).

7. A tampered storage: a trial whose ``run_dir`` leaves the sweep folder, a run folder whose
   ``config.yaml`` carries a checkpoint and ``weights_only: false``, a queued value outside the search
   space. None of them reaches ``best.yaml`` or a fit.
8. A ``yaml.py`` in the working folder is never imported by a trial's child process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from lit_gpu.cli import main
from lit_gpu.commands import sweep as sweep_cmd
from lit_gpu.commands.sweep.trial import run_in_child
from tests.helpers.paths import CONFIGS

BASE = ["--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]
LR = "model.init_args.optimizer.init_args.lr"
BS = "data.init_args.batch_size"
SPACE_TEXT = (
    f"{LR}: {{type: float, low: 1.0e-4, high: 0.3, log: true}}\n"
    f"{BS}: {{type: categorical, choices: [16, 32]}}\n"
)
DISTRIBUTIONS = {LR: FloatDistribution(1e-4, 0.3, log=True), BS: CategoricalDistribution([16, 32])}


def _study(tmp_path: Path) -> tuple[str, optuna.Study]:
    space = tmp_path / "space.yaml"
    space.write_text(SPACE_TEXT)
    options = sweep_cmd.SweepOptions(search=str(space), root="runs/sweeps")
    return str(space), sweep_cmd.open_study(options)


def _plant_payload_config(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "ckpt_path": str(folder / "payload.ckpt"),
                "weights_only": False,
                "predict_out": "/tmp/overwritten.csv",
                "trainer": {"default_root_dir": "/tmp/elsewhere", "logger": {"class_path": "x.Y"}},
            }
        )
    )


def _one_error(capsys) -> str:
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lit-gpu: error:")]
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize("form", ["absolute", "dotdot", "symlink", "the-sweep-folder", "url"])
def test_a_run_dir_outside_the_sweep_folder_is_refused_in_one_line(form, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    space, study = _study(tmp_path)
    victim = tmp_path / "victim"
    _plant_payload_config(victim)
    sweep_dir = Path("runs/sweeps/space")
    os.symlink(victim, sweep_dir / "version_7")
    run_dir = {
        "absolute": str(victim),
        "dotdot": "runs/sweeps/space/../../../victim",
        "symlink": "runs/sweeps/space/version_7",
        "the-sweep-folder": "runs/sweeps/space/.",  # a trial writing over the sweep's own files
        "url": f"file://{tmp_path}/runs/sweeps/space/version_0",
    }
    study.add_trial(
        create_trial(
            params={LR: 0.01, BS: 16},
            distributions=DISTRIBUTIONS,
            value=-1.0,
            user_attrs={"run_dir": run_dir[form]},
        )
    )
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", *BASE, "--search", space, "--n_trials", "0"])
    assert exit_info.value.code == 2
    error = _one_error(capsys)
    assert "trial 0's run_dir" in error
    assert "is not its own folder version_0 in the sweep folder runs/sweeps/space" in error
    assert not (sweep_dir / "best.yaml").exists()
    assert sorted(p.name for p in victim.iterdir()) == ["config.yaml"]


def test_best_yaml_is_built_from_the_sweeps_configs_never_from_the_run_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    space, study = _study(tmp_path)
    run_dir = Path("runs/sweeps/space/version_0")
    _plant_payload_config(run_dir)  # what a tampered (or just old) run folder holds
    study.add_trial(
        create_trial(
            params={LR: 0.0123, BS: 32},
            distributions=DISTRIBUTIONS,
            value=0.5,
            user_attrs={"run_dir": str(run_dir)},
        )
    )
    assert sweep_cmd.main([*BASE, "--search", space, "--n_trials", "0"]) == 0
    text = (tmp_path / "runs/sweeps/space/best.yaml").read_text()
    best = yaml.safe_load(text)
    assert best["model"]["init_args"]["optimizer"]["init_args"]["lr"] == pytest.approx(0.0123)
    assert best["data"]["init_args"]["batch_size"] == 32
    assert best["trainer"]["max_epochs"] == 2 and best["trainer"]["limit_train_batches"] == 4  # debug.yaml
    for key in ("ckpt_path", "weights_only", "predict_out", "config"):
        assert key not in best
    assert "logger" not in best["trainer"] and "default_root_dir" not in best["trainer"]
    assert "dirpath" not in best["checkpoint"]
    assert "payload" not in text and "/tmp/" not in text.split("\n", 3)[3]


def test_a_queued_value_outside_the_search_space_is_refused_before_any_fit(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    space, study = _study(tmp_path)
    study.enqueue_trial({LR: 5.0, BS: 16})  # written into the storage by someone else
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", *BASE, "--search", space, "--n_trials", "1"])
    assert exit_info.value.code == 2
    error = _one_error(capsys)
    assert f"trial 0 has {LR}=5.0, which is outside the search space" in error
    [trial] = study.get_trials()
    assert trial.state == TrialState.FAIL
    assert not list(Path("runs/sweeps/space").glob("version_*"))  # no fit started


def test_a_trial_child_process_never_imports_from_the_working_folder(tmp_path, monkeypatch, cli_env):
    for key, value in cli_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "marker"
    (tmp_path / "yaml.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\nraise ImportError('planted')\n"
    )
    # the trap works: a plain interpreter started here imports it
    subprocess.run([sys.executable, "-c", "import yaml"], cwd=tmp_path, capture_output=True)
    assert marker.is_file()
    marker.unlink()

    space, study = _study(tmp_path)
    options = sweep_cmd.SweepOptions(search=space, root="runs/sweeps")
    worker = sweep_cmd.Worker(options, sweep_cmd.load_space(space), BASE, child=True, study=study)
    trial = study.ask()
    values = {LR: 0.05, BS: 16}
    spec = {"args": worker.trial_args(values, trial.number, None), "metric": "val/loss", "reported": []}
    spec["connect"] = worker._connect(trial)
    result = run_in_child(spec, Path("runs/sweeps/space/version_0"))
    assert result.error is None and result.value is not None and result.value > 0
    assert not marker.exists()


@pytest.mark.parametrize("planted", ["config.yaml", "hparams.yaml", "checkpoints"])
def test_links_planted_in_a_trials_folder_are_refused_before_it(planted, tmp_path, monkeypatch, capsys):
    """Found attacking the doors: trials log with Lightning's loggers, which write through links in place."""
    monkeypatch.chdir(tmp_path)
    space, study = _study(tmp_path)
    victim_dir = tmp_path / "victim_dir"
    victim_dir.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("ORIGINAL")
    folder = Path("runs/sweeps/space/version_0")  # where trial 0 will log
    folder.mkdir(parents=True)
    (folder / planted).symlink_to(victim_dir if planted == "checkpoints" else victim)
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", *BASE, "--search", space, "--n_trials", "1"])
    assert exit_info.value.code == 2
    error = _one_error(capsys)
    assert f"not running trial 0 in {folder}: it holds links that lead outside it ({planted} -> " in error
    assert victim.read_text() == "ORIGINAL" and not any(victim_dir.iterdir())


def test_sweep_temp_files_never_write_through_a_planted_link(tmp_path):
    """Owner records and merged metrics.csv go through fresh temp names, not ``.name.<pid>.tmp``."""
    from lit_gpu.commands.sweep import trial as metrics_csv
    from lit_gpu.commands.sweep.storage import Owner
    from lit_gpu.commands.sweep.worker import write_owner

    victim = tmp_path / "victim.txt"
    victim.write_text("ORIGINAL")
    owners = tmp_path / ".owners"
    owners.mkdir()
    (owners / f".version_0.json.{os.getpid()}.tmp").symlink_to(victim)  # the old, predictable name
    owner = Owner(pid=1, host="h", beat=0.0)
    write_owner(owners / "version_0.json", owner)
    run = tmp_path / "version_0"
    run.mkdir()
    (run / "metrics.csv").write_text("step,train/loss\n0,1.0\n")
    metrics_csv.set_aside(run)
    (run / "metrics.csv").write_text("step,train/loss\n1,0.5\n")
    (run / f".metrics.csv.{os.getpid()}.tmp").symlink_to(victim)
    metrics_csv.put_back(run)
    assert victim.read_text() == "ORIGINAL"
    assert (run / "metrics.csv").read_text().splitlines() == ["step,train/loss", "0,1.0", "1,0.5"]
    assert (owners / "version_0.json").is_file() and not (owners / "version_0.json").is_symlink()

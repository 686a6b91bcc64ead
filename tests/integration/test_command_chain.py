"""The commands a user chains, in one test: fit, resume from ``last``, test, export, sweep.

It runs in every environment the suite runs in, and is what CI's lower-bound stage (``.ci/run``) runs on top
of the fast tests there: with every dependency at pyproject.toml's lower bound, the commands still work.
In-process (``main([...])``, the console script's code path) so that it costs seconds, not start-ups.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import torch
import yaml
from optuna.trial import TrialState
from safetensors.torch import load_file

from lit_gpu.cli import main
from lit_gpu.commands import sweep as sweep_cmd
from tests.helpers.paths import CONFIGS

BASE = ["--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]


def _run(*argv: str) -> None:
    try:
        main(list(argv))  # tool commands exit; a training run returns
    except SystemExit as stop:
        assert stop.code in (0, None), f"lit-gpu {' '.join(argv)} exited {stop.code}"


def _step(ckpt: Path) -> int:
    return torch.load(ckpt, map_location="cpu", weights_only=True)["global_step"]


def test_fit_resume_last_test_export_sweep(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs" / "lit_gpu"

    _run("fit", *BASE)  # debug.yaml: 2 epochs x 4 batches
    assert _step(runs / "version_0" / "checkpoints" / "last.ckpt") == 8

    _run("fit", *BASE, "--trainer.max_epochs", "3", "--ckpt_path", "last")  # one epoch more, same folder
    assert "resuming from runs/lit_gpu/version_0/checkpoints/last.ckpt" in capsys.readouterr().err
    last = runs / "version_0" / "checkpoints" / "last.ckpt"
    assert _step(last) == 12 and not (runs / "version_1").exists()  # the run continued its folder

    _run("test", *BASE, "--ckpt_path", "last", "--trainer.logger", "false")
    assert "test/loss" in capsys.readouterr().out

    _run("export", str(last), "--out", "model.safetensors")
    exported = load_file(tmp_path / "model.safetensors")
    state = torch.load(last, map_location="cpu", weights_only=True)["state_dict"]
    assert exported.keys() and all(torch.equal(v, state[f"net.{k}"]) for k, v in exported.items())

    space = str(CONFIGS / "sweeps" / "simple.yaml")
    _run("sweep", *BASE, "--search", space, "--n_trials", "2", "--seed", "1")
    sweep_dir = Path("runs/sweeps/simple")
    study = optuna.load_study(study_name="simple", storage=sweep_cmd.make_storage(None, sweep_dir))
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2
    best = yaml.safe_load((sweep_dir / "best.yaml").read_text())
    lr = best["model"]["init_args"]["optimizer"]["init_args"]["lr"]
    assert lr == study.best_trial.params["model.init_args.optimizer.init_args.lr"]

"""The restored-state fuzz: real mid-epoch checkpoints mutated field by field; 0 tracebacks, bounded memory.

In memory (:func:`tests.helpers.restored_state.restore_in_memory`): the contract check, then every restore
a resume makes, for 2 000 mutations (20 000 under ``-m slow``) of a lit_gpu module's checkpoint and of a
foreign module's with torchmetrics. A sample of the mutated files goes through ``lit-gpu fit --ckpt_path``,
``lit-gpu test``, ``lit-gpu export`` and the Python loaders in a fork capped at the file's budget.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from tests.helpers import restored_state as fuzzed
from tests.helpers.forked_cli import run_cli
from tests.helpers.memory_cap import capped
from tests.helpers.paths import CONFIGS

pytestmark = pytest.mark.integration

SIMPLE = ["--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("restored")
    return {kind: fuzzed.mid_epoch_checkpoint(folder, kind) for kind in ("lit_gpu", "foreign")}


def test_two_thousand_mutations_restore_or_refuse_without_a_traceback(made):
    outcomes = fuzzed.fuzz(made, 2000, seed=1)
    assert sum(outcomes.values()) == 2000
    assert outcomes.get("refused", 0) > 1000 and outcomes.get("restored", 0) > 100, outcomes


@pytest.mark.slow
def test_twenty_thousand_mutations_restore_or_refuse_without_a_traceback(made):
    outcomes = fuzzed.fuzz(made, 20000, seed=2)
    assert sum(outcomes.values()) == 20000, outcomes


def _sample(made: dict[str, Path], folder: Path, count: int, seed: int) -> list[tuple[str, Path]]:
    """``count`` mutated lit_gpu checkpoints the contracts refuse, written as files."""
    from lit_gpu.checkpoints.read import read_checkpoint

    base = read_checkpoint(made["lit_gpu"])
    chosen = []
    for label, mutated in fuzzed.mutations(base, 50 * count, seed):
        if fuzzed.restore_in_memory(mutated, "lit_gpu") == "refused" and "state_dict" not in label:
            path = folder / f"mutated{len(chosen)}.ckpt"
            torch.save(mutated, path)
            chosen.append((label, path))
            if len(chosen) == count:
                break
    return chosen


def _one_line(proc: subprocess.CompletedProcess, label: str) -> None:
    assert proc.returncode in (0, 2), (label, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, (label, proc.stderr[-2000:])
    if proc.returncode == 2:
        errors = [line for line in proc.stderr.splitlines() if line.startswith("lit-gpu: error: ")]
        assert len(errors) == 1, (label, proc.stderr[-2000:])


def _through_each_path(label: str, path: Path, tmp_path: Path, env: dict[str, str]) -> None:
    from lit_gpu.checkpoints import load_lightning_module, load_state_dict
    from lit_gpu.modules import RegressionModule
    from lit_gpu.nets import SimpleModel

    fit = run_cli(["fit", *SIMPLE, "--ckpt_path", str(path), "--trainer.max_epochs", "1"], tmp_path, env)
    _one_line(fit, label)
    assert fit.returncode == 2, (label, fit.stderr[-2000:])  # refused before any restore: nothing trained
    _one_line(run_cli(["test", *SIMPLE, "--ckpt_path", str(path)], tmp_path, env), label)
    _one_line(run_cli(["export", str(path), "--out", str(tmp_path / "m.pt")], tmp_path, env), label)
    size = path.stat().st_size
    net = SimpleModel(10, 10)  # the fixture's module was built in Python: its net is not in its hparams
    for job in (
        lambda: load_state_dict(path),
        lambda: load_lightning_module(RegressionModule, path, net=net),
    ):
        result = capped(size, job)  # the Python loaders, under the memory cap
        assert result["outcome"] in (
            "returned",
            "CheckpointError",
            "ContractError",
            "CheckpointMismatchError",
        ), (
            label,
            result,
        )


def test_a_sample_through_fit_test_export_and_the_python_loaders(made, tmp_path, cli_env):
    for label, path in _sample(made, tmp_path, 1, seed=3):
        _through_each_path(label, path, tmp_path, cli_env)


@pytest.mark.slow
def test_a_larger_sample_through_fit_test_export_and_the_python_loaders(made, tmp_path, cli_env):
    for label, path in _sample(made, tmp_path, 12, seed=4):
        _through_each_path(label, path, tmp_path, cli_env)


@pytest.mark.full
@pytest.mark.parametrize(
    ("part", "key", "value"),
    [
        ("epoch_progress", "current", {"ready": 1, "started": 1, "processed": 1, "completed": "x"}),
        ("epoch_progress", "total", {"ready": 1, "completed": 0, "reset": 3}),  # shadows the method
        ("epoch_loop.automatic_optimization.optim_progress", "optimizer", None),
    ],
)
def test_forged_loop_progress_through_fit_is_one_line_and_trains_nothing(
    made, tmp_path, cli_env, part, key, value
):
    """A str count was a TypeError traceback in the fit; a ``reset`` key was restored over the tracker's
    method (the fit went on, exit 0); a missing part was a KeyError traceback."""
    from lit_gpu.checkpoints.read import read_checkpoint

    forged = read_checkpoint(made["lit_gpu"])
    forged["loops"]["fit_loop"][part][key] = value
    path = tmp_path / "forged.ckpt"
    torch.save(forged, path)
    fit = run_cli(["fit", *SIMPLE, "--ckpt_path", str(path), "--trainer.max_epochs", "2"], tmp_path, cli_env)
    _one_line(fit, key)
    assert fit.returncode == 2 and "loops.fit_loop" in fit.stderr, fit.stderr[-2000:]

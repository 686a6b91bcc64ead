"""Files written by an earlier lit_gpu still test, export and continue.

``tests/corpus/runs_d902572/`` is a run folder (``config.yaml`` and ``last.ckpt`` after 3 steps of
``lit_gpu:simple``) written by main at d902572, before the checkpoint package was cut by what it promises.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from tests.helpers.forked_cli import run_cli

pytestmark = pytest.mark.integration

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "runs_d902572"
RUN = Path("runs") / "lit_gpu" / "version_0"
SIMPLE = ["--config", "lit_gpu:simple", "--config", "lit_gpu:debug"]


@pytest.fixture
def old_run(tmp_path: Path) -> Path:
    shutil.copytree(CORPUS / "runs", tmp_path / "runs")
    return tmp_path


def _ok(proc, what: str) -> None:
    assert proc.returncode == 0, (what, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, (what, proc.stderr[-3000:])


def test_an_old_checkpoint_tests_by_its_file_and_its_saved_config(old_run, cli_env):
    ckpt = old_run / RUN / "checkpoints" / "last.ckpt"
    _ok(run_cli(["test", *SIMPLE, "--ckpt_path", str(ckpt)], old_run, cli_env), "test FILE")
    _ok(run_cli(["test", "--ckpt_path", str(ckpt)], old_run, cli_env), "test FILE, its config.yaml")


def test_an_old_checkpoint_exports(old_run, cli_env):
    ckpt = old_run / RUN / "checkpoints" / "last.ckpt"
    _ok(run_cli(["export", str(ckpt), "--out", str(old_run / "m.pt")], old_run, cli_env), "export")
    assert set(torch.load(old_run / "m.pt", weights_only=True)) == {"fc.weight", "fc.bias"}


@pytest.mark.parametrize("which", ["file", "last"])
def test_an_old_run_continues(old_run, cli_env, which):
    ckpt = old_run / RUN / "checkpoints" / "last.ckpt"
    given = str(ckpt) if which == "file" else "last"
    fit = run_cli(["fit", *SIMPLE, "--trainer.max_steps", "5", "--ckpt_path", given], old_run, cli_env)
    _ok(fit, f"fit --ckpt_path {which}")
    assert torch.load(ckpt, weights_only=False)["global_step"] == 5

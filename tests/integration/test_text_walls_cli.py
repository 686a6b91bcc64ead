"""Malformed text files and names through the real CLI: exit 0 or exit 2 with one ``lit-gpu: error:`` line.

The in-process fuzz (tests/unit/files/test_fuzz_files.py) covers thousands of mutated files; these are
the walls the attack found, each run as ``lit-gpu`` (forked: tests/helpers/forked_cli.py).
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from tests.helpers.forked_cli import run_cli
from tests.helpers.fuzz_files import WRITTEN, mutate
from tests.helpers.paths import CONFIGS

pytestmark = pytest.mark.integration


def _one_error_line(proc, *parts: str) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("lit-gpu: error: "), proc.stderr[-2000:]
    for part in parts:
        assert part in lines[0]
    return lines[0]


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "runs" / "lit_gpu" / "version_0"
    run.mkdir(parents=True)
    return run


@pytest.mark.parametrize(
    ("body", "part"),
    [
        (b"step,train/loss\n1,0.5\n2,\xff\n", "line 3"),
        (b"step,train/loss\n1," + b"9" * 200_000 + b"\n", "field larger"),
        (b"step,train/loss\n" + b"1," * 700_000 + b"\n", "longer than"),
    ],
    ids=["not-utf8", "200kb-cell", "long-line"],
)
def test_plot_of_a_malformed_metrics_csv(tmp_path, cli_env, body, part):
    (_run(tmp_path) / "metrics.csv").write_bytes(body)
    _one_error_line(run_cli(["plot", "runs"], tmp_path, cli_env, timeout=120), "metrics.csv", part)


def test_plot_of_mathtext_and_control_characters_in_column_names(tmp_path, cli_env):
    run = _run(tmp_path)
    (run / "metrics.csv").write_text(
        'step,"train/loss_$\\frac{$","val/acc\x1b]0;x\x07",_loss\n1,0.5,0.1,2\n2,0.4,0.2,3\n'
    )
    proc = run_cli(["plot", "runs"], tmp_path, cli_env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (run / "curves.png").stat().st_size > 0


def test_plot_of_mutated_metrics_files(tmp_path, cli_env):
    rng = random.Random(7)
    original = (WRITTEN / "metrics.csv").read_bytes()
    run = _run(tmp_path)
    for _ in range(3):
        (run / "metrics.csv").write_bytes(mutate(original, rng))
        proc = run_cli(["plot", "runs"], tmp_path, cli_env, timeout=120)
        assert "Traceback" not in proc.stderr
        if proc.returncode:
            _one_error_line(proc)


def test_sweep_names_and_environment_records(tmp_path, cli_env):
    dots = tmp_path / "...yaml"
    shutil.copy(CONFIGS / "sweeps" / "simple.yaml", dots)
    proc = run_cli(["sweep", "--search", str(dots), "--root", "sweeps"], tmp_path, cli_env, timeout=120)
    _one_error_line(proc, "study name", "--study_name")
    assert not (tmp_path / "optuna_journal.log").exists() and not (tmp_path / "best.yaml").exists()
    env = {**cli_env, "LIT_GPU_SWEEP_TRIAL": "[" * 100_000}
    _one_error_line(run_cli(["sweep"], tmp_path, env, timeout=120), "$LIT_GPU_SWEEP_TRIAL", "unset")

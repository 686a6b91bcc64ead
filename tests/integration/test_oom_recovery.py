"""``lit-gpu fit --oom_recovery true``: an out-of-memory run goes on with micro-batches, same result.

The OOMs are rehearsed on CPU with ``lit_gpu.oom.OOMAbove`` (a training forward with more than
32 samples raises ``torch.OutOfMemoryError``), on configs/simple.yaml at batch 64.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from lit_gpu.cli import main
from tests.helpers.forked_cli import run_cli
from tests.helpers.paths import CONFIGS

SIMPLE = [
    "fit",
    "--config", str(CONFIGS / "simple.yaml"),
    "--config", str(CONFIGS / "debug.yaml"),
    "--data.shuffle", "false",
]  # fmt: skip
OOM_ABOVE_32 = ["--trainer.callbacks+=lit_gpu.oom.OOMAbove", "--trainer.callbacks.batch_size", "32"]
LAST = Path("runs") / "lit_gpu" / "version_{}" / "checkpoints" / "last.ckpt"


@pytest.fixture(autouse=True)
def _plain_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])  # in-process runs: no pytest flags in sys.argv


def _fit(cwd: Path, monkeypatch, capsys, *extra: str) -> tuple[int, list[str]]:
    """Run ``lit-gpu fit`` in-process in ``cwd``; return (exit code, stderr lines starting with lit-gpu:)."""
    monkeypatch.chdir(cwd)
    code = 0
    try:
        main([*SIMPLE, *extra])
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    return code, [ln for ln in err.splitlines() if ln.startswith("lit-gpu:")]


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["state_dict"]


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The uninterrupted batch-64 run (2 epochs x 4 steps): its last.ckpt."""
    cwd = tmp_path_factory.mktemp("reference")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        mp.setattr(sys, "argv", ["lit-gpu"])
        main(SIMPLE)
    return cwd / str(LAST).format(0)


def test_without_recovery_an_oom_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    code, lines = _fit(tmp_path, monkeypatch, capsys, *OOM_ABOVE_32)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("lit-gpu: error: out of memory during training (tried to allocate 2.00 GiB)")


def test_with_recovery_the_run_ends_as_the_uninterrupted_one(reference, tmp_path, monkeypatch, capsys):
    code, lines = _fit(tmp_path, monkeypatch, capsys, *OOM_ABOVE_32, "--oom_recovery", "true")
    assert code == 0
    assert lines == [
        "lit-gpu: out of memory at step 0 (epoch 0/1 batch 1/4) with batch 64 -> micro-batch 32 x 2"
    ]
    last = tmp_path / str(LAST).format(0)
    ckpt = torch.load(last, map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == torch.load(reference, weights_only=True)["global_step"] == 8
    assert ckpt["callbacks"]["OOMRecovery"] == {"micro_batch_size": 32, "eval_micro_batch_size": None}
    assert _max_diff(ckpt["state_dict"], _weights(reference)) < 1e-5


def test_resume_of_a_recovered_run_starts_with_the_micro_batch(reference, tmp_path, monkeypatch, capsys):
    code, lines = _fit(
        tmp_path, monkeypatch, capsys, *OOM_ABOVE_32, "--oom_recovery", "true", "--trainer.max_epochs", "1"
    )
    assert code == 0 and len([ln for ln in lines if "out of memory" in ln]) == 1
    code, lines = _fit(
        tmp_path,
        monkeypatch,
        capsys,
        *OOM_ABOVE_32,
        "--oom_recovery", "true",
        "--ckpt_path", "last",
    )  # fmt: skip
    assert code == 0
    assert not [ln for ln in lines if "out of memory" in ln], lines  # no second OOM to rediscover it
    assert "lit-gpu: micro-batch 32 x 2 from the checkpoint (found by out-of-memory recovery)" in lines
    assert _max_diff(_weights(tmp_path / str(LAST).format(0)), _weights(reference)) < 1e-5  # same folder


@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_ddp_only_rank_1_runs_out_both_ranks_switch(phase, reference, tmp_path, cli_env):
    """gloo, 2 processes x batch 32 (the reference's global batch 64); rank 1 fails from step 3 on.

    ``backward``: rank 1 fails late in its backward while rank 0's backward succeeded, the case where
    a gradient all-reduce inside backward would leave rank 0 waiting forever.
    """
    recorder = tmp_path / "recorder.yaml"
    recorder.write_text(
        "trainer:\n  callbacks+:\n    - class_path: tests.helpers.recorder.MicroBatchRecorder\n"
        f"      init_args:\n        out_dir: {tmp_path / 'micro'}\n"
        "    - class_path: lit_gpu.oom.OOMAbove\n"
        "      init_args:\n        batch_size: 16\n        ranks: [1]\n        from_step: 3\n"
        f"        phase: {phase}\n"
    )
    cmd = [
        *SIMPLE,
        "--config", str(recorder),
        "--trainer.strategy", "ddp",
        "--trainer.devices", "2",
        "--data.batch_size", "32",
        "--oom_recovery", "true",
    ]  # fmt: skip
    proc = run_cli(cmd, tmp_path, cli_env, timeout=400)  # forked: tests/helpers/forked_cli.py
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [ln for ln in proc.stderr.splitlines() if "out of memory" in ln]
    assert lines == [
        "lit-gpu: out of memory at step 3 (epoch 0/1 batch 4/4) with batch 32 -> micro-batch 16 x 2 "
        "on all 2 processes (1 ran out)"
    ]
    for rank in (0, 1):
        record = torch.load(tmp_path / "micro" / f"micro{rank}.pt")
        assert record["micro_batch_size"] == 16
        # steps 0-2 whole; step 3: the failed try of 32 (on both ranks), then 16 + 16 from there on
        halves = [(step, 16) for step in range(3, 8) for _ in "ab"]
        assert record["sizes"] == [(0, 32), (1, 32), (2, 32), (3, 32), *halves]
    assert _max_diff(_weights(tmp_path / str(LAST).format(0)), _weights(reference)) < 1e-5


def _metrics_csv(path: Path) -> dict[str, float]:
    """The last value of every column of a run's metrics.csv."""
    import csv

    last: dict[str, float] = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            last.update({k: float(v) for k, v in row.items() if v not in ("", None)})
    return last


def test_without_recovery_an_oom_in_validation_names_the_loop(tmp_path, monkeypatch, capsys):
    code, lines = _fit(
        tmp_path, monkeypatch, capsys, *OOM_ABOVE_32, "--trainer.callbacks.loops", "validation"
    )
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(
        "lit-gpu: error: out of memory during the sanity check (validation before training) "
        "(tried to allocate"
    )


def test_with_recovery_every_loop_of_fit_runs_with_the_same_metrics(reference, tmp_path, monkeypatch, capsys):
    code, lines = _fit(
        tmp_path,
        monkeypatch,
        capsys,
        *OOM_ABOVE_32,
        "--trainer.callbacks.loops",
        "all",
        "--oom_recovery",
        "true",
    )
    assert code == 0, lines
    assert [ln for ln in lines if "out of memory" in ln] == [
        "lit-gpu: out of memory during the sanity check (validation before training) at batch 0 "
        "with batch 64 -> micro-batch 32 x 2",
        "lit-gpu: out of memory at step 0 (epoch 0/1 batch 1/4) with batch 64 -> micro-batch 32 x 2",
    ]
    recovered = _metrics_csv(tmp_path / "runs" / "lit_gpu" / "version_0" / "metrics.csv")
    expected = _metrics_csv(reference.parent.parent / "metrics.csv")
    assert recovered.keys() == expected.keys() and "val/loss" in expected
    for key, value in expected.items():
        assert recovered[key] == pytest.approx(value, rel=1e-5), key


@pytest.mark.parametrize(
    "command, loop", [("validate", "validation"), ("test", "test"), ("predict", "predict")]
)
def test_validate_test_predict_recover_with_the_same_results(
    command, loop, reference, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    args = [command, *SIMPLE[1:], "--ckpt_path", str(reference), "--predict_out", "preds.csv"]

    def run(*extra: str) -> tuple[list[str], str]:
        main([*args, *extra])
        captured = capsys.readouterr()
        return [ln for ln in captured.err.splitlines() if "out of memory" in ln], captured.out

    plain_lines, plain_out = run()
    if command == "predict":
        Path("preds.csv").rename("plain.csv")
    lines, out = run(*OOM_ABOVE_32, "--trainer.callbacks.loops", loop, "--oom_recovery", "true")
    words = {"validate": "validation", "test": "testing", "predict": "prediction"}[command]
    assert plain_lines == [] and lines == [
        f"lit-gpu: out of memory during {words} at batch 0 with batch 64 -> micro-batch 32 x 2"
    ]
    if command == "predict":
        assert Path("preds.csv").read_text() == Path("plain.csv").read_text()
    else:  # Lightning's results table: the same numbers

        def numbers(text: str) -> list[float]:
            import re

            return [float(x) for x in re.findall(r"\d+\.\d+(?:e[-+]\d+)?", text)]

        assert numbers(out) and numbers(out) == pytest.approx(numbers(plain_out), rel=1e-5)

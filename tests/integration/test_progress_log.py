"""Progress in a batch job's log: ``lit-gpu`` with its output in a file (no terminal) writes plain lines."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from lit_gpu.cli import main
from tests.helpers.forked_cli import popen, run_cli
from tests.helpers.paths import CONFIGS

SIMPLE = ["--config", str(CONFIGS / "simple.yaml"), "--trainer.accelerator", "cpu", "--trainer.devices", "1"]
# epoch e/L as the bar (0-based, of the last index), the batches done in the epoch, the step metrics.csv logs
PROGRESS = re.compile(
    r"^fit epoch (\d+)/(\d+) batch (\d+)/(\d+) step (\d+) \((\d+)%\) .*train/loss_step=([\d.e-]+)"
)


@pytest.fixture(autouse=True)
def _plain_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])


def test_a_log_file_shows_progress_while_the_run_goes_on(tmp_path, cli_env):
    log = tmp_path / "slurm-123.out"
    # 1024 steps an epoch: an epoch lasts seconds even on a fast machine, so lines come mid-epoch
    big = ["--data.init_args.num_samples", "65536"]
    cmd = ["fit", *SIMPLE, *big, "--trainer.max_epochs", "1000", "--progress_interval", "0.3"]
    log.touch()
    proc = popen(cmd, tmp_path, cli_env, stdout=log, stderr=subprocess.STDOUT)  # forked: no terminal
    try:
        deadline = time.monotonic() + 240
        progress: list[re.Match] = []
        while len(progress) < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
            assert proc.poll() is None, log.read_text()[-3000:]
            text = log.read_text()
            progress = [m for m in map(PROGRESS.match, text.splitlines()) if m]
        assert proc.poll() is None  # read while the run is still going
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    assert len(progress) >= 3, text[-3000:]
    epochs = [int(m.group(1)) for m in progress]
    assert epochs == sorted(epochs) and {int(m.group(2)) for m in progress} == {999}
    assert {int(m.group(4)) for m in progress} == {1024}
    assert all(int(m.group(3)) < 1024 and float(m.group(7)) >= 0 for m in progress)
    # the step metrics.csv gives the last step: epochs before this one, plus this epoch's batches, from 0
    assert all(int(m.group(5)) == int(m.group(1)) * 1024 + int(m.group(3)) - 1 for m in progress)
    lines = text.splitlines()
    start = [ln for ln in lines if ln.startswith("lit-gpu: run ")]
    checkpoint = "runs/lit_gpu/version_0/checkpoints/last.ckpt"
    assert start == [
        f"lit-gpu: run runs/lit_gpu/version_0; resume: lit-gpu fit {' '.join(SIMPLE)} {' '.join(big)} "
        f"--trainer.max_epochs 1000 --progress_interval 0.3 --ckpt_path {checkpoint}"
    ]
    assert b"\x1b" not in log.read_bytes()  # no ANSI sequence
    assert not re.search("[\u2500-\u257f\u2580-\u259f]", text)  # no box drawing (the model summary is plain)


def _refuse(constant: str) -> None:
    raise ValueError(f"not strict JSON: {constant}")


def _json_lines(text: str) -> list[dict]:
    """The JSON lines, parsed strictly (``NaN``/``Infinity`` constants are not JSON)."""
    return [json.loads(ln, parse_constant=_refuse) for ln in text.splitlines() if ln.startswith("{")]


def test_json_lines_for_log_scrapers(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = [*SIMPLE, "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "5"]
    main(["fit", *args, "--progress_format", "json", "--progress_interval", "0"])
    events = _json_lines(capsys.readouterr().out)
    assert [e["event"] for e in events] == ["start", "epoch_end", "epoch_end", "end"]
    start, first, second, end = events
    assert start["folder"] == "runs/lit_gpu/version_0" and start["resume"].endswith(
        "--ckpt_path runs/lit_gpu/version_0/checkpoints/last.ckpt"
    )
    assert [first[k] for k in ("epoch", "epochs", "batch", "batches", "step")] == [0, 2, 5, 5, 4]
    assert [first["percent"], second["percent"]] == [50.0, 100.0]
    assert [second["global_step"], second["step"]] == [10, 9]  # Lightning's count; metrics.csv's step
    assert second["eta_s"] == 0.0 and second["samples_per_s"] > 0 and second["elapsed_s"] > 0
    assert {"train/loss_step", "val/loss"} <= set(second["metrics"])
    assert end["checkpoint"] == "runs/lit_gpu/version_0/checkpoints/last.ckpt"
    assert end["metrics"]["val/loss"] == pytest.approx(second["metrics"]["val/loss"])

    ckpt = str(tmp_path / end["checkpoint"])
    main(["test", *args, "--ckpt_path", ckpt, "--progress_format", "json", "--progress_interval", "0"])
    events = _json_lines(capsys.readouterr().out)
    assert [e["event"] for e in events] == ["start", "epoch_end", "end"]
    assert events[1]["stage"] == "test" and events[1]["batch"] == events[1]["batches"] == 8  # 512 / 64
    assert events[1]["step"] is None  # no training step in a test
    assert events[1]["percent"] == 100.0 and "test/loss" in events[2]["metrics"]


def test_text_lines_of_validate_and_predict_and_a_trial_number(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LIT_GPU_TRIAL", "7")
    args = [
        *SIMPLE,
        "--trainer.max_epochs",
        "1",
        "--trainer.limit_train_batches",
        "2",
        "--progress_interval",
        "0",
    ]
    main(["fit", *args])
    ckpt = str(tmp_path / "runs/lit_gpu/version_0/checkpoints/last.ckpt")
    main(["validate", *args, "--ckpt_path", ckpt])
    main(["predict", *args, "--ckpt_path", ckpt, "--predict_out", "p.csv"])
    lines = capsys.readouterr().out.splitlines()
    fit_end = "trial 7 fit epoch 0/0 end batch 2/2 step 1 (100%) val/loss="
    assert any(ln.startswith(fit_end) for ln in lines), lines
    validate = r"trial 7 validate batch 8/8 \(100%\) val/loss=[\d.e-]+ \| \d+ samples/s"
    assert any(re.match(validate, ln) for ln in lines)
    assert any(re.match(r"lit-gpu: trial 7 validate done in 0:00:\d\d: val/loss=", ln) for ln in lines)
    assert any(re.match(r"trial 7 predict batch (\d+)/\1 \(100%\) \| \d+ samples/s", ln) for ln in lines)


def test_ddp_only_rank_zero_writes_progress(tmp_path, cli_env):
    cmd = [
        "fit", *SIMPLE, "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "3",
        "--trainer.strategy", "ddp", "--trainer.devices", "2", "--progress_interval", "0",
        "--progress_format", "json",
    ]  # fmt: skip
    proc = run_cli(cmd, tmp_path, cli_env, timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    events = _json_lines(proc.stdout)
    assert [e["event"] for e in events] == ["start", "epoch_end", "epoch_end", "end"], proc.stdout
    assert events[2]["global_step"] == 6 and events[2]["step"] == 5
    assert "\x1b" not in proc.stdout + proc.stderr

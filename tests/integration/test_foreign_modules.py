"""Modules like Lightning's examples (tests/helpers/examples.py), as a research user brings them, through
``lit-gpu`` with its defaults: fit, test, export, a SIGTERM mid-epoch then ``--ckpt_path last`` bit-exact,
weights equal to plain LightningCLI's, and one numbering in every line.

Each has its own plain shuffled ``DataLoader`` with a random augmentation: 96 samples, batch 16 -> 6 batches
an epoch, 2 epochs. The GAN (manual optimization, two optimizers: two global steps a batch, noise from the
global RNG, ``self.logger.experiment.add_image``) is in the default suite; the others and the variants
(2 DataLoader workers, several stop steps) are ``slow``.
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.forked_cli import run_cli

EXAMPLES = "tests.helpers.examples"
MODULES = {
    "classifier": ("LitClassifier", "images"),
    "autoencoder": ("LitAutoEncoder", "images"),
    "gan": ("GAN", "images"),
    "transformer": ("LitTransformer", "tokens"),
}
BATCHES = 6  # an epoch
RUN = Path("runs") / "lit_gpu" / "version_0"


def _args(module: str, workers: int = 0, command: str = "fit") -> list[str]:
    name, kind = MODULES[module]
    return [
        command, "--model", f"{EXAMPLES}.{name}", "--data", f"{EXAMPLES}.ExampleData",
        "--data.kind", kind, "--data.num_workers", str(workers),
        "--trainer.accelerator", "cpu", "--trainer.max_epochs", "2", "--trainer.log_every_n_steps", "1",
        "--trainer.limit_val_batches", "1", "--trainer.enable_model_summary", "false",
    ]  # fmt: skip


def _run(cwd: Path, env: dict, args: list[str], code: int = 0) -> subprocess.CompletedProcess:
    cwd.mkdir(parents=True, exist_ok=True)
    proc = run_cli(args, cwd, env, timeout=400)
    assert proc.returncode == code, proc.stderr[-4000:]
    return proc


def _sigterm(global_step: int) -> list[str]:
    return [
        "--trainer.callbacks+=tests.helpers.resume.SignalAtStep",
        "--trainer.callbacks.step",
        str(global_step),
    ]


def _last(root: Path) -> dict:
    return torch.load(root / RUN / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


def _assert_same_training(got_root: Path, want_root: Path) -> None:
    """Weights, every optimizer's state, the loop counters and metrics.csv: equal, bit for bit."""
    got, want = _last(got_root), _last(want_root)
    assert got["global_step"] == want["global_step"]
    assert got["state_dict"].keys() == want["state_dict"].keys()
    for key, value in want["state_dict"].items():
        assert torch.equal(got["state_dict"][key], value), key
    assert len(got["optimizer_states"]) == len(want["optimizer_states"])
    for got_opt, want_opt in zip(got["optimizer_states"], want["optimizer_states"], strict=True):
        assert got_opt["state"].keys() == want_opt["state"].keys()
        for index, state in want_opt["state"].items():
            for name, value in state.items():
                assert torch.equal(torch.as_tensor(got_opt["state"][index][name]), torch.as_tensor(value))
    assert (got_root / RUN / "metrics.csv").read_text() == (want_root / RUN / "metrics.csv").read_text()


_references: dict[tuple[str, int], Path] = {}


def _reference(module: str, workers: int, tmp_path_factory, env: dict) -> Path:
    if (module, workers) not in _references:
        root = tmp_path_factory.mktemp(f"reference_{module}_{workers}")
        _run(root, env, _args(module, workers))
        _references[module, workers] = root
    return _references[module, workers]


def test_a_gan_that_logs_images_fits_tests_and_exports_under_the_defaults(tmp_path, cli_env):
    """``self.logger`` is TensorBoard's, as in stock Lightning (``add_image`` runs), the CSV log beside it."""
    _run(tmp_path, cli_env, _args("gan"))
    events = list((tmp_path / RUN).glob("events.out.tfevents.*"))
    assert events and any(b"generated_images" in path.read_bytes() for path in events)
    assert "g_loss" in (tmp_path / RUN / "metrics.csv").read_text().splitlines()[0]
    tested = _run(tmp_path, cli_env, [*_args("gan", command="test"), "--ckpt_path", "last"])
    assert "val_d_real" in tested.stdout + tested.stderr
    out = tmp_path / "gan.safetensors"
    last = str(tmp_path / RUN / "checkpoints" / "last.ckpt")
    _run(
        tmp_path, cli_env, ["export", last, "--out", str(out), "--trust_module", "tests"]
    )  # the user's own code
    from safetensors.torch import load_file

    exported, saved = load_file(out), _last(tmp_path)["state_dict"]
    assert exported.keys() == saved.keys() and all(torch.equal(exported[k], v) for k, v in saved.items())


@pytest.mark.parametrize(
    ("module", "workers", "stop"),
    [
        ("gan", 0, 16),  # two global steps a batch: epoch 2, after its batch 2
        pytest.param("gan", 2, 14, marks=pytest.mark.full),
        pytest.param("classifier", 0, 3, marks=pytest.mark.full),
        pytest.param("classifier", 0, 8, marks=pytest.mark.full),
        pytest.param("classifier", 2, 10, marks=pytest.mark.full),
        pytest.param("autoencoder", 0, 9, marks=pytest.mark.full),
        pytest.param("autoencoder", 2, 4, marks=pytest.mark.full),
        pytest.param("transformer", 0, 7, marks=pytest.mark.full),
    ],
)
def test_sigterm_mid_epoch_then_resume_is_bit_exact(
    module, workers, stop, tmp_path, tmp_path_factory, cli_env
):
    reference = _reference(module, workers, tmp_path_factory, cli_env)
    args = _args(module, workers)
    first = _run(tmp_path, cli_env, [*args, *_sigterm(stop)], code=143)
    logged = stop // 2 - 1 if module == "gan" else stop - 1  # the step metrics.csv gives the last step done
    assert f"at step {logged} " in first.stderr
    resumed = _run(tmp_path, cli_env, [*args, "--ckpt_path", "last"])
    assert "cannot continue there" not in resumed.stderr
    _assert_same_training(tmp_path, reference)


def _plain_lightning(cwd: Path, env: dict, args: list[str]) -> Path:
    """The same config under plain LightningCLI (its defaults: TensorBoard, a checkpoint at the end)."""
    cwd.mkdir(parents=True, exist_ok=True)
    code = (
        "import sys; from lightning.pytorch.cli import LightningCLI; LightningCLI(seed_everything_default=42)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=400
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    (ckpt,) = (cwd / "lightning_logs" / "version_0" / "checkpoints").glob("*.ckpt")
    return ckpt


@pytest.mark.parametrize(
    "module", ["gan", *[pytest.param(m, marks=pytest.mark.full) for m in MODULES if m != "gan"]]
)
def test_weights_equal_plain_lightnings(module, tmp_path, tmp_path_factory, cli_env):
    reference = _reference(module, 0, tmp_path_factory, cli_env)
    plain = torch.load(
        _plain_lightning(tmp_path, cli_env, _args(module)), map_location="cpu", weights_only=True
    )
    ours = _last(reference)
    assert plain["global_step"] == ours["global_step"]
    for key, value in plain["state_dict"].items():
        assert torch.equal(ours["state_dict"][key], value), key


PROGRESS = re.compile(r"fit epoch (\d+)/1 batch (\d+)/6 step (\d+)")


def test_stop_resume_and_best_checkpoint_lines_number_as_the_progress_lines(tmp_path, cli_env):
    """Manual optimization with two optimizers (two global steps a batch): the stop line, the resume lines and
    the best checkpoint's name agree with the progress lines on epochs and steps."""
    args = [
        *_args("gan"), "--trainer.enable_progress_bar", "true", "--progress_interval", "1e-9",
        "--checkpoint.monitor", "val_d_real", "--checkpoint.mode", "max",
    ]  # fmt: skip
    first = _run(tmp_path, cli_env, [*args, *_sigterm(16)], code=143)
    progress = [m.groups() for m in map(PROGRESS.search, first.stdout.splitlines()) if m]
    assert progress[-1] == ("1", "2", "7"), first.stdout[-2000:]  # epoch 1 (from 0), batch 2: global step 16
    stop = [ln for ln in first.stderr.splitlines() if "stopped by SIGTERM" in ln]
    assert len(stop) == 1 and "at step 7 (epoch 1/1 batch 2/6; global steps are optimizer steps: " in stop[0]
    assert "2 a batch, 8 batches)" in stop[0]
    resumed = _run(tmp_path, cli_env, [*args, "--ckpt_path", "last"])
    assert re.search(r"resuming from \S*last\.ckpt \(step 7, epoch 1[;,)]", resumed.stderr), resumed.stderr
    assert "from step 8 (the metrics' step: batches; global step 16 counts optimizer steps)" in resumed.stderr
    progress = [m.groups() for m in map(PROGRESS.search, resumed.stdout.splitlines()) if m]
    assert progress[0] == ("1", "3", "8")  # the resumed fit goes on at epoch 1's batch 3, step 8
    (best,) = (tmp_path / RUN / "checkpoints").glob("best-*.ckpt")
    epoch, step = map(int, re.fullmatch(r"best-epoch(\d+)-step(\d+)\.ckpt", best.name).groups())
    assert step == BATCHES * (epoch + 1) - 1  # the end of the epoch the progress lines call "epoch E/1"
    assert torch.load(best, map_location="cpu", weights_only=True)["epoch"] == epoch  # Lightning's count
    with open(tmp_path / RUN / "metrics.csv", newline="") as f:
        val = {(int(r["epoch"]), int(r["step"])) for r in csv.DictReader(f) if r.get("val_d_real")}
    assert (epoch, step) in val  # metrics.csv's row of that validation: the same numbers

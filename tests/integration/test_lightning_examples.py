"""Lightning's example modules run under lit-gpu's default loggers as under plain LightningCLI.

A module may write to every logger in ``self.loggers`` (Lightning's GAN example calls
``logger.experiment.add_image`` on each); lit-gpu adds a CSV logger beside TensorBoard's, whose experiment
takes TensorBoard ``SummaryWriter``'s calls: scalars as rows of ``metrics.csv``, the rest (images, figures,
text: TensorBoard's event files keep them) ignored with one line, nothing crashes (lit_gpu/run/loggers.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from lightning.pytorch.cli import LightningCLI

from lit_gpu.cli import main

RUN = Path("runs") / "lit_gpu" / "version_0"
SMALL = [
    "--trainer.accelerator", "cpu", "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "2",
    "--trainer.limit_val_batches", "1", "--trainer.enable_model_summary", "false",
    "--trainer.enable_progress_bar", "false",
]  # fmt: skip
DEMOS = "lightning.pytorch.demos"
EXAMPLES = {
    "gan": [
        "--model", "tests.helpers.logger_calls.LoggersGAN",
        "--data", "tests.helpers.examples.ExampleData",
    ],
    "boring": ["--model", f"{DEMOS}.BoringModel", "--data", f"{DEMOS}.BoringDataModule"],
    "every_call": [
        "--model", "tests.helpers.logger_calls.EveryWriterCall",
        "--data", f"{DEMOS}.BoringDataModule",
    ],
}  # fmt: skip


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    return tmp_path


def _lit_gpu(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as exit_info:
        return exit_info.code if isinstance(exit_info.code, int) else 1
    return 0


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_an_example_trains_under_lit_gpus_loggers_as_under_plain_lightning_cli(example, here, capsys):
    plain = here / "plain"
    cli = LightningCLI(args=["fit", *EXAMPLES[example], *SMALL, "--trainer.default_root_dir", str(plain)])
    assert cli.trainer.state.finished  # stock Lightning: TensorBoard alone takes every call

    assert _lit_gpu(["fit", *EXAMPLES[example], *SMALL]) == 0, capsys.readouterr().err[-3000:]
    run = here / RUN
    assert list(run.glob("events.out.tfevents.*"))
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert not (run / "media").exists()  # images, figures, text: TensorBoard's event files keep them
    err = capsys.readouterr().err
    if example == "gan":  # each validation's samples sent to every logger: the CSV one says it once
        assert "val_d_real" in (run / "metrics.csv").read_text().splitlines()[0]
        assert err.count("lit-gpu: the CSV logger keeps no add_image ") == 1, err[-3000:]
    elif example == "every_call":
        header = (run / "metrics.csv").read_text().splitlines()[0].split(",")
        assert {"extra/scalar", "extra/a", "extra/b"} <= set(header)
        for ignored in ("add_image", "add_figure", "add_text", "add_histogram", "add_embedding", "add_graph"):
            assert err.count(f"lit-gpu: the CSV logger keeps no {ignored} ") == 1, err[-3000:]  # said once

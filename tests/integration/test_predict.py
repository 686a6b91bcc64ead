"""lit-gpu predict writes a CSV; fit --tune_batch_size runs Lightning's batch-size finder."""

from __future__ import annotations

import csv
import sys

import pytest
import torch

from lit_gpu.checkpoints import load_into
from lit_gpu.cli import main
from lit_gpu.data import MNISTDataModule
from lit_gpu.nets import MnistCNN
from tests.helpers.paths import CONFIGS


@pytest.fixture(autouse=True)
def _plain_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])


def test_predict_mnist_writes_index_digit_probability(fake_mnist_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    common = [
        "--config", str(CONFIGS / "mnist.yaml"), "--config", str(CONFIGS / "debug.yaml"),
        "--data.data_dir", str(fake_mnist_dir), "--data.download", "false", "--data.num_workers", "0",
        "--data.val_size", "100", "--data.batch_size", "64",
        "--model.init_args.net.init_args.channels", "4",
    ]  # fmt: skip
    main(["fit", *common, "--trainer.max_epochs", "1"])
    ckpt = tmp_path / "runs" / "lit_gpu" / "version_0" / "checkpoints" / "last.ckpt"
    main(["predict", *common, "--ckpt_path", str(ckpt), "--predict_out", "preds.csv"])  # returns on success
    assert "wrote 128 predictions to preds.csv" in capsys.readouterr().out

    with open(tmp_path / "preds.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 128 and [int(r["index"]) for r in rows] == list(range(128))
    net = MnistCNN(channels=4)
    load_into(net, ckpt)
    data = MNISTDataModule(str(fake_mnist_dir), download=False)
    data.setup("predict")
    images = torch.stack([data.test_set[i][0] for i in range(128)])
    with torch.no_grad():
        probs = torch.softmax(net.eval()(images), dim=-1)
    prob, digit = probs.max(dim=-1)
    assert [int(r["prediction"]) for r in rows] == digit.tolist()
    assert torch.allclose(torch.tensor([float(r["probability"]) for r in rows]), prob, atol=1e-5)


def test_tune_batch_size_finds_and_applies_a_batch_size(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["fit", "--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]
    main([*argv, "--tune_batch_size", "true", "--data.num_samples", "256", "--trainer.max_epochs", "1"])
    err = capsys.readouterr().err
    assert "batch-size finder chose data.batch_size=" in err
    chosen = int(err.split("data.batch_size=")[1].split(";")[0])
    assert chosen > 64  # grew from the config's 64: nothing runs out of memory on CPU
    assert (tmp_path / "runs" / "lit_gpu" / "version_0" / "checkpoints" / "last.ckpt").is_file()

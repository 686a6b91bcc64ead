"""Red-team findings against the YAML reader (lit_gpu.textfiles), each compared with jsonargparse's own
loader (``jsonargparse._loaders_dumpers.yaml_load``): the same value where it reads one, one line where it
cannot, and never more time or memory than lit_gpu's bounds allow."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from jsonargparse._loaders_dumpers import yaml_load
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from lit_gpu.cli import config_files
from lit_gpu.textfiles import BadFileError, hparams_loader, parse_yaml, read_yaml


def _config(text: str):
    """``text`` read as ``--config cfg.yaml`` is read (the CLI's loader, jsonargparse's resolvers)."""
    token = config_files.reading.set("cfg.yaml")
    try:
        return config_files.load(text, "cfg.yaml")
    finally:
        config_files.reading.reset(token)


@pytest.mark.parametrize(
    "text",
    [
        "a: 1" + ":59" * 300_000,  # YAML 1.1 base-60 int: PyYAML multiplies a growing base per part
        "a: !!int 0" + ":0" * 300_000,  # the value is 0, the construction as slow
        "? 1" + ":59" * 300_000 + "\n: key",
    ],
    ids=["plain", "tagged-zero", "key"],
)
def test_a_base_60_integer_bomb_is_one_line_at_once(text):
    """900 KB of ``1:59:59:...`` took 45 s of CPU in ``construct_yaml_int`` (jsonargparse's own loader as
    long); Python's bound on an integer read from text (4300 digits) now applies to the base-60 form too."""
    start = time.perf_counter()
    with pytest.raises(BadFileError, match=r"cfg.yaml, line \d: the base-60 integer .* longer than 4300"):
        _config(text)
    assert time.perf_counter() - start < 2
    with pytest.raises(BadFileError, match="base-60 integer"):  # every YAML lit_gpu reads, not only configs
        parse_yaml(text, "hparams.yaml")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("max_time: 190:20:30", 685230),  # YAML 1.1 base-60, as jsonargparse reads it
        ("a: !!int 1:30", 90),
        ("a: 1:30.5", 90.5),
        # long but within the bound: read as jsonargparse reads it (a config's integers are Python's)
        ("a: [" + ",".join(["1" + ":59" * 1400] * 3) + "]", None),
    ],
)
def test_base_60_values_keep_jsonargparses_meaning(text, value):
    if value is None:
        assert _config(text) == yaml_load(text)
        return
    assert _config(text) == yaml_load(text) == {next(iter(yaml_load(text))): value}


class TupleHparams(LightningModule):
    """A plain module with a tuple hyper-parameter, as Lightning's examples write them (Adam's betas)."""

    def __init__(self, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999)) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).sum()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr, betas=self.hparams.betas)


def test_an_hparams_yaml_lightning_wrote_with_a_tuple_is_read_as_lightning_reads_it(tmp_path):
    """Lightning's loggers write a tuple hyper-parameter as ``!!python/tuple`` (``save_hparams_to_yaml``) and
    ``load_from_checkpoint(hparams_file=...)`` reads it back with ``yaml.full_load``: lit_gpu's check refused
    the file ("the tag !!python/tuple is not allowed"); it reads the tuple as Lightning does, nothing else."""
    from lightning.pytorch.core.saving import load_hparams_from_yaml

    from lit_gpu.checkpoints import load_lightning_module

    trainer = Trainer(
        max_steps=1,
        accelerator="cpu",
        logger=CSVLogger(tmp_path),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    data = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    trainer.fit(TupleHparams(betas=(0.8, 0.99)), data)
    ckpt = tmp_path / "model.ckpt"
    trainer.save_checkpoint(ckpt)
    hparams = Path(trainer.logger.log_dir) / "hparams.yaml"
    assert "!!python/tuple" in hparams.read_text()
    assert read_yaml(hparams, loader=hparams_loader()) == load_hparams_from_yaml(str(hparams))
    model = load_lightning_module(TupleHparams, ckpt, hparams_file=hparams)
    assert model.hparams.betas == (0.8, 0.99)
    hparams.write_text("betas: !!python/object/apply:os.system [echo pwned]\n")
    with pytest.raises(BadFileError, match="the tag !!python/object/apply:os.system is not allowed"):
        read_yaml(hparams, loader=hparams_loader())

"""The summary without an all-zero FLOPs column (issue 51), Lightning's where FLOPs were counted."""

from __future__ import annotations

import logging

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelSummary, RichModelSummary
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.utilities.model_summary import summarize
from rich import get_console

from lit_gpu.callbacks.model_summary import LeanModelSummary, LeanRichModelSummary, lean_model_summary


class _Counted(BoringModel):
    def __init__(self) -> None:
        super().__init__()
        self.example_input_array = torch.zeros(2, 32)  # a forward: FLOPs counted


def _args(model: pl.LightningModule) -> tuple:
    found = summarize(model, max_depth=1)
    data = found._get_summary_data()  # noqa: SLF001 - Lightning's callback calls it so
    sizes = found.total_parameters, found.trainable_parameters, found.model_size
    return data, *sizes, found.total_training_modes, found.total_flops


def _plain(model: pl.LightningModule, caplog: pytest.LogCaptureFixture) -> str:
    with caplog.at_level(logging.INFO, logger="lightning.pytorch.callbacks.model_summary"):
        LeanModelSummary.summarize(*_args(model))
    return caplog.text


def _rich(model: pl.LightningModule) -> str:
    with get_console().capture() as captured:
        LeanRichModelSummary.summarize(*_args(model))
    return captured.get()


def test_no_flops_column_or_total_where_none_was_counted(caplog):
    plain = _plain(BoringModel(), caplog)
    assert "| Params | Mode" in plain and "Total params" in plain and "Modules in eval mode" in plain
    assert "FLOPs" not in plain and "Flops" not in plain
    rich = _rich(BoringModel())
    assert "Params" in rich and "Total params" in rich and "Modules in eval mode" in rich
    assert "FLOPs" not in rich


def test_counted_flops_keep_lightnings_column_and_total(caplog):
    plain = _plain(_Counted(), caplog)
    assert "| FLOPs | In sizes" in plain and "Total Flops" in plain
    assert "FLOPs" in _rich(_Counted())


def test_the_summary_lightning_added_turns_lean_and_a_users_own_stays(tmp_path):
    class Own(ModelSummary):
        pass

    for callbacks, expected in (([], LeanRichModelSummary), ([ModelSummary(max_depth=3)], LeanModelSummary),
                                ([Own()], Own)):  # fmt: skip
        trainer = pl.Trainer(default_root_dir=tmp_path, logger=False, callbacks=callbacks)
        lean_model_summary(trainer)
        (summary,) = [c for c in trainer.callbacks if isinstance(c, ModelSummary)]
        assert type(summary) is expected
    assert isinstance(LeanRichModelSummary(), RichModelSummary)

"""lit_gpu's guarantees go on any Trainer whatever its callbacks; a user's instance of one replaces it."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
from lightning.pytorch.callbacks import BatchSizeFinder, EarlyStopping, ModelCheckpoint, RichModelSummary

from lit_gpu.callbacks import OOMRecovery
from lit_gpu.callbacks.guarantees import (
    GUARANTEES,
    SWITCH,
    guarantee_callbacks,
    guarantees_on,
    install_guarantees,
    with_guarantees,
)
from lit_gpu.errors import LitGpuError
from lit_gpu.preemption import CheckpointOnInterrupt

NAMES = [cls.__name__ for cls in GUARANTEES]


def _names(callbacks) -> list[str]:
    return [type(cb).__name__ for cb in callbacks]


def test_a_list_without_them_gets_each_once_first_after_the_tuners():
    tuner, early, summary = BatchSizeFinder(), EarlyStopping("val/loss"), RichModelSummary()
    ckpt = ModelCheckpoint()
    merged = with_guarantees([tuner, early, summary, ckpt])
    assert _names(merged) == [
        "BatchSizeFinder",
        *NAMES,
        "EarlyStopping",
        "RichModelSummary",
        "ModelCheckpoint",
    ]
    assert merged[0] is tuner and merged[-3:] == [early, summary, ckpt]  # the user's objects, untouched
    assert _names(with_guarantees(merged)) == _names(merged)  # nothing twice
    assert _names(with_guarantees([])) == NAMES


def test_a_users_instance_of_a_guarantee_class_or_subclass_replaces_only_that_one():
    class MyStop(CheckpointOnInterrupt):
        pass

    mine, recovery = MyStop(), OOMRecovery()  # OOMRecovery is an OOMLoopName
    merged = with_guarantees([mine, recovery])
    assert [cb for cb in merged if isinstance(cb, CheckpointOnInterrupt)] == [mine]
    assert _names(merged) == [n for n in NAMES if n not in ("CheckpointOnInterrupt", "OOMLoopName")] + [
        "MyStop",
        "OOMRecovery",
    ]


@pytest.mark.parametrize(
    "value, on",
    [(None, True), ("", True), ("true", True), ("TRUE", True), ("false", False), ("False", False)],
)
def test_the_switch_takes_jsonargparses_boolean_values(value, on):
    environ = {} if value is None else {SWITCH: value}
    assert guarantees_on(environ) is on


@pytest.mark.parametrize("value", ["0", "off", "no", "flase"])
def test_another_value_of_the_switch_is_one_line_naming_it(value):
    with pytest.raises(LitGpuError) as info:
        guarantees_on({SWITCH: value})
    text = str(info.value)
    assert "\n" not in text and f"{SWITCH}={value!r}" in text and "false" in text


class NarrowTrainer(pl.Trainer):
    """A Trainer subclass whose ``__init__`` takes no ``callbacks`` (LightningCLI's ``trainer_class``)."""

    def __init__(self, max_epochs: int = 1) -> None:
        super().__init__(max_epochs=max_epochs, logger=False, enable_progress_bar=False, accelerator="cpu")


def make_trainer(**kwargs) -> pl.Trainer:
    """A Trainer factory (also a valid ``trainer_class``)."""
    return pl.Trainer(logger=False, enable_progress_bar=False, accelerator="cpu", **kwargs)


def _factory_with_a_list() -> pl.Trainer:
    return make_trainer(callbacks=[EarlyStopping("val/loss")])


@pytest.mark.parametrize("build", [NarrowTrainer, _factory_with_a_list])
def test_any_trainer_gets_them_on_its_built_list_and_the_switch_leaves_it_alone(build, monkeypatch):
    monkeypatch.delenv(SWITCH, raising=False)
    trainer = build()
    before = list(trainer.callbacks)
    install_guarantees(trainer)
    assert _names(trainer.callbacks) == NAMES + _names(before)
    monkeypatch.setenv(SWITCH, "false")
    off = build()
    before = _names(off.callbacks)
    install_guarantees(off)
    assert _names(off.callbacks) == before and not set(NAMES) & set(before)


def test_a_hand_built_trainer_takes_fresh_instances():
    first, second = guarantee_callbacks(), guarantee_callbacks()
    assert _names(first) == NAMES and not {id(cb) for cb in first} & {id(cb) for cb in second}
    trainer = make_trainer(callbacks=list(first))
    assert [cb for cb in trainer.callbacks if type(cb) in GUARANTEES] == first

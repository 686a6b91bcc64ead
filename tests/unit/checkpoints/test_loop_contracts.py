"""The loops' progress, the schedulers' numbers and the optimizer's state keys against their contracts
(issue 46's red team): each forged value here was restored into Lightning's loops (a negative epoch or
global step, a ``reset`` key shadowing a tracker's method) or ended in a traceback at the next step; now
one line before any restore. A state Lightning itself saves still passes.
"""

from __future__ import annotations

import copy
from typing import Any

import lightning.pytorch as pl
import pytest
import torch

from lit_gpu.checkpoints.contracts import ContractError, check_contracts, lightning_contract
from lit_gpu.checkpoints.optimizer import optimizer_problem, scheduler_problem


@pytest.fixture(scope="module")
def loops() -> dict[str, Any]:
    """The loops' state as Lightning's ``_CheckpointConnector.dump_checkpoint`` saves it."""
    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, max_epochs=1)
    return {
        "fit_loop": trainer.fit_loop.state_dict(),
        "validate_loop": trainer.validate_loop.state_dict(),
        "test_loop": trainer.test_loop.state_dict(),
        "predict_loop": trainer.predict_loop.state_dict(),
    }


def _checked(loops: dict[str, Any], epoch: int = 0) -> None:
    """The top-level counters are the loops' own (global step 0; ``epoch``): a file whose counters disagree
    with its loops is refused (tests/unit/checkpoints/test_step_counters.py)."""
    check_contracts({"global_step": 0, "epoch": epoch, "loops": loops}, lightning_contract(), "ckpt")


def test_the_loops_state_lightning_saves_fits_the_contract(loops):
    _checked(loops)
    moved = copy.deepcopy(loops)  # counts moved on, one batch done: still Lightning's own
    moved["fit_loop"]["epoch_progress"]["current"]["completed"] = 3
    moved["fit_loop"]["epoch_loop.state_dict"]["_batches_that_stepped"] = 2**40
    moved["fit_loop"]["epoch_loop.batch_progress"]["is_last_batch"] = True
    _checked(moved, epoch=3)


EPOCH = ("fit_loop", "epoch_progress")
STEP = ("fit_loop", "epoch_loop.automatic_optimization.optim_progress", "optimizer", "step", "total")
STEPPED = ("fit_loop", "epoch_loop.state_dict")
BATCHES = ("fit_loop", "epoch_loop.batch_progress")


@pytest.mark.parametrize(
    ("path", "key", "value", "named"),
    [
        ((*EPOCH, "current"), "completed", -5, "not a count"),  # restored: a negative epoch
        ((*EPOCH, "current"), "processed", 2**70, "not a count"),
        ((*EPOCH, "total"), "ready", 1.5, "not a count"),
        ((*EPOCH, "current"), "completed", True, "not a count"),
        ((*EPOCH, "current"), "completed", "x", "not a count"),  # a TypeError traceback in the fit
        ((*EPOCH, "total"), "reset", 3, "'reset', which would replace"),  # shadows the tracker's method
        (("fit_loop",), "epoch_progress", [], "not a dict"),  # a TypeError traceback in the fit
        (EPOCH, "current", None, "not a dict"),
        (EPOCH, "extra", {}, "'extra'"),
        (STEP, "completed", -7, "not a count"),  # a negative global step, restored
        (STEPPED, "_batches_that_stepped", -3, "not a count"),
        (STEPPED, "_batches_that_stepped", 2.5, "not a count"),
        (("fit_loop",), "epoch_loop.state_dict", [], "not a dict"),
        (BATCHES, "is_last_batch", "no", "not a bool"),
        (("validate_loop", "batch_progress"), "is_last_batch", 1, "not a bool"),
    ],
)
def test_forged_loop_progress_is_one_line_before_any_restore(loops, path, key, value, named):
    forged = copy.deepcopy(loops)
    target = forged
    for part in path:
        target = target[part]
    target[key] = value
    with pytest.raises(ContractError, match="loops") as err:
        _checked(forged)
    assert named in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("loop", ["fit_loop", "validate_loop"])
def test_a_batch_progress_without_what_lightning_reads_is_one_line(loops, loop):
    """``_BatchProgress.load_state_dict`` reads ``is_last_batch``: without it, a KeyError traceback."""
    forged = copy.deepcopy(loops)
    key = "epoch_loop.batch_progress" if loop == "fit_loop" else "batch_progress"
    del forged[loop][key]["is_last_batch"]
    with pytest.raises(ContractError, match="is_last_batch"):
        _checked(forged)


@pytest.mark.parametrize(
    ("key", "value"), [("global_step", -1), ("epoch", -1), ("epoch", 2**70), ("epoch", 1.0)]
)
def test_negative_or_huge_top_level_counters_are_one_line(key, value):
    with pytest.raises(ContractError, match=key):
        check_contracts({key: value}, lightning_contract(), "ckpt")


def _step_lr() -> torch.optim.lr_scheduler.StepLR:
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    return torch.optim.lr_scheduler.StepLR(optimizer, 3)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"_last_lr": [torch.tensor(float("inf"))]}, "not a finite number"),
        ({"gamma": float("-inf")}, "['gamma'] = -inf, not a finite number"),
        ({"gamma": 10**400}, "['gamma'] = "),  # an OverflowError in the scheduler's arithmetic
        ({"last_epoch": -2}, "['last_epoch'] = -2"),
        ({"last_epoch": True}, "['last_epoch'] is a bool"),
        ({"last_epoch": 1.5}, "['last_epoch'] = 1.5, not a count"),
        ({"_step_count": -1}, "['_step_count'] = -1"),
    ],
)
def test_hostile_scheduler_rates_and_counters_are_refused(change, named):
    """Against the scheduler the config builds (its kinds, its settings, torch's counters)."""
    assert scheduler_problem(_step_lr().state_dict(), _step_lr()) is None
    problem = scheduler_problem({**_step_lr().state_dict(), **change}, _step_lr())
    assert problem is not None and named in problem


def test_a_plateau_schedulers_infinite_best_still_fits():
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    for mode in ("min", "max"):  # best = inf, -inf
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode=mode)
        assert (
            scheduler_problem({**scheduler.state_dict(), "best": -0.5}, scheduler) is None
        )  # a log-likelihood


@pytest.mark.parametrize("key", [10**9, -1, 2**70, 2, "0", 0.5])
def test_optimizer_state_keyed_by_an_id_no_param_group_names_is_one_line(key):
    net = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    saved = optimizer.state_dict()
    saved["state"][key] = saved["state"][0]
    built = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    assert "no param group names" in optimizer_problem(saved, built)


def _callbacks() -> list[Any]:
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint, Timer

    return [
        EarlyStopping(monitor="val/loss"),
        ModelCheckpoint(monitor="val/loss"),
        Timer(duration="00:01:00:00"),
    ]


def _restored(states: dict[str, Any], callbacks: list[Any]) -> None:
    from lit_gpu.checkpoints.contracts import check_restored_state

    check_restored_state({"callbacks": states}, None, callbacks, "ckpt")


def test_the_states_lightnings_callbacks_save_fit_their_contracts():
    callbacks = _callbacks()
    _restored({cb.state_key: cb.state_dict() for cb in callbacks}, callbacks)


@pytest.mark.parametrize(
    ("kind", "change", "named"),
    [
        (0, {"patience": "3"}, "'patience'"),  # a TypeError traceback at the next validation
        (0, {"wait_count": -1}, "'wait_count'"),
        (0, {"best_score": "x"}, "'best_score'"),
        (0, {"best_score": torch.zeros(3)}, "'best_score'"),
        (0, {"stopping_reason": 9}, "'stopping_reason'"),  # a ValueError traceback in load_state_dict
        (0, {"patience": None}, "'patience'"),
        (1, {"best_model_path": 5}, "'best_model_path'"),
        (1, {"best_k_models": {"a.ckpt": "x"}}, "'best_k_models'"),
        (2, {"time_elapsed": {"train": "x"}}, "'time_elapsed'"),  # a TypeError traceback in the fit
        (2, {"time_elapsed": {"train": -5.0}}, "'time_elapsed'"),
        (2, {"time_elapsed": {"train": float("inf")}}, "'time_elapsed'"),
    ],
)
def test_forged_states_of_lightnings_callbacks_are_one_line(kind, change, named):
    callbacks = _callbacks()
    states = {cb.state_key: cb.state_dict() for cb in callbacks}
    states[callbacks[kind].state_key].update(change)
    with pytest.raises(ContractError, match="callbacks") as err:
        _restored(states, callbacks)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_a_missing_key_early_stopping_reads_is_one_line():
    callbacks = _callbacks()
    states = {cb.state_key: cb.state_dict() for cb in callbacks}
    del states[callbacks[0].state_key]["patience"]  # read as state_dict["patience"]: a KeyError traceback
    with pytest.raises(ContractError, match="no 'patience'"):
        _restored(states, callbacks)

"""NaNGuard, RNGStateCallback and CSVPredictionWriter on their own."""

from __future__ import annotations

import csv
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lit_gpu.callbacks import CSVPredictionWriter, NaNGuard, NonFiniteLossError, RNGStateCallback
from tests.helpers.run_if import RunIf


def _fake_trainer(step: int) -> SimpleNamespace:
    return SimpleNamespace(
        global_step=step,
        current_epoch=1,
        checkpoint_callbacks=[],
        fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(batch_idx=3)),
        is_global_zero=True,
    )


@pytest.mark.parametrize("value, kind", [(float("nan"), "NaN"), (float("inf"), "inf")])
def test_nan_guard_names_the_step(value, kind):
    guard = NaNGuard()
    guard.on_before_backward(_fake_trainer(7), None, torch.tensor(0.5))  # finite: nothing happens
    with pytest.raises(NonFiniteLossError, match=f"loss became {kind} at global step 7"):
        guard.on_before_backward(_fake_trainer(7), None, torch.tensor(value))
    NaNGuard(enabled=False).on_before_backward(_fake_trainer(7), None, torch.tensor(value))


def test_rng_state_round_trips_through_a_weights_only_checkpoint(tmp_path):
    cb = RNGStateCallback()
    torch.manual_seed(1)
    np.random.seed(1)
    random.seed(1)
    torch.save(cb.state_dict(), tmp_path / "rng.pt")
    expected = (torch.rand(3), np.random.rand(3), random.random())
    torch.manual_seed(99)
    np.random.seed(99)
    random.seed(99)
    cb.load_state_dict(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert torch.equal(torch.rand(3), expected[0])
    assert np.array_equal(np.random.rand(3), expected[1]) and random.random() == expected[2]


def test_sanity_check_does_not_consume_rng():
    cb = RNGStateCallback()
    torch.manual_seed(3)
    cb.on_sanity_check_start(None, None)
    torch.rand(10)  # what a validation DataLoader iterator would draw
    cb.on_sanity_check_end(None, None)
    after = torch.rand(2)
    torch.manual_seed(3)
    assert torch.equal(torch.rand(2), after)


def _write(writer, trainer, batches):
    writer.on_predict_start(trainer, None)
    start = 0
    for i, out in enumerate(batches):
        indices = list(range(start, start + len(out)))
        writer.write_on_batch_end(trainer, None, out, indices, None, i, 0)
        start += len(out)
    writer.on_predict_end(trainer, None)


def _read(path):
    with open(path) as f:
        return list(csv.reader(f))


def test_csv_writer_classification_and_raw(tmp_path):
    trainer = _fake_trainer(0)
    probs = [torch.tensor([[0.1, 0.9], [0.7, 0.3]]), torch.tensor([[0.2, 0.8]])]
    writer = CSVPredictionWriter(tmp_path / "p.csv")
    _write(writer, trainer, probs)
    rows = _read(tmp_path / "p.csv")
    assert rows == [
        ["index", "prediction", "probability"],
        ["0", "1", "0.900000"],
        ["1", "0", "0.700000"],
        ["2", "1", "0.800000"],
    ]
    _write(CSVPredictionWriter(tmp_path / "r.csv"), trainer, [torch.tensor([[2.0, -1.0]])])
    rows = _read(tmp_path / "r.csv")
    assert rows == [["index", "output_0", "output_1"], ["0", "2", "-1"]]


@pytest.mark.gpu
@RunIf(min_cuda_gpus=1)
@pytest.mark.parametrize("value, kind", [(float("nan"), "NaN"), (float("inf"), "inf")])
def test_nan_guard_on_the_gpu_checks_without_a_sync_and_names_the_bad_step(value, kind):
    guard = NaNGuard()
    # the losses exist before the check starts: a tensor made from a Python number is a copy that waits
    good, bad = torch.tensor(0.5, device="cuda"), torch.tensor(value, device="cuda")
    torch.cuda.set_sync_debug_mode("error")  # any host-device wait in the step path raises
    try:
        guard.on_before_backward(_fake_trainer(5), None, good)
        guard.on_before_backward(_fake_trainer(6), None, bad)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    with pytest.raises(
        NonFiniteLossError, match=f"loss became {kind} at global step 6 .*before any checkpoint"
    ):
        guard.on_save_checkpoint(_fake_trainer(7), None, {})  # a save waits for the verdict first


@pytest.mark.gpu
@RunIf(min_cuda_gpus=1)
def test_nan_guard_on_the_gpu_lets_finite_losses_through():
    guard = NaNGuard()
    for step in range(4):
        guard.on_before_backward(_fake_trainer(step), None, torch.tensor(0.5, device="cuda"))
    guard.on_train_end(_fake_trainer(4), None)  # waits for all verdicts: none is bad
    assert not guard._pending

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
        max_epochs=3,
        num_training_batches=10,
        checkpoint_callbacks=[],
        fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(batch_idx=3)),
        is_global_zero=True,
    )


@pytest.mark.parametrize("value, kind", [(float("nan"), "NaN"), (float("inf"), "inf")])
def test_nan_guard_names_the_step(value, kind):
    guard = NaNGuard()
    guard.on_before_backward(_fake_trainer(7), None, torch.tensor(0.5))  # finite: nothing happens
    with pytest.raises(NonFiniteLossError) as info:
        guard.on_before_backward(_fake_trainer(7), None, torch.tensor(value))
    # the progress lines' numbering (issue 47): epochs from 1 of N, the batch in progress of B
    assert str(info.value).startswith(f"loss became {kind} at step 7 (epoch 1/2 batch 4/10); ")
    NaNGuard(enabled=False).on_before_backward(_fake_trainer(7), None, torch.tensor(value))


@pytest.mark.parametrize("fresh", [False, True])
def test_nan_guard_blames_the_checkpoint_in_the_first_steps_after_a_resume(fresh):
    guard = NaNGuard()
    trainer = _fake_trainer(5)
    trainer.callbacks, trainer.ckpt_path = [], "runs/x/last.ckpt"  # Lightning's: the checkpoint restored
    trainer.strategy = SimpleNamespace(checkpoint_io=SimpleNamespace(fresh_optimizer=fresh))
    guard.on_train_start(trainer, None)
    last = 5 + NaNGuard.RESUMED_STEPS - 1  # the window: the first RESUMED_STEPS optimizer steps
    for step in (6, last):
        with pytest.raises(NonFiniteLossError) as info:
            guard.on_before_backward(_fake_trainer(step), None, torch.tensor(float("inf")))
        line = str(info.value)
        assert "after resuming from runs/x/last.ckpt" in line and "learning rate" not in line, line
        assert ("--fresh_optimizer true" in line) is not fresh and "an earlier checkpoint" in line, line
    with pytest.raises(NonFiniteLossError, match="; try a lower learning rate") as info:
        guard.on_before_backward(_fake_trainer(last + 1), None, torch.tensor(float("inf")))
    assert "resuming" not in str(info.value)


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
    with pytest.raises(NonFiniteLossError, match=f"loss became {kind} at step 6 .*before any checkpoint"):
        guard.on_save_checkpoint(_fake_trainer(7), None, {})  # a save waits for the verdict first


@pytest.mark.gpu
@RunIf(min_cuda_gpus=1)
def test_nan_guard_on_the_gpu_lets_finite_losses_through():
    guard = NaNGuard()
    losses = torch.rand(150, device="cuda")  # more steps than the verdict ring has slots
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(150):
            guard.on_before_backward(_fake_trainer(step), None, losses[step])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    guard.on_train_end(_fake_trainer(150), None)  # waits for all verdicts: none is bad
    assert not guard._verdicts


def test_nan_guard_verdict_ring_reads_landed_bytes_and_names_nan_or_inf():
    from lit_gpu.callbacks.nan_guard import _Verdicts

    verdicts = _Verdicts(torch.device("cpu"), size=3, pin=False)  # CPU copies land at once
    losses = [0.5, float("nan"), 1.0, float("inf"), 2.0, 3.0, 4.0]  # more than a ring: slots reused
    for step, value in enumerate(losses):
        verdicts.push(torch.tensor(value), (step, 0, step))
        assert verdicts.arrived()
        assert verdicts.pop() == ((step, 0, step), {1: "NaN", 3: "inf"}.get(step))
    assert not verdicts and not verdicts.arrived()
    verdicts.push(torch.tensor([1.0, float("inf")]), (9, 0, 9))  # a loss with several elements
    assert verdicts.pop() == ((9, 0, 9), "inf")


def test_nan_guard_verdict_ring_tells_a_copy_in_flight_and_waits_only_for_it(monkeypatch):
    from lit_gpu.callbacks.nan_guard import _Verdicts

    verdicts = _Verdicts(torch.device("cpu"), size=2, pin=False)
    verdicts.push(torch.tensor(0.5), (0, 0, 0))
    verdicts.push(torch.tensor(float("nan")), (1, 0, 1))
    assert verdicts.full()
    with pytest.raises(RuntimeError, match="full"):  # a slot is never overwritten before it is read
        verdicts.push(torch.tensor(0.5), (2, 0, 2))
    landed = verdicts._host.copy()
    verdicts._host[:] = _Verdicts.PENDING  # as if both copies were still in flight
    assert not verdicts.arrived()
    waits = []

    def wait():  # what the device does: the queued copies land
        waits.append(len(verdicts))
        verdicts._host[:] = landed

    monkeypatch.setattr(verdicts, "_wait", wait)
    assert verdicts.pop() == ((0, 0, 0), None) and waits == [2]
    assert verdicts.arrived() and verdicts.pop() == ((1, 0, 1), "NaN") and waits == [2]


def test_nan_guard_on_a_device_checks_landed_verdicts_and_waits_only_when_a_ring_behind(monkeypatch):
    from lit_gpu.callbacks import nan_guard

    made = []

    class CpuVerdicts(nan_guard._Verdicts):  # the GPU path's bookkeeping, with copies that land at once
        def __init__(self, device):
            super().__init__(device, size=2, pin=False)
            made.append(self)

    monkeypatch.setattr(nan_guard, "_Verdicts", CpuVerdicts)
    guard = NaNGuard()
    monkeypatch.setattr(torch.Tensor, "device", property(lambda t: torch.device("cuda", 0)))
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda t: True))
    try:
        for step in range(3):
            guard.on_before_backward(_fake_trainer(step), None, torch.tensor(0.5))
        guard.on_before_backward(_fake_trainer(3), None, torch.tensor(float("inf")))
    finally:
        monkeypatch.undo()
    assert len(made) == 1 and len(made[0]) == 1  # landed verdicts were read at the next step
    with pytest.raises(NonFiniteLossError, match="loss became inf at step 3 .*before any checkpoint"):
        guard.on_train_end(_fake_trainer(4), None)
    assert not made[0]

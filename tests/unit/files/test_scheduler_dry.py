"""A checkpoint's scheduler state steps once on a stand-in optimizer before the restore (red team wt-rt2):
a state torch's ``step()`` ends on is one line, not a traceback at the first step of the resumed fit."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from lit_gpu.files.optimizer_fit import scheduler_problem

S = torch.optim.lr_scheduler


def _optimizer() -> torch.optim.Optimizer:
    torch.manual_seed(0)
    return torch.optim.SGD(torch.nn.Linear(3, 2).parameters(), lr=0.1, momentum=0.9)


MAKE = {
    "OneCycleLR": lambda o: S.OneCycleLR(o, max_lr=0.1, total_steps=20),
    "CosineAnnealingWarmRestarts": lambda o: S.CosineAnnealingWarmRestarts(o, T_0=5),
    "CyclicLR": lambda o: S.CyclicLR(o, 0.01, 0.1, step_size_up=4),
}
FORGED = {
    "OneCycleLR past its total_steps": ("OneCycleLR", "last_epoch", 10**9, "Tried to step"),
    "OneCycleLR's unknown anneal function": ("OneCycleLR", "_anneal_func_type", "evil", "anneal"),
    "a warm restart period of 0": ("CosineAnnealingWarmRestarts", "T_i", 0, "ZeroDivisionError"),
    "a cycle of size 0": ("CyclicLR", "total_size", 0, "ZeroDivisionError"),
}


def _stepped(name: str):
    optimizer = _optimizer()
    scheduler = MAKE[name](optimizer)
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    return scheduler


@pytest.mark.parametrize("case", sorted(FORGED))
def test_a_state_the_schedulers_step_ends_on_is_one_line(case):
    """Before: accepted; the resumed fit's first step ended in ValueError / ZeroDivisionError."""
    name, key, value, said = FORGED[case]
    saved = copy.deepcopy(_stepped(name).state_dict())
    saved[key] = value
    built = MAKE[name](_optimizer())
    before = copy.deepcopy(built.state_dict())
    problem = scheduler_problem(saved, built)
    assert problem is not None and said in problem and "\n" not in problem
    assert built.state_dict() == before  # the probe steps a copy
    assert built.optimizer.param_groups[0]["lr"] == pytest.approx(built.get_last_lr()[0])


class _Module:
    """A LightningModule's schedule as a bound method (``LambdaLR(opt, self.schedule)``), with numpy."""

    def __init__(self) -> None:
        self.weights = torch.zeros(10)

    def schedule(self, step: int) -> float:
        return float(0.5 * (1 + np.cos(np.pi * min(step, 10) / 10)))


def test_a_schedule_of_a_modules_bound_method_steps_without_copying_the_module(monkeypatch):
    module = _Module()
    optimizer = _optimizer()
    scheduler = S.LambdaLR(optimizer, module.schedule)
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    copied = []
    monkeypatch.setattr(_Module, "__deepcopy__", lambda self, memo: copied.append(1) or self, raising=False)
    monkeypatch.setattr(_Module, "__copy__", lambda self: copied.append(1) or self, raising=False)
    built = S.LambdaLR(_optimizer(), _Module().schedule)
    assert scheduler_problem(scheduler.state_dict(), built) is None
    assert not copied
    assert math.isclose(built.get_last_lr()[0], 0.1)


def test_a_users_own_step_is_not_run_for_the_probe():
    """A scheduler whose ``step()`` is the user's (it may log or write) is not stepped by the check."""
    calls = []

    class Logged(S.StepLR):
        def step(self, epoch=None):
            calls.append(epoch)
            super().step()

    optimizer = _optimizer()
    saved = Logged(optimizer, 2).state_dict()
    assert scheduler_problem(saved, Logged(_optimizer(), 2)) is None
    assert len(calls) == 2  # the two constructors' own first steps, none for the probe

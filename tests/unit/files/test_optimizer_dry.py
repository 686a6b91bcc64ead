"""A checkpoint's param-group settings and state values run through the optimizer's own checks (red team
wt-rt2): what torch's ``__init__`` refuses, what its step ends on, and non-finite state are one line before
any restore; the settings and values real checkpoints hold are accepted."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from lit_gpu.files.optimizer_fit import optimizer_problem


def _stepped(cls: type, **kwargs: Any) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 3)
    optimizer = cls(net.parameters(), lr=0.01, **kwargs)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = net(torch.ones(5, 4)).pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return net, optimizer


def _group(key: str, value: Any) -> Callable[[dict], None]:
    return lambda saved: saved["param_groups"][0].__setitem__(key, value)


def _state(key: str, make: Callable[[Any], Any]) -> Callable[[dict], None]:
    def change(saved: dict) -> None:
        for values in saved["state"].values():
            values[key] = make(values[key])

    return change


FORGED = {
    "negative lr": (torch.optim.Adam, {}, _group("lr", -1.0), "Invalid learning rate"),
    "lr past float32": (torch.optim.Adam, {}, _group("lr", 1e300), "fails to step"),
    "beta above 1": (torch.optim.Adam, {}, _group("betas", (0.9, 1.5)), "Invalid beta"),
    "negative beta": (torch.optim.Adam, {}, _group("betas", (-0.5, 0.999)), "Invalid beta"),
    "negative eps": (torch.optim.Adam, {}, _group("eps", -1e-8), "Invalid epsilon"),
    "negative weight decay": (torch.optim.AdamW, {}, _group("weight_decay", -1.0), "weight_decay"),
    "capturable on a CPU": (torch.optim.Adam, {}, _group("capturable", True), "fails to step"),
    "nesterov with dampening": (
        torch.optim.SGD,
        {"momentum": 0.9, "nesterov": True},
        _group("dampening", 0.5),
        "Nesterov",
    ),
    "negative momentum": (torch.optim.SGD, {"momentum": 0.9}, _group("momentum", -0.5), "momentum"),
    "Rprop etas swapped": (torch.optim.Rprop, {}, _group("etas", (2.0, 0.5)), "Invalid eta"),
    "Adafactor beta2_decay": (torch.optim.Adafactor, {}, _group("beta2_decay", 5.0), "beta2_decay"),
    "exp_avg None": (torch.optim.Adam, {}, _state("exp_avg", lambda v: None), "is None"),
    "exp_avg NaN": (torch.optim.Adam, {}, _state("exp_avg", lambda v: v * float("nan")), "NaN or infinite"),
    "exp_avg_sq inf": (torch.optim.Adam, {}, _state("exp_avg_sq", lambda v: v + float("inf")), "NaN or inf"),
}


@pytest.mark.parametrize("case", sorted(FORGED))
def test_a_forged_setting_or_state_is_one_line_before_the_restore(case):
    """Before: each passed the check and ended in a traceback at the first step (``value cannot be
    converted to type float without overflow``, ``'NoneType' object has no attribute 'lerp_'``) or trained
    with what torch's ``__init__`` refuses (gradient ascent at lr=-1, NaN weights)."""
    cls, kwargs, change, said = FORGED[case]
    _, optimizer = _stepped(cls, **kwargs)
    saved = copy.deepcopy(optimizer.state_dict())
    change(saved)
    problem = optimizer_problem(saved, _stepped(cls, **kwargs)[1])
    assert problem is not None and said in problem and "\n" not in problem


LEGITIMATE = {
    "a name key in the groups": _group("name", "encoder"),
    "numpy lr and step": lambda saved: (
        saved["param_groups"][0].__setitem__("lr", np.float32(0.01)),
        _state("step", lambda v: np.int64(int(v)))(saved),
    ),
    "an older torch's groups": lambda saved: [
        saved["param_groups"][0].pop(k, None) for k in ("decoupled_weight_decay", "differentiable", "fused")
    ],
    "a scheduler's initial_lr": _group("initial_lr", 0.01),
    "maximize switched on": _group("maximize", True),
    "a tensor lr": _group("lr", torch.tensor(0.01)),
}


@pytest.mark.parametrize("case", sorted(LEGITIMATE))
@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.AdamW])
def test_settings_real_checkpoints_hold_are_accepted(case, cls):
    _, optimizer = _stepped(cls)
    saved = copy.deepcopy(optimizer.state_dict())
    LEGITIMATE[case](saved)
    assert optimizer_problem(saved, _stepped(cls)[1]) is None


def test_sgd_without_momentum_keeps_a_none_buffer_the_config_with_momentum_reads():
    """A checkpoint of SGD(momentum=0) resumed by a config with momentum: torch loads the saved group."""
    _, plain = _stepped(torch.optim.SGD)
    assert optimizer_problem(plain.state_dict(), _stepped(torch.optim.SGD, momentum=0.9)[1]) is None


@pytest.mark.parametrize("key", ["max_iter", "max_eval", "history_size"])
def test_lbfgs_integer_settings_above_the_configs_are_refused(key):
    """A file's max_iter=10**9 would make each step run 10**9 evaluations (torch loads the saved group): the
    config's value bounds it; at or below it (a config raised since) LBFGS resumes."""
    _, lbfgs = _stepped(torch.optim.LBFGS)
    saved = copy.deepcopy(lbfgs.state_dict())
    saved["param_groups"][0][key] = 10**9
    problem = optimizer_problem(saved, _stepped(torch.optim.LBFGS)[1])
    assert problem is not None and f"{key}=1000000000 above the config's" in problem
    saved["param_groups"][0][key] = lbfgs.param_groups[0][key]
    assert optimizer_problem(saved, _stepped(torch.optim.LBFGS, **{key: 200})[1]) is None


def test_lbfgs_negative_tolerances_run_every_iteration_within_the_bound():
    """Negative tolerances only turn LBFGS's early exits off: its iterations stay the config's max_iter."""
    _, lbfgs = _stepped(torch.optim.LBFGS)
    saved = copy.deepcopy(lbfgs.state_dict())
    saved["param_groups"][0].update(tolerance_grad=-1.0, tolerance_change=-1.0)
    assert optimizer_problem(saved, _stepped(torch.optim.LBFGS)[1]) is None


@pytest.mark.parametrize(
    ("saved_from", "built_from"), [("parameters", "named_parameters"), ("named_parameters", "parameters")]
)
def test_param_names_are_optional_as_torch_loads_them(saved_from, built_from):
    """Before: an optimizer saved from ``parameters()`` (or by torch < 2.6) resumed by a config that builds
    it from ``named_parameters()`` was refused ("lacks param_names"); torch's ``load_state_dict`` keeps the
    optimizer's own names when the saved group has none (torch/optim/optimizer.py, ``param_names``)."""
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 3)
    saved = torch.optim.Adam(getattr(net, saved_from)(), lr=0.01)
    net(torch.ones(2, 4)).sum().backward()
    saved.step()
    built = torch.optim.Adam(getattr(net, built_from)(), lr=0.01)
    assert optimizer_problem(saved.state_dict(), built) is None
    built.load_state_dict(saved.state_dict())  # and torch loads it


def _lbfgs_run(steps: int, target: float, **settings: Any) -> torch.optim.LBFGS:
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.ones(3, 4))
    lbfgs = torch.optim.LBFGS([weight], **settings)

    def closure() -> torch.Tensor:
        lbfgs.zero_grad()
        loss = (weight - target).pow(2).sum()
        loss.backward()
        return loss

    for _ in range(steps):
        lbfgs.step(closure)
    return lbfgs


@pytest.mark.parametrize(
    ("steps", "target", "settings", "keys"),
    [
        (3, 2.0, {"max_iter": 1}, {"al"}),  # al from its second iteration: the second step's
        (1, 2.0, {"max_iter": 1}, set()),
        (2, 1.0, {}, set()),  # its first gradient is 0: func_evals and n_iter alone
        (4, 2.0, {"max_iter": 2, "line_search_fn": "strong_wolfe"}, {"al"}),
    ],
)
def test_lbfgs_states_written_before_their_names_settle_fit(steps, target, settings, keys):
    """Before: LBFGS(max_iter=1) resumed after its second step was refused ("holds al, unlike the config's":
    the dry run's one step had one iteration), and a run whose first gradient was within tolerance_grad
    ("lacks d, t, ..."). Its state names come with its iterations: one step, two, or none from a zero
    gradient are all torch's."""
    saved = _lbfgs_run(steps, target, **settings).state_dict()
    assert keys <= set(saved["state"][0])
    assert optimizer_problem(saved, _lbfgs_run(0, target, **settings)) is None
    _lbfgs_run(0, target, **settings).load_state_dict(saved)


def test_a_state_lacking_a_name_its_first_step_writes_is_still_refused():
    """What a zero gradient or one step leaves out is LBFGS's only: Adam without exp_avg_sq stays refused."""
    _, adam = _stepped(torch.optim.Adam)
    saved = copy.deepcopy(adam.state_dict())
    del saved["state"][0]["exp_avg_sq"]
    assert "lacks exp_avg_sq" in optimizer_problem(saved, _stepped(torch.optim.Adam)[1])

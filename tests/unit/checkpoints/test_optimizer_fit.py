"""The optimizer's and scheduler's saved states against the ones the config builds (issue 56): every class
torch ships fits itself; a change is named; nothing is a fixed list of names."""

from __future__ import annotations

import pytest
import torch

from lit_gpu.checkpoints.contracts import ContractError
from lit_gpu.checkpoints.optimizer import (
    check_optimizers,
    optimizer_problem,
    saved_optimizer_name,
    scheduler_problem,
)
from tests.helpers.optim_matrix import SparseLinear, _optimizer, _scheduler, optimizer_names, scheduler_names


def _net(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if name == "SparseAdam":
        return SparseLinear(4)
    return torch.nn.Sequential(torch.nn.Linear(3, 4, bias=name != "Muon"), torch.nn.Linear(4, 2, bias=False))


def _stepped(name: str, steps: int = 3) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    net = _net(name)
    optimizer = _optimizer(name, net.parameters())
    width = 4 if name == "SparseAdam" else 3

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = net(torch.ones(2, width)).pow(2).sum()
        loss.backward()
        return loss

    for _ in range(steps):
        optimizer.step(closure)
    return net, optimizer


@pytest.mark.parametrize("name", optimizer_names())
def test_every_torch_optimizers_state_fits_the_optimizer_the_config_builds(name):
    """Adafactor's ``eps=(None, 1e-3)`` and factored state, LBFGS's ``func_evals``, Muon, SparseAdam."""
    _, optimizer = _stepped(name)
    built = _optimizer(name, _net(name).parameters())
    assert optimizer_problem(optimizer.state_dict(), built) is None
    assert name in saved_optimizer_name(optimizer.state_dict())


@pytest.mark.parametrize("name", scheduler_names())
def test_every_torch_schedulers_state_fits_the_scheduler_the_config_builds(name):
    optimizer = torch.optim.SGD(_net("SGD").parameters(), lr=0.1, momentum=0.9)
    scheduler = _scheduler(name, optimizer)
    for _ in range(3):
        optimizer.step()
        scheduler.step(1.0) if isinstance(
            scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau
        ) else scheduler.step()
    built = _scheduler(name, torch.optim.SGD(_net("SGD").parameters(), lr=0.1, momentum=0.9))
    assert scheduler_problem(scheduler.state_dict(), built) is None


def test_another_optimizer_is_named_with_what_differs():
    _, sgd = _stepped("SGD")
    problem = optimizer_problem(sgd.state_dict(), torch.optim.Adam(_net("Adam").parameters()))
    assert problem == (
        "param group 0 holds dampening, momentum, nesterov and lacks betas, eps, "
        "which the config's optimizer reads"
    )
    with pytest.raises(ContractError) as info:
        check_optimizers(
            {"optimizer_states": [sgd.state_dict()]},
            [torch.optim.Adam(_net("Adam").parameters())],
            [],
            "ckpt",
        )
    line = str(info.value)
    assert "the checkpoint holds the state of SGD, the config builds Adam" in line and "\n" not in line
    assert "--fresh_optimizer true" in line


def test_groups_of_another_torch_release_fit_as_torch_loads_them():
    """Keys a later torch added (Adam's ``decoupled_weight_decay``, ``fused``...) are filled in by the class's
    ``__setstate__`` when a saved group lacks them; keys the built class does not read are kept, unread."""
    _, adam = _stepped("Adam")
    older = adam.state_dict()
    for key in ("decoupled_weight_decay", "fused", "capturable", "differentiable", "foreach", "amsgrad"):
        del older["param_groups"][0][key]
    assert optimizer_problem(older, torch.optim.Adam(_net("Adam").parameters())) is None
    newer = adam.state_dict()
    newer["param_groups"][0]["a_flag_of_a_later_release"] = True
    assert optimizer_problem(newer, torch.optim.Adam(_net("Adam").parameters())) is None


def test_a_param_group_more_or_less_is_named():
    _, sgd = _stepped("SGD")
    net = _net("SGD")
    two = torch.optim.SGD([{"params": [p]} for p in net.parameters()], lr=0.01, momentum=0.9)
    assert optimizer_problem(sgd.state_dict(), two) == "1 param groups, where the config builds 3"


def test_a_changed_flag_is_the_checkpoints_as_torch_loads_it():
    """amsgrad=True in the config: torch's load_state_dict takes the saved group's amsgrad=False."""
    from lit_gpu.checkpoints.optimizer import watch

    _, adam = _stepped("Adam")
    net = _net("Adam")
    built = torch.optim.Adam(net.parameters(), amsgrad=True)
    assert optimizer_problem(adam.state_dict(), built) is None
    watch(built, "ckpt")
    built.load_state_dict(adam.state_dict())
    net(torch.ones(2, 3)).pow(2).sum().backward()
    built.step()
    assert built.param_groups[0]["amsgrad"] is False


def test_a_changed_schedule_setting_is_named_not_taken_from_the_checkpoint():
    def one_cycle(total: int) -> torch.optim.lr_scheduler.OneCycleLR:
        optimizer = torch.optim.SGD(_net("SGD").parameters(), lr=0.1)
        return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=total)

    problem = scheduler_problem(one_cycle(8).state_dict(), one_cycle(16))
    assert problem == "total_steps=8, where the config's OneCycleLR has total_steps=16"
    # a state more or less is zipped away, as Lightning's restore does (SWA's SWALR, the config builds none)
    check_optimizers({"optimizer_states": [], "lr_schedulers": [one_cycle(8).state_dict()]}, [], [], "ckpt")


def test_numpy_numbers_in_the_state_are_numbers():
    """A LambdaLR of ``np.cos`` leaves numpy.float64 learning rates in the groups and the scheduler."""
    _, sgd = _stepped("SGD")
    scheduler = _scheduler("LambdaLR", sgd)
    sgd.step()
    scheduler.step()
    assert type(sgd.param_groups[0]["lr"]).__module__ == "numpy"
    fresh = torch.optim.SGD(_net("SGD").parameters(), lr=0.01, momentum=0.9)
    fresh_scheduler = _scheduler("LambdaLR", fresh)  # adds initial_lr to the groups, as the saved one did
    assert optimizer_problem(sgd.state_dict(), fresh) is None
    assert scheduler_problem(scheduler.state_dict(), fresh_scheduler) is None


class NeedsArguments(torch.optim.SGD):
    def __init__(self, params, required_setting: float) -> None:
        super().__init__(params, lr=required_setting)


def test_a_foreign_optimizer_that_cannot_be_made_again_is_checked_by_its_groups():
    net = _net("SGD")
    mine = NeedsArguments(net.parameters(), 0.1)
    net(torch.ones(1, 3)).sum().backward()
    mine.step()
    assert optimizer_problem(mine.state_dict(), NeedsArguments(_net("SGD").parameters(), 0.1)) is None


def test_complex_parameters_keep_complex_state():
    def adam() -> torch.optim.Adam:
        return torch.optim.Adam([torch.nn.Parameter(torch.zeros(3, 2, dtype=torch.complex64))])

    optimizer = adam()
    (optimizer.param_groups[0]["params"][0].abs() ** 2).sum().backward()
    optimizer.step()
    saved = optimizer.state_dict()
    assert optimizer_problem(saved, adam()) is None
    saved["state"][0]["exp_avg"] = "a str"
    assert "not a value an optimizer keeps" in optimizer_problem(saved, adam())


def test_a_plateau_schedulers_nan_best_is_refused_its_inf_best_kept():
    """``best`` starts at inf and a NaN metric never replaces it (``is_better`` is False): a NaN ``best`` is
    a forgery after which every epoch counts as bad and the learning rate falls whatever the metric."""
    optimizer = torch.optim.SGD(_net("SGD").parameters(), lr=0.1)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    plateau.step(float("nan"))  # a NaN metric, as a diverged validation gives
    built = torch.optim.lr_scheduler.ReduceLROnPlateau(torch.optim.SGD(_net("SGD").parameters(), lr=0.1))
    state = plateau.state_dict()
    assert state["best"] == float("inf") and scheduler_problem(state, built) is None
    state["best"] = float("nan")
    assert "'best'] = nan, not a number" in scheduler_problem(state, built)


def test_a_progress_counter_in_a_param_group_is_not_a_setting():
    """timm's Lookahead keeps ``lookahead_step`` in each group: a count that grows, not an argument."""
    net = _net("Adam")
    adam = torch.optim.Adam(net.parameters())
    saved = adam.state_dict()
    saved["param_groups"][0]["lookahead_step"] = 4
    built = torch.optim.Adam(_net("Adam").parameters())
    built.param_groups[0]["lookahead_step"] = 0
    assert optimizer_problem(saved, built) is None


def test_an_integer_setting_above_the_configs_is_named():
    """LBFGS's ``max_iter=10**9`` would make one step run without end."""
    _, lbfgs = _stepped("LBFGS")
    saved = lbfgs.state_dict()
    saved["param_groups"][0]["max_iter"] = 10**9
    problem = optimizer_problem(saved, _optimizer("LBFGS", _net("LBFGS").parameters()))
    assert problem.startswith("param group 0 has max_iter=1000000000 above the config's 3")


def test_a_value_of_another_kind_than_the_other_parameters_is_named():
    _, adam = _stepped("Adam")
    saved = adam.state_dict()
    saved["state"][0]["exp_avg"] = None
    assert (
        "state[0]['exp_avg'] is None, where state[1] holds a float tensor shaped as its parameter"
        in optimizer_problem(saved, torch.optim.Adam(_net("Adam").parameters()))
    )


def test_a_failing_restore_or_first_step_is_one_line():
    from lit_gpu.checkpoints.optimizer import watch

    _, adam = _stepped("Adam")
    saved = adam.state_dict()
    built = torch.optim.Adam(_net("Adam").parameters())
    watch(built, "ckpt")
    saved["param_groups"][0]["params"] = saved["param_groups"][0]["params"][:1]
    with pytest.raises(ContractError, match=r"^ckpt: .*ValueError.*--fresh_optimizer true"):
        built.load_state_dict(saved)
    assert "load_state_dict" not in vars(built)  # one call watched

    sgd = torch.optim.SGD(_net("SGD").parameters(), lr=0.1, momentum=0.9)
    watch(sgd, "ckpt")
    sgd.state[sgd.param_groups[0]["params"][0]]["momentum_buffer"] = "forged"
    for p in sgd.param_groups[0]["params"]:
        p.grad = torch.ones_like(p)
    with pytest.raises(ContractError, match="AttributeError"):
        sgd.step()

    def user_bug() -> torch.Tensor:
        raise KeyError("the user's step")

    sgd = torch.optim.SGD(_net("SGD").parameters(), lr=0.1)
    watch(sgd, "ckpt")
    with pytest.raises(KeyError):  # raised inside the closure: the user's, with its traceback
        sgd.step(user_bug)


def test_a_watched_schedulers_state_stays_plain_data():
    """A scheduler's state_dict is its __dict__: a save before its first step after the restore (a stop at
    once, an epoch-interval schedule) must not hold the watching method (weights-only reads refuse it)."""
    import io

    from lit_gpu.checkpoints.optimizer import watch

    sgd = torch.optim.SGD(_net("SGD").parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(sgd, 2)
    plain = scheduler.state_dict()
    watch(scheduler, "ckpt")
    assert scheduler.state_dict() == plain
    buffer = io.BytesIO()
    torch.save(scheduler.state_dict(), buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True) == plain

"""Restored state has a contract: declared next to each restore, all checked before the first restore."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from lit_gpu.checkpoints import contracts as c
from lit_gpu.checkpoints.contracts import ContractError, check_contracts
from lit_gpu.checkpoints.optimizer import optimizer_problem, scheduler_problem

PACKAGE = Path(__file__).resolve().parents[3] / "lit_gpu"
RESTORES = ("load_state_dict", "on_load_checkpoint")


def _restoring_classes() -> list[tuple[str, str, set[str]]]:
    """``(file, class, methods)`` of every class in lit_gpu that defines a restore."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
                if methods & set(RESTORES):
                    found.append((str(path.relative_to(PACKAGE.parent)), node.name, methods))
    return found


def test_every_restore_of_lit_gpu_declares_its_contract():
    classes = _restoring_classes()
    assert len(classes) >= 7  # modules, callbacks, loaders, the sweep's pruning callback
    missing = [f"{file}: {name}" for file, name, methods in classes if "restore_contract" not in methods]
    assert not missing, f"a load_state_dict/on_load_checkpoint without a restore_contract: {missing}"


def test_no_function_outside_a_class_restores_state():
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        top = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in RESTORES]
        if (
            path != PACKAGE / "checkpoints" / "load.py"
        ):  # lit_gpu.checkpoints.load_state_dict reads, it restores nothing
            assert not top, f"{path}: {top}"


def test_a_mismatch_is_one_line_naming_the_key_what_it_holds_and_what_was_expected():
    spec = c.fields({"count": c.integer(0, 10), "sum": c.tensor((), dtypes="float")})
    contract = c.Contract(("state", "acc"), spec, owner="MyModule")
    with pytest.raises(ContractError) as err:
        check_contracts({"state": {"acc": {"count": -1}}}, [contract], "checkpoint x.ckpt")
    line = str(err.value)
    assert "\n" not in line and "state.acc" in line and "-1" in line and "an int in [0, 10]" in line
    assert "MyModule" in line and "x.ckpt" in line


@pytest.mark.parametrize(
    ("value", "fits"),
    [
        (torch.zeros(()), True),
        (torch.zeros(3), False),
        (torch.zeros((), dtype=torch.int64), False),
        (torch.zeros(1).expand(4)[0], True),  # a 0-d view of one element is contiguous
        (torch.zeros(4, 4).t(), False),
        ("1.0", False),
        (torch.empty((), device="meta"), False),  # passes the scan, holds no data
    ],
)
def test_tensor_specs_check_shape_dtype_and_contiguity(value, fits):
    assert (c.tensor((), dtypes="float").problem(value) is None) == fits


def _adam_state(net: torch.nn.Module) -> dict:
    optimizer = torch.optim.Adam(net.parameters())
    net(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    return optimizer.state_dict()


def test_the_optimizer_state_is_held_against_the_optimizer_the_config_builds():
    net = torch.nn.Linear(3, 2)
    saved, built = _adam_state(net), torch.optim.Adam(net.parameters())
    assert optimizer_problem(saved, built) is None
    saved["state"][0]["exp_avg"] = torch.zeros(5)
    assert (
        "['exp_avg'] is a float tensor of another shape, where state[1] holds a float tensor shaped as"
        in optimizer_problem(saved, built)
    )
    saved["state"][0]["exp_avg"] = torch.zeros(3, 2)
    assert "state[0]['exp_avg'] is a float tensor of another shape" in optimizer_problem(saved, built)
    saved["state"][0]["exp_avg"] = torch.zeros(2, 3)
    saved["param_groups"][0]["lr"] = "0.1"
    assert "['lr'] is a str, where the config builds a scalar" in optimizer_problem(saved, built)


def test_a_meta_tensor_in_the_optimizer_state_is_refused_before_the_restore():
    """A checkpoint may rebuild a meta tensor (the scan allows torch's rebuild of one, it costs nothing);
    the optimizer's restore then fails copying out of it ("Cannot copy out of meta tensor")."""
    net = torch.nn.Linear(3, 2)
    saved = _adam_state(net)
    saved["state"][0]["exp_avg"] = torch.empty(2, 3, device="meta")
    assert "meta tensor" in optimizer_problem(saved, torch.optim.Adam(net.parameters()))


def test_the_logging_state_contract_knows_reductions_and_metric_names():
    import torchmetrics

    from lit_gpu.resume.state import logging_state_contract

    module = torch.nn.Module()
    module.acc = torchmetrics.MeanMetric()
    module.layer = torch.nn.Linear(1, 1)
    entry = {"key": "k", "reduce_fx": "mean", "is_tensor": True, "update_count": 1, "has_reset": False}
    entry |= {"metric_attribute": None, "value": torch.zeros(())}
    contracts = logging_state_contract(module)
    check_contracts({"lit_gpu_logging_state": {"results": [entry], "metrics": {}}}, contracts, "x")
    for bad, words in (
        ({"reduce_fx": "os.system"}, "reduce_fx"),
        ({"metric_attribute": "layer"}, "metric_attribute"),
        ({"value": "1"}, "value"),
    ):
        with pytest.raises(ContractError, match=words):
            check_contracts(
                {"lit_gpu_logging_state": {"results": [entry | bad], "metrics": {}}}, contracts, "x"
            )
    metrics = {"layer": {"states": {}, "update_count": 0}}
    with pytest.raises(ContractError, match="not a torchmetrics Metric"):
        check_contracts({"lit_gpu_logging_state": {"results": [], "metrics": metrics}}, contracts, "x")
    metrics = {"acc": {"states": {"mean_value": torch.zeros(3)}, "update_count": 0}}
    with pytest.raises(ContractError, match="mean_value"):
        check_contracts({"lit_gpu_logging_state": {"results": [], "metrics": metrics}}, contracts, "x")


def _step_lr_state() -> dict:
    net = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 3)
    optimizer.step()
    scheduler.step()
    return scheduler.state_dict()


def _step_lr() -> torch.optim.lr_scheduler.StepLR:
    return torch.optim.lr_scheduler.StepLR(torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1), 3)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"step": 1}, "holds step"),  # shadows the method: "'int' object is not callable" at the next step
        ({"optimizer": 5}, "holds optimizer"),  # replaces the scheduler's optimizer
        ({"__class__": 5}, "holds __class__"),
        ({"step_size": "3"}, "['step_size'] is a str"),  # "unsupported operand type(s) for %"
        ({"step_size": 0}, "step_size=0, where the config's StepLR has step_size=3"),  # modulo by zero
        ({"gamma": float("nan")}, "gamma"),
        ({"last_epoch": "x"}, "['last_epoch'] is a str"),
        ({"last_epoch": 2**70}, "['last_epoch'] = "),
        ({"last_epoch": -2}, "['last_epoch'] = -2"),
        ({"_step_count": -1}, "['_step_count'] = -1"),
        ({"base_lrs": ["a"]}, "['base_lrs'][0] is a str"),
        ({"_last_lr": "ab"}, "['_last_lr'] is a str"),
        ({"_last_lr": [torch.empty((), device="meta")]}, "not a number"),
        ({"_last_lr": [torch.tensor(float("inf"))]}, "not a finite number"),
        ({"custom": object()}, "holds custom"),
    ],
)
def test_a_forged_scheduler_state_is_refused_before_lightning_restores_it(change, named):
    """Lightning restores a scheduler by ``__dict__.update(state)``: each forged state here fails at the
    next ``scheduler.step()`` with a traceback (or replaces a setting); the built scheduler is the judge."""
    saved = _step_lr_state()
    assert scheduler_problem(saved, _step_lr()) is None
    problem = scheduler_problem({**saved, **change}, _step_lr())
    assert problem is not None and named in problem and "\n" not in problem


def test_the_states_of_torchs_schedulers_fit_the_schedulers_they_came_from():
    from torch.optim import lr_scheduler as schedulers

    optimizer = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1, momentum=0.9)
    made = [
        schedulers.MultiStepLR(optimizer, [2, 4]),
        schedulers.CosineAnnealingWarmRestarts(optimizer, 5),
        schedulers.LambdaLR(optimizer, lambda epoch: 1.0),
        schedulers.OneCycleLR(optimizer, 1.0, total_steps=100),
        schedulers.CyclicLR(optimizer, 0.01, 0.1),
        schedulers.ReduceLROnPlateau(optimizer),  # best = inf
        schedulers.SequentialLR(
            optimizer, [schedulers.StepLR(optimizer, 2), schedulers.ExponentialLR(optimizer, 0.9)], [3]
        ),
    ]
    for scheduler in made:
        assert scheduler_problem(scheduler.state_dict(), scheduler) is None, type(scheduler).__name__


@pytest.mark.parametrize(
    "steps",
    [{0: -1}, {"0": 2}, {0: 2.0}, {0: True}, {1000: 1}, {0: 2**62}, [2], "2", {i: 1 for i in range(1001)}],
    ids=["negative", "str key", "float", "bool", "index 1000", "2**62", "list", "str", "1001 loaders"],
)
def test_the_validation_counters_in_the_logging_callbacks_own_state_are_checked(steps):
    """The per-step validation rows' counters live in LoggingStateCallback's own state (the checkpoint's top
    level stays Lightning's); forged ones are one line before any restore."""
    from lit_gpu.resume.state import VAL_STEPS_KEY, LoggingStateCallback

    callback = LoggingStateCallback()
    contracts = callback.restore_contract(torch.nn.Module())
    own = {"callbacks": {callback.state_key: {VAL_STEPS_KEY: {0: 2, 1: 0}}}}
    check_contracts(own, contracts, "x.ckpt")
    with pytest.raises(ContractError, match=f"callbacks.{callback.state_key}.{VAL_STEPS_KEY}"):
        check_contracts({"callbacks": {callback.state_key: {VAL_STEPS_KEY: steps}}}, contracts, "x.ckpt")
    with pytest.raises(ContractError, match="LoggingStateCallback's state"):
        check_contracts({"callbacks": {callback.state_key: [1]}}, contracts, "x.ckpt")
    callback.load_state_dict({VAL_STEPS_KEY: {0: 2}})
    assert callback._val_steps == {0: 2}

"""The resumed fit's optimizers and schedulers: checked against the built ones, or started fresh."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lit_gpu.checkpoints.contracts import ContractError
from lit_gpu.checkpoints.optimizer import fit_optimizers


def _sgd_state() -> dict:
    net = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    return optimizer.state_dict()


def test_fresh_optimizer_puts_the_built_states_in_place_of_the_checkpoints():
    adam = torch.optim.Adam(torch.nn.Linear(3, 2).parameters())
    checkpoint = {"optimizer_states": [_sgd_state()], "lr_schedulers": []}
    trainer = SimpleNamespace(optimizers=[adam], lr_scheduler_configs=[])
    with pytest.raises(ContractError):
        fit_optimizers(trainer, checkpoint, "ckpt", fresh=False)  # type: ignore[arg-type]
    fit_optimizers(trainer, checkpoint, "ckpt", fresh=True)  # type: ignore[arg-type]
    assert checkpoint["optimizer_states"] == [adam.state_dict()]
    adam.load_state_dict(checkpoint["optimizer_states"][0])  # what Lightning then does: a no-op

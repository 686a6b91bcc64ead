"""Every optimizer in ``torch.optim`` and every scheduler in ``torch.optim.lr_scheduler``, by name, on a tiny
regression: what the resume matrix (tests/integration/test_optimizer_matrix.py) fits, stops and resumes.

:class:`MatrixRegression` builds the named optimizer and scheduler in ``configure_optimizers`` with the
arguments each needs (LambdaLR's function, SequentialLR's children, ReduceLROnPlateau's monitor), so that
schedulers whose arguments are Python callables run too. Its net suits the optimizer: Muon takes 2-D
parameters only (no bias), SparseAdam sparse gradients only (:class:`SparseLinear`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn
from torch.optim import lr_scheduler as S

from lit_gpu.modules import RegressionModule

FEATURES = 10
STEPS = 8  # configs/debug.yaml: 2 epochs of 4 batches


def optimizer_names() -> list[str]:
    """Every optimizer class ``torch.optim`` exports."""
    return sorted(
        n
        for n, c in vars(torch.optim).items()
        if isinstance(c, type) and issubclass(c, torch.optim.Optimizer) and c is not torch.optim.Optimizer
    )


def scheduler_names() -> list[str]:
    """Every scheduler class ``torch.optim.lr_scheduler`` exports (not the base classes)."""
    bases = (S.LRScheduler, S.ReduceLROnPlateau)
    names = {
        n
        for n, c in vars(S).items()
        if isinstance(c, type) and issubclass(c, bases) and not n.startswith("_") and c is not S.LRScheduler
    }
    return sorted(names)


class SparseLinear(nn.Module):
    """A linear map whose weight is an ``nn.Embedding(sparse=True)``: sparse gradients (SparseAdam)."""

    def __init__(self, features: int = FEATURES) -> None:
        super().__init__()
        self.rows = nn.Embedding(features, features, sparse=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.rows(torch.arange(self.rows.num_embeddings, device=x.device)).T


def cosine(epoch: int) -> float:
    """LambdaLR's factor, as UvA's tutorial writes it: numpy cosine (a numpy.float64 in the state)."""
    return 0.5 * (1 + np.cos(np.pi * epoch / STEPS))


def _optimizer(name: str, params: Any) -> torch.optim.Optimizer:
    cls = getattr(torch.optim, name)
    args: dict[str, Any] = {"lr": 0.01}
    if name == "SGD":
        args["momentum"] = 0.9
    if name == "LBFGS":
        args.update(lr=0.1, max_iter=3, history_size=4)
    if name == "Adafactor":
        args = {}  # its defaults: eps=(None, 1e-3)
    return cls(params, **args)


def _scheduler(name: str, optimizer: torch.optim.Optimizer, total_steps: int = STEPS) -> Any:
    cls = getattr(S, name)
    made: dict[str, Any] = {
        "LambdaLR": lambda: S.LambdaLR(optimizer, cosine),
        "MultiplicativeLR": lambda: S.MultiplicativeLR(optimizer, lambda epoch: 0.9),
        "StepLR": lambda: S.StepLR(optimizer, step_size=2, gamma=0.5),
        "MultiStepLR": lambda: S.MultiStepLR(optimizer, milestones=[2, 5], gamma=0.5),
        "ConstantLR": lambda: S.ConstantLR(optimizer, factor=0.5, total_iters=3),
        "LinearLR": lambda: S.LinearLR(optimizer, start_factor=0.3, total_iters=5),
        "ExponentialLR": lambda: S.ExponentialLR(optimizer, gamma=0.9),
        "PolynomialLR": lambda: S.PolynomialLR(optimizer, total_iters=6, power=2.0),
        "CosineAnnealingLR": lambda: S.CosineAnnealingLR(optimizer, T_max=STEPS),
        "CosineAnnealingWarmRestarts": lambda: S.CosineAnnealingWarmRestarts(optimizer, T_0=3, T_mult=2),
        "CyclicLR": lambda: S.CyclicLR(optimizer, base_lr=0.001, max_lr=0.01, step_size_up=3),
        "OneCycleLR": lambda: S.OneCycleLR(optimizer, max_lr=0.02, total_steps=total_steps),
        "ReduceLROnPlateau": lambda: S.ReduceLROnPlateau(optimizer, patience=0, factor=0.5),
        "SequentialLR": lambda: S.SequentialLR(
            optimizer,
            [S.ConstantLR(optimizer, factor=0.5, total_iters=2), S.ExponentialLR(optimizer, 0.9)],
            [3],
        ),
        "ChainedScheduler": lambda: S.ChainedScheduler(
            [S.ConstantLR(optimizer, factor=0.5, total_iters=2), S.ExponentialLR(optimizer, 0.9)]
        ),
    }
    if name not in made:
        raise ValueError(f"the matrix does not know how to build {cls.__name__}: add it to {__name__}")
    return made[name]()


class MatrixRegression(RegressionModule):
    """RegressionModule with ``torch.optim.<optimizer>`` and ``lr_scheduler.<scheduler>`` built by name."""

    def __init__(
        self,
        optimizer_name: str = "SGD",
        scheduler_name: str | None = None,
        total_steps: int = STEPS,
        groups: int = 1,
    ) -> None:
        if optimizer_name == "SparseAdam":
            net: nn.Module = SparseLinear()
        else:
            net = nn.Linear(FEATURES, FEATURES, bias=optimizer_name != "Muon")  # Muon: 2-D parameters
        super().__init__(net, scheduler_interval="step")
        self.optimizer_name = optimizer_name
        self.scheduler_name = scheduler_name
        self.total_steps = total_steps  # OneCycleLR's
        self.groups = groups  # 2: the weights and the biases in a param group each

    def configure_optimizers(self) -> Any:
        params: Any = self.parameters()
        if self.groups == 2:
            named = dict(self.named_parameters())
            params = [{"params": [p for n, p in named.items() if n.endswith(e)]} for e in ("weight", "bias")]
        optimizer = _optimizer(self.optimizer_name, params)
        if self.scheduler_name is None:
            return optimizer
        scheduler = _scheduler(self.scheduler_name, optimizer, self.total_steps)
        config = {"scheduler": scheduler, "interval": "step"}
        if isinstance(scheduler, S.ReduceLROnPlateau):
            config.update(monitor="val/loss", interval="epoch")
        return {"optimizer": optimizer, "lr_scheduler": config}


class TimmRegression(RegressionModule):
    """RegressionModule with timm's ``create_optimizer_v2(self, opt=...)`` (``lookahead_adamw``, ``kron``)."""

    def __init__(self, opt: str = "lookahead_adamw") -> None:
        super().__init__(nn.Linear(FEATURES, FEATURES))
        self.opt = opt

    def configure_optimizers(self) -> Any:
        from timm.optim import create_optimizer_v2

        return create_optimizer_v2(self, opt=self.opt, lr=0.01)

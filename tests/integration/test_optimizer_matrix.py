"""Every optimizer torch ships and every scheduler it ships: fit, stop, ``--ckpt_path last``, bit-exactly the
uninterrupted run; a changed optimizer, schedule or param-group layout is one line with the way forward.

The model is :class:`tests.helpers.optim_matrix.MatrixRegression` (configs/simple.yaml's data, debug.yaml's
2 epochs of 4 steps), run in this process (``lit_gpu.cli.main``): the stop is ``max_steps`` 5 (the
checkpoint a SIGTERM at step 5 leaves). The default tier runs a sample: Adafactor's ``eps=(None, 1e-3)``,
OneCycleLR, and a real SIGTERM (a forked process) of LBFGS with its closure and LambdaLR with a numpy
cosine; ``-m full`` runs all of them.
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.forked_cli import run_cli
from tests.helpers.optim_matrix import optimizer_names, scheduler_names
from tests.helpers.paths import CONFIGS

MODEL = "tests.helpers.optim_matrix.MatrixRegression"
SAMPLE = [("Adafactor", None), ("SGD", "OneCycleLR")]  # and LBFGS + LambdaLR: the SIGTERM test
CASES = [(name, None) for name in optimizer_names()] + [("SGD", name) for name in scheduler_names()]


def _args(optimizer: str, scheduler: str | None, *extra: str) -> list[str]:
    chosen = ["--model.scheduler_name", scheduler] if scheduler else []
    return [
        "fit", "--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml"),
        "--model", MODEL, "--model.optimizer_name", optimizer, *chosen, *extra,
    ]  # fmt: skip


def fit(folder: Path, args: list[str]) -> tuple[int, str]:
    """``lit-gpu ARGS`` in this process, in ``folder``: its exit status and what it wrote."""
    from lit_gpu.cli import main

    folder.mkdir(parents=True, exist_ok=True)
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(out), contextlib.redirect_stdout(out):
        mp.chdir(folder)
        mp.setattr(sys, "argv", ["lit-gpu"])
        try:
            main(args)
        except SystemExit as stop:
            return int(stop.code or 0), out.getvalue()
    return 0, out.getvalue()


def last(folder: Path) -> dict[str, Any]:
    path = folder / "runs" / "lit_gpu" / "version_0" / "checkpoints" / "last.ckpt"
    return torch.load(path, map_location="cpu", weights_only=False)


def same(a: Any, b: Any) -> bool:
    """Bit-identical: tensors by ``torch.equal`` (sparse ones densified), containers item by item."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        a, b = (t.to_dense() if t.is_sparse else t for t in (a, b))
        return a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, Mapping):
        return isinstance(b, Mapping) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return isinstance(b, list | tuple) and len(a) == len(b) and all(map(same, a, b))
    return type(a) is type(b) and a == b


def assert_resumed_exactly(resumed: dict[str, Any], reference: dict[str, Any]) -> None:
    assert resumed["global_step"] == reference["global_step"] == 8
    for part in ("state_dict", "optimizer_states", "lr_schedulers"):
        assert same(resumed[part], reference[part]), part


def _check(tmp_path: Path, optimizer: str, scheduler: str | None) -> None:
    code, out = fit(tmp_path / "reference", _args(optimizer, scheduler))
    assert code == 0, out[-3000:]
    code, out = fit(tmp_path / "run", _args(optimizer, scheduler, "--trainer.max_steps", "5"))
    assert code == 0 and last(tmp_path / "run")["global_step"] == 5, out[-3000:]
    code, out = fit(tmp_path / "run", _args(optimizer, scheduler, "--ckpt_path", "last"))
    assert code == 0, out[-3000:]
    assert_resumed_exactly(last(tmp_path / "run"), last(tmp_path / "reference"))


@pytest.mark.parametrize(("optimizer", "scheduler"), SAMPLE)
def test_a_sample_resumes_bit_exactly(tmp_path, optimizer, scheduler):
    _check(tmp_path, optimizer, scheduler)


@pytest.mark.full
@pytest.mark.parametrize(("optimizer", "scheduler"), [c for c in CASES if c not in SAMPLE])
def test_every_optimizer_and_scheduler_torch_ships_resumes_bit_exactly(tmp_path, optimizer, scheduler):
    _check(tmp_path, optimizer, scheduler)


def test_the_matrix_names_every_class_torch_ships():
    """A new optimizer or scheduler in torch joins the matrix (optim_matrix builds it) or fails here."""
    from tests.helpers.optim_matrix import _optimizer, _scheduler

    params = [torch.nn.Parameter(torch.zeros(2, 2))]
    for name in optimizer_names():
        assert isinstance(_optimizer(name, params), getattr(torch.optim, name))
    for name in scheduler_names():
        assert type(_scheduler(name, torch.optim.SGD(params, lr=0.1))).__name__ == name
    assert {"Adafactor", "LBFGS", "Muon", "SparseAdam"} <= set(optimizer_names())
    assert {"SequentialLR", "ChainedScheduler", "ReduceLROnPlateau", "LambdaLR"} <= set(scheduler_names())


def test_a_real_sigterm_then_resume_is_bit_exact(tmp_path, cli_env):
    """The stop a preemption makes: SIGTERM after step 5 (LBFGS, LambdaLR's numpy value in its state)."""
    args = _args("LBFGS", "LambdaLR")
    code, out = fit(tmp_path / "reference", args)
    assert code == 0, out[-3000:]
    signal = ["--trainer.callbacks+=tests.helpers.resume.SignalAtStep", "--trainer.callbacks.step", "5"]
    (tmp_path / "run").mkdir()
    stopped = run_cli([*args, *signal], tmp_path / "run", cli_env)
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert last(tmp_path / "run")["global_step"] == 5
    resumed = run_cli([*args, "--ckpt_path", "last"], tmp_path / "run", cli_env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_resumed_exactly(last(tmp_path / "run"), last(tmp_path / "reference"))

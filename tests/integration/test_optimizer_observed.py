"""Optimizer and scheduler states Lightning's own restore accepts resume through ``LitGpuCLI`` too.

Lightning's ``StochasticWeightAveraging`` stopped mid-averaging (its SWALR state beside a config that
builds no scheduler), timm's ``lookahead_adamw`` (``lookahead_step``, a counter in each param group) and
timm's ``kron`` (an ``rng_state`` beside ``state`` and ``param_groups``): fit, stop, ``--ckpt_path last``.
"""

from __future__ import annotations

import pytest

from tests.helpers.paths import CONFIGS
from tests.integration.test_optimizer_matrix import fit, last

pytestmark = pytest.mark.integration

BASE = ["fit", "--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]
SWA = [
    "--trainer.callbacks+=lightning.pytorch.callbacks.StochasticWeightAveraging",
    "--trainer.callbacks.swa_lrs", "0.01",
    "--trainer.callbacks.swa_epoch_start", "1",
]  # fmt: skip


@pytest.mark.parametrize("scheduler", [None, "StepLR"])
def test_a_fit_stopped_mid_averaging_resumes(tmp_path, scheduler):
    """The config builds no scheduler (the checkpoint holds SWALR's state), or one SWA replaced."""
    model = ["--model", "tests.helpers.optim_matrix.MatrixRegression", "--model.scheduler_name", scheduler]
    args = [*BASE, *SWA, *(model if scheduler else [])]
    code, out = fit(tmp_path, [*args, "--trainer.max_epochs", "2"])
    assert code == 0, out[-3000:]
    saved = last(tmp_path)
    assert len(saved["lr_schedulers"]) == 1 and saved["global_step"] == 8  # SWALR: averaging started
    assert "anneal_epochs" in saved["lr_schedulers"][0]  # SWALR's
    code, out = fit(tmp_path, [*args, "--trainer.max_epochs", "3", "--ckpt_path", "last"])
    assert code == 0, out[-3000:]
    assert last(tmp_path)["global_step"] == 12


@pytest.mark.parametrize("opt", ["lookahead_adamw", "kron"])
def test_a_timm_optimizer_resumes(tmp_path, opt):
    pytest.importorskip("timm")
    model = ["--model", "tests.helpers.optim_matrix.TimmRegression", "--model.opt", opt]
    code, out = fit(tmp_path, [*BASE, *model, "--trainer.max_steps", "5"])
    assert code == 0, out[-3000:]
    saved = last(tmp_path)["optimizer_states"][0]
    if opt == "kron":
        assert "rng_state" in saved
    else:
        assert saved["param_groups"][0]["lookahead_step"] == 5
    code, out = fit(tmp_path, [*BASE, *model, "--ckpt_path", "last"])
    assert code == 0, out[-3000:]
    assert last(tmp_path)["global_step"] == 8

"""One step per checkpoint: the step shown, chosen by and resumed at are its loops' own.

Issue 57: a ``last.ckpt`` copy whose top-level ``global_step`` says 1000 while its loops say 8 was chosen
as "last" and announced as "resuming from global step 1000"; the fit continued at step 8. Such a file is
refused in one line (``--ckpt_path FILE``, ``last``, and the restore contracts), and never outranks a
true one.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from lit_gpu.checkpoints.contracts import ContractError, check_restored_state
from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.errors import LitGpuError
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
from lit_gpu.run import store
from lit_gpu.run.store import CheckpointHeader
from tests.helpers.run_store import run_folder, subcommand
from tests.helpers.trainers import quiet_trainer

LINE = "top-level global_step 1000, while its loops are at global step 8, epoch 1"


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """A run folder whose ``last.ckpt`` a real fit wrote (8 steps, one epoch), and a copy saying 1000."""
    root = tmp_path_factory.mktemp("counters")
    run = run_folder(root)
    trainer = quiet_trainer(root, max_epochs=1, limit_train_batches=8, limit_val_batches=0)
    module = RegressionModule(SimpleModel(4, 4))
    data = SyntheticRegressionDataModule(in_features=4, out_features=4, num_samples=128, batch_size=16)
    trainer.fit(module, datamodule=data)
    last = run / "checkpoints" / "last.ckpt"
    trainer.save_checkpoint(last)
    copy = last.with_name("last-v1.ckpt")
    checkpoint = torch.load(last, weights_only=True)
    torch.save({**checkpoint, "global_step": 1000}, copy)
    return root, last, copy, module


def test_the_copy_is_refused_in_one_line(real):
    root, _, copy, module = real
    with pytest.raises(LitGpuError) as err:
        store.resolve(subcommand(root, str(copy)))
    message = str(err.value)
    assert LINE in message and "\n" not in message and "use another checkpoint" in message
    with pytest.raises(ContractError, match=LINE):  # the restore contracts (the Python API's fit)
        check_restored_state(torch.load(copy, weights_only=True), module, [], str(copy))


def test_the_step_is_the_loops_own_and_last_chooses_by_it(real):
    root, last, copy, _ = real
    assert CheckpointHeader.of(copy, torch.load(copy, weights_only=True)).step == 8
    resolved = store.resolve(subcommand(root, "last"))  # the copy's 1000 does not outrank the true file
    assert resolved.path == str(last) and "(step 7, epoch 1;" in resolved.line and "1000" not in resolved.line
    check_restored_state(torch.load(last, weights_only=True), real[3], [], str(last))  # the true file passes


def test_last_with_only_the_copy_is_refused(real, tmp_path):
    root, _, copy, _ = real
    run = run_folder(tmp_path)
    (run / "checkpoints" / "last.ckpt").unlink()
    shutil.copy(copy, run / "checkpoints" / "last-v1.ckpt")
    with pytest.raises(LitGpuError, match=LINE):
        store.resolve(subcommand(tmp_path, "last"))

"""``strategy: dp`` for real on CUDA GPUs (1, and >= 2 when present). Skipped without a GPU."""

from __future__ import annotations

import subprocess
import sys

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.nn import functional as F

import lit_gpu.strategies  # noqa: F401  (registers "dp")
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import FooNet
from lit_gpu.strategies import DataParallelStrategy
from lit_gpu.strategies.dp import NetDataParallel, unwrap_net, wrap_net
from tests.helpers.dp import dp_data, dp_module
from tests.helpers.run_if import RunIf, cuda_gpu_count

pytestmark = [pytest.mark.gpu, RunIf(min_cuda_gpus=1)]
N_GPUS = cuda_gpu_count()


class _Probe(nn.Module):
    """Linear layer recording (device, batch size, autocast enabled, autocast dtype) per call."""

    def __init__(self, features: int = 8) -> None:
        super().__init__()
        self.lin = nn.Linear(features, features)
        self.calls: list[tuple[torch.device, int, bool, torch.dtype]] = []  # shared by replicas

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append(
            (x.device, x.shape[0], torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"))
        )
        return self.lin(x)


def _trainer(tmp_path, **kw) -> pl.Trainer:
    defaults = dict(
        accelerator="gpu", devices=1, max_epochs=1, limit_train_batches=4, limit_val_batches=2, logger=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
    )  # fmt: skip
    defaults.update(kw)
    return pl.Trainer(**defaults)


def _fit(tmp_path, strategy, devices, net=None, **kw):
    pl.seed_everything(3)
    module = dp_module(net)
    ckpt = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / f"{strategy}{devices}", save_last=True)
    trainer = _trainer(tmp_path, strategy=strategy, devices=devices, callbacks=[ckpt], **kw)
    trainer.fit(module, dp_data())
    state = torch.load(tmp_path / f"{strategy}{devices}" / "last.ckpt", weights_only=False)["state_dict"]
    return module, trainer, state


def test_dp_on_one_gpu_matches_single_device(tmp_path):
    _, ref_trainer, ref_state = _fit(tmp_path, "auto", 1)
    module, trainer, state = _fit(tmp_path, "dp", 1)
    assert isinstance(trainer.strategy, DataParallelStrategy) and trainer.strategy.uses_data_parallel
    assert trainer.strategy.root_device == torch.device("cuda", 0)
    assert list(state) == list(ref_state) and not any("module." in k for k in state)
    for key in ref_trainer.callback_metrics:
        torch.testing.assert_close(trainer.callback_metrics[key], ref_trainer.callback_metrics[key])
    assert "net" not in module.__dict__  # shadow removed on teardown


@pytest.mark.parametrize(
    ("precision", "dtype"), [("bf16-mixed", torch.bfloat16), ("16-mixed", torch.float16)]
)
def test_mixed_precision_holds_inside_replicas(tmp_path, precision, dtype):
    if dtype is torch.bfloat16 and not torch.cuda.is_bf16_supported(including_emulation=False):
        pytest.skip("GPU without native bf16")
    probe = _Probe()
    _, trainer, _ = _fit(tmp_path, "dp", min(2, N_GPUS), net=probe, precision=precision)
    train_calls = [c for c in probe.calls if c[2]]
    assert train_calls, "forward never ran under autocast"
    assert {c[3] for c in probe.calls} == {dtype}
    assert (trainer.scaler is not None) == (precision == "16-mixed")  # GradScaler for fp16


@RunIf(min_cuda_gpus=2)
def test_batch_is_split_and_gathered_on_the_first_gpu(tmp_path):
    probe = _Probe()
    _, trainer, state = _fit(tmp_path, "dp", 2, net=probe)
    devices = {c[0] for c in probe.calls}
    assert devices == {torch.device("cuda", 0), torch.device("cuda", 1)}
    assert {c[1] for c in probe.calls if c[0].index == 1} == {8}  # 16 split in two
    assert trainer.num_devices == 2 and trainer.world_size == 1
    assert list(state) == ["net.lin.weight", "net.lin.bias"]


@RunIf(min_cuda_gpus=2)
def test_loss_equals_single_device_for_the_same_batch():
    torch.manual_seed(0)
    module = RegressionModule(FooNet(8, 3)).cuda()
    x, y = torch.randn(32, 8, device="cuda"), torch.randn(32, 8, device="cuda")
    ref = F.mse_loss(module.net(x), y)
    wrapper = wrap_net(module, "net", device_ids=list(range(N_GPUS)))
    assert isinstance(module.net, NetDataParallel) and wrapper.output_device == 0
    out = module(x)
    assert out.device == torch.device("cuda", 0)
    torch.testing.assert_close(F.mse_loss(out, y), ref)
    unwrap_net(module, "net")


def test_free_gpu_pick_creates_no_cuda_context():
    code = (
        "import torch; from lit_gpu.devices import pick_free_gpus; ids = pick_free_gpus(1); "
        "assert 0 <= ids[0] < torch.cuda.device_count(); assert not torch.cuda.is_initialized(); print(ids)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr

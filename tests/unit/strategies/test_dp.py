"""``strategy: dp`` on CPU: registration, YAML, refusal, single-device equivalence, wrapping, autocast."""

from __future__ import annotations

import copy
import threading

import lightning.pytorch as pl
import pytest
import torch
from lightning.fabric.utilities.distributed import ReduceOp
from lightning.pytorch.strategies import StrategyRegistry
from torch import nn
from torch.nn import functional as F

import lit_gpu.strategies  # noqa: F401  (registers "dp")
from lit_gpu.cli import LitGpuCLI
from lit_gpu.errors import LitGpuError
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import FooNet
from lit_gpu.strategies import DataParallelStrategy
from lit_gpu.strategies.dp import AutocastReplica, NetDataParallel, register, unwrap_net, wrap_net
from tests.helpers.dp import dp_data, dp_module
from tests.helpers.paths import CONFIGS
from tests.helpers.run_if import RunIf
from tests.helpers.trainers import quiet_trainer

cpu_only = RunIf(max_cuda_gpus=0)  # the CPU behaviour; GPU variants in test_dp_gpu.py


def _trainer(tmp_path, **kw) -> pl.Trainer:
    defaults = dict(max_epochs=2, limit_train_batches=6, limit_val_batches=2, enable_checkpointing=True)
    return quiet_trainer(tmp_path, **{**defaults, **kw})


# ---- registration and parsing -------------------------------------------------------------------
def test_dp_is_registered_and_idempotent():
    assert StrategyRegistry["dp"]["strategy"] is DataParallelStrategy
    register()  # importing twice / re-registering must not raise
    assert StrategyRegistry["dp"]["strategy"] is DataParallelStrategy


def test_trainer_accepts_strategy_dp_as_a_string(tmp_path):
    trainer = _trainer(tmp_path, strategy="dp")
    strategy = trainer.strategy
    assert isinstance(strategy, DataParallelStrategy)
    assert strategy.root_device == torch.device("cpu")
    assert (trainer.world_size, trainer.global_rank, trainer.num_devices) == (1, 0, 1)
    assert not strategy.uses_data_parallel
    assert trainer.distributed_sampler_kwargs is None
    assert trainer._accelerator_connector.is_distributed is False


def test_yaml_dp_config_parses_into_the_strategy(monkeypatch):
    monkeypatch.setattr("sys.argv", ["lit-gpu"])
    cli = LitGpuCLI(
        args=["--config", str(CONFIGS / "foonet.yaml"), "--config", str(CONFIGS / "trainer/dp.yaml")],
        run=False,
    )
    assert isinstance(cli.trainer.strategy, DataParallelStrategy)
    assert cli.trainer.strategy.net_attr == "net"


def test_yaml_class_path_form_sets_net_attr(monkeypatch):
    monkeypatch.setattr("sys.argv", ["lit-gpu"])
    cli = LitGpuCLI(
        args=[
            "--config",
            str(CONFIGS / "foonet.yaml"),
            "--trainer.accelerator=cpu",
            "--trainer.strategy=lit_gpu.strategies.DataParallelStrategy",
            "--trainer.strategy.net_attr=backbone",
        ],
        run=False,
    )
    assert isinstance(cli.trainer.strategy, DataParallelStrategy)
    assert cli.trainer.strategy.net_attr == "backbone"


# ---- CPU behaviour: refusal for >1 device, equivalence for 1 --------------------------------------
def test_several_cpu_devices_are_refused_with_a_pointer_to_ddp(tmp_path):
    with pytest.raises(LitGpuError) as info:
        _trainer(tmp_path, strategy="dp", devices=2)
    message = str(info.value)
    assert "CUDA GPUs" in message and "strategy: ddp" in message and "devices: 1" in message
    assert "\n" not in message


def _fit(tmp_path, strategy: str):
    pl.seed_everything(7)
    module = dp_module()
    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / strategy, save_last=True)
    trainer = _trainer(tmp_path, strategy=strategy, callbacks=[checkpoint])
    trainer.fit(module, dp_data())
    return module, trainer, torch.load(tmp_path / strategy / "last.ckpt", weights_only=False)


def test_one_cpu_device_is_equivalent_to_single_device(tmp_path, recwarn):
    ref_module, ref_trainer, ref_ckpt = _fit(tmp_path, "auto")
    module, trainer, ckpt = _fit(tmp_path, "dp")
    # same losses, same logged keys, same weights, same checkpoint keys (no "module." prefix)
    assert set(trainer.callback_metrics) == set(ref_trainer.callback_metrics)
    for key, value in ref_trainer.callback_metrics.items():
        torch.testing.assert_close(trainer.callback_metrics[key], value, rtol=0, atol=0)
    assert list(ckpt["state_dict"]) == list(ref_ckpt["state_dict"])
    assert not any(k.startswith("module.") or ".module." in k for k in ckpt["state_dict"])
    for key, value in ref_ckpt["state_dict"].items():
        torch.testing.assert_close(ckpt["state_dict"][key], value, rtol=0, atol=0)
    assert "net" not in module.__dict__  # no shadow left behind
    assert not [w for w in recwarn if "dp" in str(w.message).lower() or "dataparallel" in str(w.message)]


# ---- wrapping the net ----------------------------------------------------------------------------
@cpu_only
def test_wrap_net_keeps_state_dict_and_parameters():
    module = dp_module()
    keys, params = list(module.state_dict()), list(module.parameters())
    raw = module.net
    wrapper = wrap_net(module, "net", device_ids=None, device_type="cpu")
    assert module.net is wrapper and isinstance(module.net, NetDataParallel)
    assert module._modules["net"] is raw
    assert list(module.state_dict()) == keys
    assert all(a is b for a, b in zip(module.parameters(), params, strict=True))
    x = torch.randn(5, 8)
    torch.testing.assert_close(module(x), raw(x))  # forward goes through the wrapper
    assert module.net.linears is raw.linears  # attributes fall through to the net
    module.to(torch.float64)  # .to() still reaches the real parameters
    assert raw.linears[0].weight.dtype == torch.float64
    unwrap_net(module, "net")
    assert module.net is raw
    unwrap_net(module, "net")  # idempotent


def test_wrap_net_names_a_missing_attribute():
    with pytest.raises(LitGpuError, match=r"sub-module 'backbone'.*sub-modules: net .*net_attr net") as info:
        wrap_net(dp_module(), "backbone", device_type="cpu")
    assert "\n" not in str(info.value)


def test_dp_on_a_module_without_net_names_its_sub_modules_or_says_there_is_none():
    from lightning.pytorch.demos.boring_classes import BoringModel

    with pytest.raises(
        LitGpuError, match=r"its sub-modules: layer \(Linear\).*--trainer.strategy.net_attr layer"
    ):
        wrap_net(BoringModel(), "net", device_type="cpu")
    with pytest.raises(LitGpuError, match=r"no sub-module with parameters; use --trainer.strategy ddp"):
        wrap_net(torch.nn.Module(), "net", device_type="cpu")


@cpu_only
def test_reassigning_the_net_drops_the_shadow():
    module = dp_module()
    wrap_net(module, "net", device_type="cpu")
    new = FooNet(8, 1)
    module.net = new
    assert module.net is new and "net" not in module.__dict__


# ---- autocast inside replica threads -------------------------------------------------------------
class _DtypeProbe(nn.Module):
    """Records the autocast dtype seen inside forward (per call) and returns a matmul."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.seen: list[tuple[bool, torch.dtype]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return self.lin(x)


def _in_thread(fn):
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("out", fn()))
    thread.start()
    thread.join()
    return result["out"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_replica_threads_keep_the_parent_autocast_dtype(dtype):
    probe = _DtypeProbe()
    replica_src = AutocastReplica(probe, device_type="cpu")
    x = torch.randn(2, 4)
    with torch.autocast("cpu", dtype=dtype):
        replica_src.capture_autocast()
        # DataParallel's replicate() copies attributes via _replicate_for_data_parallel
        replica = replica_src._replicate_for_data_parallel()

        # What torch's parallel_apply does in each worker: re-enter autocast with enabled= only
        def worker(module):
            with torch.autocast("cpu", enabled=True):
                return module(x)

        plain = _in_thread(lambda: worker(probe))
        fixed = _in_thread(lambda: worker(replica))
    # without the wrapper, the thread falls back to the default dtype when the parent used another
    default = torch.get_autocast_dtype("cpu")
    assert plain.dtype == default
    assert fixed.dtype == dtype
    assert probe.seen[-1] == (True, dtype)


def test_replica_thread_without_parent_autocast_stays_full_precision():
    replica = AutocastReplica(_DtypeProbe(), device_type="cpu")
    replica.capture_autocast()  # parent: no autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = _in_thread(lambda: replica(torch.randn(2, 4)))
    assert out.dtype == torch.float32


@cpu_only
def test_wrapper_forward_captures_on_the_calling_thread():
    module = RegressionModule(_DtypeProbe())
    wrapper = wrap_net(module, "net", device_type="cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = module(torch.randn(3, 4))
    assert out.dtype == torch.bfloat16
    assert (wrapper.module.autocast_enabled, wrapper.module.autocast_dtype) == (True, torch.bfloat16)


# ---- reductions and gathering --------------------------------------------------------------------
def test_reduce_returns_scalars_and_reduces_per_replica_vectors():
    strategy = DataParallelStrategy()
    loss = torch.tensor(2.5)
    assert strategy.reduce(loss) is loss  # the step already saw the whole batch
    per_replica = torch.tensor([1.0, 2.0, 6.0])  # what DataParallel gathers from scalar outputs
    assert strategy.reduce(per_replica).item() == pytest.approx(3.0)
    assert strategy.reduce(per_replica, reduce_op="sum").item() == pytest.approx(9.0)
    assert strategy.reduce(per_replica, reduce_op=ReduceOp.SUM).item() == pytest.approx(9.0)
    assert strategy.reduce(per_replica, reduce_op="max").item() == pytest.approx(6.0)
    assert strategy.reduce(per_replica, reduce_op="min").item() == pytest.approx(1.0)
    half = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    assert strategy.reduce(half).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="reduce_op"):
        strategy.reduce(per_replica, reduce_op="product")
    assert strategy.reduce("not a tensor") == "not a tensor"


def test_single_process_collectives_are_identities():
    strategy = DataParallelStrategy()
    t = torch.arange(6).reshape(2, 3)
    assert strategy.all_gather(t) is t
    assert strategy.broadcast({"a": 1}) == {"a": 1}
    assert strategy.reduce_boolean_decision(True) and not strategy.reduce_boolean_decision(False)
    assert (strategy.world_size, strategy.global_rank, strategy.is_global_zero) == (1, 0, True)


def _scatter_apply_gather(net: nn.Module, x: torch.Tensor, chunks: int) -> torch.Tensor:
    """DataParallel's dataflow on CPU: chunk along dim 0, run replicas in threads, concatenate in order."""
    replicas = [net] * chunks
    parts = x.chunk(chunks)
    outputs: dict[int, torch.Tensor] = {}
    threads = [
        threading.Thread(target=lambda i=i, m=m, p=p: outputs.__setitem__(i, m(p)))
        for i, (m, p) in enumerate(zip(replicas, parts, strict=True))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return torch.cat([outputs[i] for i in range(len(parts))])


@pytest.mark.parametrize("chunks", [2, 3, 4])
def test_split_batch_gives_the_single_device_loss_and_gradients(chunks):
    torch.manual_seed(0)
    net = FooNet(neural_num=8, layers=3)
    x, y = torch.randn(10, 8), torch.randn(10, 8)
    ref_net = copy.deepcopy(net)
    ref_loss = F.mse_loss(ref_net(x), y)
    ref_loss.backward()
    loss = F.mse_loss(_scatter_apply_gather(net, x, chunks), y)  # loss on the gathered outputs
    loss.backward()
    torch.testing.assert_close(loss, ref_loss)
    for p, q in zip(net.parameters(), ref_net.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)


def test_batchnorm_sees_per_replica_statistics():
    # the documented difference: BatchNorm in train mode normalises each GPU's slice separately
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    x = torch.randn(8, 4) * torch.arange(1, 9).unsqueeze(1)
    assert not torch.allclose(_scatter_apply_gather(net, x, 2), net(x))

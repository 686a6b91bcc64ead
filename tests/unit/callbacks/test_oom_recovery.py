"""OOMRecovery: an out-of-memory step is retried in micro-batches with the same effective batch."""

from __future__ import annotations

from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from torch import nn
from torch.utils.data import TensorDataset

from lit_gpu.callbacks.oom_recovery import OOMRecovery, _DeliverGradients
from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.errors import LitGpuError
from lit_gpu.modules import ClassificationModule, RegressionModule
from lit_gpu.nets import SimpleModel
from lit_gpu.testing import OOMAbove
from tests.helpers.run_if import RunIf
from tests.helpers.trainers import quiet_trainer


def _two_layers() -> nn.Module:
    return nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 10))


def _fit(callbacks=(), make_net=_two_layers, **trainer_kwargs) -> tuple[RegressionModule, pl.Trainer]:
    pl.seed_everything(7)
    model = RegressionModule(make_net(), optimizer=lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9))
    data = SyntheticRegressionDataModule(num_samples=384, batch_size=64, teacher="linear", shuffle=False)
    kwargs = {"max_epochs": 2, "callbacks": list(callbacks), **trainer_kwargs}
    trainer = quiet_trainer(**kwargs)
    trainer.fit(model, data)
    return model, trainer


def _max_diff(a: nn.Module, b: nn.Module) -> float:
    pairs = zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    return max((x - y).abs().max().item() for x, y in pairs)


def _fp16_with_grad_scaler() -> MixedPrecision:
    """fp16 autocast + a GradScaler on CPU (Lightning's ``16-mixed`` would fall back to bf16 there)."""
    return MixedPrecision("16-mixed", device="cpu", scaler=torch.amp.GradScaler("cpu", init_scale=1024.0))


@pytest.mark.integration
@pytest.mark.parametrize(
    "phase, accumulate, fp16",
    [("forward", 1, False), ("backward", 1, False), ("backward", 2, False), ("forward", 1, True)],
)
def test_recovered_run_equals_uninterrupted_run(phase, accumulate, fp16, capsys):
    def plugins():
        return [_fp16_with_grad_scaler()] if fp16 else None

    reference, _ = _fit(accumulate_grad_batches=accumulate, plugins=plugins())
    oom = OOMAbove(batch_size=32, phase=phase, from_step=2)
    recovery = OOMRecovery()
    model, trainer = _fit([recovery, oom], accumulate_grad_batches=accumulate, plugins=plugins())

    assert oom.raised == 1 and recovery.micro_batch_size == 32 and recovery.adaptations == 1
    assert trainer.global_step == reference.trainer.global_step  # no optimizer step lost or added
    # fp16 rounds each micro-batch's activations; a GradScaler factor applied wrongly would be off by 1024x
    tolerance = 1e-3 if fp16 else 1e-5
    assert _max_diff(model, reference) < tolerance
    # the epoch's train loss counts the recovered step once (a failed backward's try is undone)
    want, got = (t.callback_metrics["train/loss_epoch"].item() for t in (reference.trainer, trainer))
    assert got == pytest.approx(want, rel=tolerance)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "out of memory" in ln]
    batch = 3 if accumulate == 1 else 5  # step 2 is the third batch, or the fifth accumulating two
    assert lines == [
        f"lit-gpu: out of memory at step 2 (epoch 0/1 batch {batch}/6) with batch 64 -> micro-batch 32 x 2"
    ]


def test_with_recovery_and_no_oom_the_run_is_bit_identical():
    reference, _ = _fit()
    model, _ = _fit([OOMRecovery()])
    assert _max_diff(model, reference) == 0.0


@pytest.mark.integration
def test_halves_down_to_one_sample_then_gives_up(capsys):
    recovery = OOMRecovery()
    with pytest.raises(torch.OutOfMemoryError, match="simulated by lit_gpu.testing.OOMAbove"):
        _fit([recovery, OOMAbove(batch_size=0)])
    assert recovery.micro_batch_size == 1
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "out of memory at step" in ln]
    assert [ln.split("-> ")[1] for ln in lines] == [
        "micro-batch 32 x 2",
        "micro-batch 16 x 4",
        "micro-batch 8 x 8",
        "micro-batch 4 x 16",
        "micro-batch 2 x 32",
        "micro-batch 1 x 64",
    ]


@pytest.mark.integration
def test_batchnorm_nets_are_named_in_the_adapt_line(capsys):
    def make_net() -> nn.Module:
        return nn.Sequential(nn.Linear(10, 16), nn.BatchNorm1d(16), nn.Linear(16, 10))

    _fit([OOMRecovery(), OOMAbove(batch_size=32)], make_net=make_net, max_epochs=1)
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if "out of memory at step" in ln]
    assert "BatchNorm layers now compute batch statistics over 32 samples, not 64" in line


def test_micro_batch_is_saved_and_restored():
    recovery = OOMRecovery()
    recovery.micro_batch_size = 16
    restored = OOMRecovery()
    restored.load_state_dict(recovery.state_dict())
    assert restored.micro_batch_size == 16
    empty = OOMRecovery(micro_batch_size=8)
    empty.load_state_dict({"micro_batch_size": None})  # a run that never ran out keeps the argument
    assert empty.micro_batch_size == 8


def test_manual_optimization_is_refused():
    class Manual(RegressionModule):
        def __init__(self) -> None:
            super().__init__(SimpleModel(10, 10))
            self.automatic_optimization = False

    trainer = quiet_trainer(callbacks=[OOMRecovery()], max_steps=1)
    with pytest.raises(LitGpuError, match="manual optimization"):
        trainer.fit(Manual(), SyntheticRegressionDataModule(num_samples=64))


def test_delivered_gradients_are_adopted_not_copied():
    param = nn.Parameter(torch.zeros(4))
    grad = torch.arange(4.0)
    address = grad.data_ptr()
    loss = _DeliverGradients.apply(torch.tensor(3.0), [[grad]], torch.tensor(1.0), param)
    del grad
    assert loss.item() == 3.0
    (loss / 2).backward()  # the incoming gradient (here 1/2, as Lightning's accumulation) scales them
    assert param.grad.tolist() == [0.0, 0.5, 1.0, 1.5] and param.grad.data_ptr() == address


@pytest.mark.integration
def test_dp_strategy_splits_what_dataparallel_sees():
    from lit_gpu.strategies.dp import DataParallelStrategy

    reference, _ = _fit()
    recovery = OOMRecovery()
    model, _ = _fit([recovery, OOMAbove(batch_size=32, from_step=1)], strategy=DataParallelStrategy())
    assert recovery.micro_batch_size == 32 and _max_diff(model, reference) < 1e-5


class _HungryNet(nn.Module):
    """SimpleModel whose forward also allocates ``bytes_per_sample`` per sample, in two halves.

    The second half fails first; the first half is then only held by the exception's frames, so a retry at
    half the batch fits only if the failed attempt's memory was really released.
    """

    def __init__(self, bytes_per_sample: int) -> None:
        super().__init__()
        self.fc = nn.Linear(10, 10)  # SimpleModel's layer: same name, same initial weights
        self.floats_per_half = max(1, bytes_per_sample // 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first = torch.zeros(x.shape[0], self.floats_per_half, device=x.device)
        second = torch.zeros(x.shape[0], self.floats_per_half, device=x.device)
        return self.fc(x) + (first[:, :1].mean() + second[:, :1].mean()) * 0


@pytest.mark.gpu
@RunIf(min_cuda_gpus=1)
def test_real_cuda_oom_is_recovered_on_the_gpu():
    """Real CUDA OOMs at batch 64, in the sanity check (validation, first) and in training; both recovered."""
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    per_sample = int(free * 0.7 / 32)  # 32 samples: 70 % of the free memory; 64 samples: 140 %
    recovery = OOMRecovery()
    model, trainer = _fit(
        [recovery], make_net=lambda: _HungryNet(per_sample), accelerator="cuda", max_epochs=1
    )
    reference, reference_trainer = _fit(make_net=SimpleModel, accelerator="cuda", max_epochs=1)

    # one halving each (nothing leaked): the sanity check's validation batch of 64, then training's.
    # Without expandable segments the first backward's cuBLAS workspace pins a freed 35 % block and
    # training needs 16 (seen on an H200, 2026-11-26): OOMRecovery turns them on for the run
    assert recovery.eval_micro_batch_size == 32 and recovery.micro_batch_size == 32
    assert recovery.adaptations == 2
    assert trainer.global_step == reference_trainer.global_step
    assert _max_diff(model.net, reference.net) < 1e-5
    val_loss = trainer.logged_metrics["val/loss"].item()  # batches of 64 (as 32 + 32) and 32
    assert val_loss == pytest.approx(reference_trainer.logged_metrics["val/loss"].item(), rel=1e-5)


@pytest.mark.integration
def test_batch_size_finder_still_sees_its_ooms(tmp_path):
    from lightning.pytorch.tuner import Tuner

    pl.seed_everything(7)
    model = RegressionModule(_two_layers())
    data = SyntheticRegressionDataModule(num_samples=384, batch_size=2, teacher="linear")
    recovery = OOMRecovery()
    trainer = quiet_trainer(tmp_path, max_epochs=1, callbacks=[recovery, OOMAbove(batch_size=32)])
    found = Tuner(trainer).scale_batch_size(model, datamodule=data, mode="power", max_trials=8)
    assert found == 32 and recovery.adaptations == 0  # the finder's OOM at 64 was not "recovered"
    trainer.fit(model, data)
    assert recovery.adaptations == 0 and recovery.micro_batch_size is None


@pytest.mark.gpu
@RunIf(min_cuda_gpus=1)  # Lightning's FSDP needs CUDA
def test_fsdp_is_refused_with_one_line(tmp_path):
    trainer = quiet_trainer(
        tmp_path, accelerator="cuda", strategy="fsdp", callbacks=[OOMRecovery()], max_steps=1
    )
    with pytest.raises(LitGpuError, match="works with one device, ddp and dp, not FSDPStrategy"):
        trainer.fit(RegressionModule(SimpleModel(10, 10)), SyntheticRegressionDataModule(num_samples=64))


def test_pin_torch_ddp_backward_inside_forward_does_not_all_reduce(tmp_path):
    """Upstream behaviour OOMRecovery relies on (torch DDP's reducer): backward passes run inside DDP's
    forward accumulate locally, as under ``no_sync``; the all-reduce comes with the outer backward."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    calls = []

    def counting_hook(state, bucket):
        calls.append(bucket.buffer().clone())
        future = torch.futures.Future()
        future.set_result(bucket.buffer())
        return future

    class Inner(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.fc(x).sum().backward()  # a micro-batch's backward, inside DDP's forward
            assert not calls
            return self.fc(x).sum()

    ddp = DistributedDataParallel(Inner())
    ddp.register_comm_hook(None, counting_hook)
    ddp(torch.ones(2, 3)).backward()
    assert len(calls) == 1  # one all-reduce, of the gradients of both backward passes
    torch.testing.assert_close(ddp.module.fc.weight.grad, torch.full((1, 3), 4.0))


# ---- evaluation loops: sanity check, validation, test, predict ------------------------------------------
class _Classifier(ClassificationModule):
    """ClassificationModule (loss logged with batch_size, torchmetrics accuracy) plus logs of other kinds."""

    def _step(self, batch, stage):
        loss = super()._step(batch, stage)
        if stage != "train":
            inputs = batch[0]
            self.log(f"{stage}/mean_x", inputs.mean())  # no batch_size: Lightning takes the whole batch's
            self.log(f"{stage}/max_x", inputs.max(), reduce_fx="max")
            self.log(f"{stage}/count", float(len(inputs)), reduce_fx="sum")
        return loss


def _classification_data() -> pl.LightningDataModule:
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(356, 10, generator=generator)
    y = (x @ torch.randn(10, 4, generator=generator)).argmax(1)
    train, val = TensorDataset(x[:256], y[:256]), TensorDataset(x[256:], y[256:])  # val: batches 64 + 36
    return pl.LightningDataModule.from_datasets(train, val, val, TensorDataset(x[256:]), batch_size=64)


def _classifier() -> _Classifier:
    pl.seed_everything(5)
    return _Classifier(_two_layers_to(4), num_classes=4)


def _two_layers_to(classes: int) -> nn.Module:
    return nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, classes))


def _run(fn: str, callbacks=(), model: pl.LightningModule | None = None):
    model = model or _classifier()
    trainer = quiet_trainer(max_epochs=2, callbacks=list(callbacks), num_sanity_val_steps=2)
    data = _classification_data()
    if fn == "fit":
        trainer.fit(model, data)
        return model, trainer, {k: v.item() for k, v in trainer.logged_metrics.items()}
    result = getattr(trainer, fn)(model, data)
    if fn == "predict":
        return model, trainer, torch.cat(result)
    return model, trainer, result[0]


@pytest.mark.parametrize("fn, loop", [("fit", "validation"), ("validate", "validation"), ("test", "test")])
def test_evaluation_out_of_memory_is_recovered_with_the_same_metrics(fn, loop, capsys):
    _, _, reference = _run(fn)
    oom, recovery = OOMAbove(batch_size=32, loops=loop), OOMRecovery()
    model, trainer, recovered = _run(fn, [recovery, oom])

    assert oom.raised == 1 and recovery.eval_micro_batch_size == 32 and recovery.micro_batch_size is None
    assert recovered.keys() == reference.keys()
    stage = "test" if fn == "test" else "val"
    assert {f"{stage}/loss", f"{stage}/acc", f"{stage}/mean_x", f"{stage}/max_x", f"{stage}/count"} <= set(
        reference
    )
    for key, value in reference.items():
        assert recovered[key] == pytest.approx(value, rel=1e-6, abs=1e-7), key
    assert recovered[f"{stage}/count"] == 100  # the sum over both batches' micro-batches: every sample once
    words = {
        "fit": "the sanity check (validation before training)",
        "validate": "validation",
        "test": "testing",
    }
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "out of memory" in ln]
    assert lines == [
        f"lit-gpu: out of memory during {words[fn]} at batch 0 with batch 64 -> micro-batch 32 x 2"
    ]


def test_predict_out_of_memory_is_recovered_with_the_same_predictions():
    _, _, reference = _run("predict")
    oom, recovery = OOMAbove(batch_size=20, loops="predict"), OOMRecovery()
    _, _, recovered = _run("predict", [recovery, oom])
    assert oom.raised == 2 and recovery.eval_micro_batch_size == 16  # 64 -> 32 -> 16
    assert recovered.shape == reference.shape == (100, 4)
    torch.testing.assert_close(recovered, reference)


@pytest.mark.integration  # trains for seconds: not the inner loop (--fast)
def test_training_and_validation_out_of_memory_in_one_fit():
    model_ref, trainer_ref, reference = _run("fit")
    oom, recovery = OOMAbove(batch_size=32, loops="all"), OOMRecovery()
    model, trainer, recovered = _run("fit", [recovery, oom])
    assert recovery.micro_batch_size == 32 and recovery.eval_micro_batch_size == 32
    assert trainer.global_step == trainer_ref.global_step
    assert _max_diff(model, model_ref) < 1e-5
    for key, value in reference.items():
        assert recovered[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


def test_a_try_that_ran_out_after_updating_a_metric_is_undone():
    class LateOOM(_Classifier):
        failed = False

        def validation_step(self, batch, batch_idx):
            loss = super().validation_step(batch, batch_idx)
            if len(batch[0]) > 32 and not self.trainer.sanity_checking:
                type(self).failed = True
                raise torch.OutOfMemoryError(
                    "CUDA out of memory. Tried to allocate 1.00 GiB (after the metrics)"
                )
            return loss

    _, _, reference = _run("validate")
    _, _, recovered = _run("validate", [OOMRecovery()], model=_classifier_of(LateOOM))
    assert LateOOM.failed
    for key, value in reference.items():
        assert recovered[key] == pytest.approx(value, rel=1e-6, abs=1e-7), key


def _classifier_of(cls: type) -> pl.LightningModule:
    pl.seed_everything(5)
    return cls(_two_layers_to(4), num_classes=4)


@pytest.mark.parametrize("loop", ["train", "validation", "test", "predict"])
def test_without_recovery_the_error_names_its_loop(loop):
    from lit_gpu.callbacks.oom_recovery import OOMLoopName
    from lit_gpu.translate import explain

    fn = {"train": "fit", "validation": "validate", "test": "test", "predict": "predict"}[loop]
    with pytest.raises(torch.OutOfMemoryError) as caught:
        _run(fn, [OOMLoopName(), OOMAbove(batch_size=32, loops=loop)])
    words = {"train": "training", "validation": "validation", "test": "testing", "predict": "prediction"}[
        loop
    ]
    assert explain(caught.value).startswith(f"out of memory during {words} (tried to allocate 2.00 GiB)")


@pytest.mark.parametrize("phase", ["forward", "backward"])
@pytest.mark.integration  # trains for seconds: not the inner loop (--fast)
def test_a_recovered_step_is_the_same_through_the_lean_optimizer_step(phase):
    """lit-gpu's default LeanOptimizerStep runs the step OOMRecovery wraps: bit-identical to Lightning's."""
    from lit_gpu.fastpath.step import LeanOptimizerStep

    runs = []
    for lean in (False, True):
        oom, recovery, step = (
            OOMAbove(batch_size=32, phase=phase, from_step=2),
            OOMRecovery(),
            LeanOptimizerStep(),
        )
        model, trainer = _fit([recovery, oom, *([step] if lean else [])])
        assert oom.raised == 1 and recovery.adaptations == 1
        runs.append(
            (model, trainer.global_step, trainer.callback_metrics["train/loss_epoch"].item(), step.blocker)
        )
    (plain, steps, loss, _), (lean_model, lean_steps, lean_loss, blocker) = runs
    assert (
        blocker is None and _max_diff(lean_model, plain) == 0.0 and (lean_steps, lean_loss) == (steps, loss)
    )


ON_OFF = ["expandable_segments:True", "expandable_segments:False"]
ALLOC_CASES = [
    pytest.param({}, "cuda:0", ON_OFF, id="gpu"),
    pytest.param({}, "cpu", [], id="cpu"),
    pytest.param({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}, "cuda:0", [], id="users-own"),
    pytest.param(
        {"PYTORCH_ALLOC_CONF": "max_split_size_mb:64,expandable_segments:True"}, "cuda:0", [], id="new-name"
    ),
    pytest.param({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"}, "cuda:0", ON_OFF, id="other-settings"),
]


@pytest.mark.parametrize(("env", "device", "expected"), ALLOC_CASES)
def test_expandable_segments_for_the_run_on_a_gpu_unless_the_user_chose(monkeypatch, env, device, expected):
    """On a GPU setup turns expandable segments on and teardown off again (a retried micro-batch is not
    refused for memory a long-lived small allocation fragments); the user's environment always wins."""
    from lightning.pytorch.strategies import SingleDeviceStrategy

    from lit_gpu.callbacks import cuda_allocator

    for name in cuda_allocator.ALLOC_CONF_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings: list[str] = []
    monkeypatch.setattr(cuda_allocator, "_set_allocator_settings", settings.append)
    trainer = SimpleNamespace(strategy=SingleDeviceStrategy(device=torch.device(device)))
    module = RegressionModule(SimpleModel(10, 10))
    recovery = OOMRecovery()
    recovery.setup(trainer, module, "validate")
    recovery.setup(trainer, module, "validate")  # a second setup (fit, then test) does not stack
    assert settings == expected[:1]
    recovery.teardown(trainer, module, "validate")
    assert settings == expected
    assert "validation_step" not in vars(module)  # the wrapper went with it
    settings.clear()
    opted_out = OOMRecovery(expandable_segments=False)
    opted_out.setup(trainer, module, "validate")
    opted_out.teardown(trainer, module, "validate")
    assert settings == []

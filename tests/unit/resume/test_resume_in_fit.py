"""Lightning fit + resume with lit_gpu's loaders, in process (SimpleModel on synthetic data, CPU).

Each test compares a run stopped mid-epoch and resumed from ``last.ckpt`` with one uninterrupted
reference run: 160 samples, batch 16 -> 10 steps per epoch, 2 epochs, stop at step 13 (epoch 1).
"""

from __future__ import annotations

import signal
import warnings
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader

from lit_gpu.callbacks import CheckpointOnInterrupt, FreshLastCheckpoint, RNGStateCallback
from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
from tests.helpers.resume import NoisyRegression, OneCycleRegression, SampleRecorder, StopAtStep
from tests.helpers.trainers import quiet_trainer

STOP = 13
UNRELIABLE = "not resumable"


def _sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


class PlainLoaderData(SyntheticRegressionDataModule):
    """The same data through a module's own plain shuffled DataLoader (made replayable by lit_gpu)."""

    loader_kwargs: dict = {"shuffle": True}  # noqa: RUF012

    def train_dataloader(self) -> DataLoader:
        return DataLoader(Noisy(self.train_set), batch_size=self.batch_size, **self.loader_kwargs)


class Noisy(torch.utils.data.Dataset):
    """A map-style dataset with a random augmentation (global torch RNG: the worker's, or the main one's)."""

    def __init__(self, data) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index):
        x, y = self.data[index]
        return x + 0.01 * torch.randn_like(x), y


def _plain(**loader_kwargs) -> type:
    return type("Plain", (PlainLoaderData,), {"loader_kwargs": loader_kwargs})


class _Every(torch.utils.data.Sampler):
    """A custom sampler without state."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        return iter(torch.randperm(self.n).tolist())

    def __len__(self) -> int:
        return self.n


class CustomSamplerData(SyntheticRegressionDataModule):
    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, sampler=_Every(len(self.train_set)))


def _fit(
    root: Path,
    *,
    stop: int = -1,
    stop_callback: bool = False,
    resume: bool = False,
    batch_size: int = 16,
    module_cls: type = RegressionModule,
    data_cls: type = SyntheticRegressionDataModule,
    rng_callback: bool = True,
    **module_kwargs,
) -> tuple[pl.LightningModule, SampleRecorder]:
    pl.seed_everything(42)
    recorder = SampleRecorder(str(root / "samples"))
    callbacks = [
        recorder,
        FreshLastCheckpoint(dirpath=root / "ckpt", save_last=True, every_n_train_steps=STOP),
    ]
    if rng_callback:
        callbacks.append(RNGStateCallback())
    if stop_callback:
        callbacks.append(StopAtStep(stop))
    if rng_callback:
        callbacks.append(CheckpointOnInterrupt())
    trainer = quiet_trainer(
        root,
        max_epochs=2,
        max_steps=-1 if stop_callback else stop,
        limit_val_batches=1,
        enable_checkpointing=True,
        deterministic=True,
        callbacks=callbacks,
    )
    model = module_cls(SimpleModel(4, 4), optimizer=_sgd, **module_kwargs)
    data = data_cls(in_features=4, out_features=4, num_samples=160, batch_size=batch_size)
    trainer.fit(model, datamodule=data, ckpt_path=str(root / "ckpt" / "last.ckpt") if resume else None)
    return model, recorder


def _assert_same_weights(a: pl.LightningModule, b: pl.LightningModule) -> None:
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y), name


def _epoch_samples(recorder: SampleRecorder, epoch: int) -> torch.Tensor:
    return torch.cat([x for e, x in recorder.batches if e == epoch])


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[pl.LightningModule, SampleRecorder]:
    return _fit(tmp_path_factory.mktemp("reference"))


def test_mid_epoch_resume_is_exact_and_restores_the_loader(tmp_path, reference):
    ref_model, ref_samples = reference
    _fit(tmp_path, stop=STOP)
    ckpt = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == STOP
    assert ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"] == [
        {"version": 1, "epoch": 1, "position": 48, "seed": 0, "shuffle": True, "num_items": 160}
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, samples = _fit(tmp_path, resume=True)
    # Lightning's "not resumable ... unreliable results" warning is not raised for these loaders
    assert not [w for w in caught if UNRELIABLE in str(w.message)]
    _assert_same_weights(model, ref_model)
    # the resumed run trained on exactly the rest of epoch 1, in the same order
    assert torch.equal(_epoch_samples(samples, 1), _epoch_samples(ref_samples, 1)[48:])


def test_without_the_loader_state_the_resume_is_not_exact(tmp_path, reference):
    """The feature cannot silently regress: dropping the saved loader state breaks the comparison."""
    ref_model, ref_samples = reference
    _fit(tmp_path, stop=STOP)
    path = tmp_path / "ckpt" / "last.ckpt"
    ckpt = torch.load(path, weights_only=True)
    del ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    torch.save(ckpt, path)
    model, samples = _fit(tmp_path, resume=True)
    resumed = _epoch_samples(samples, 1)
    assert torch.equal(resumed, _epoch_samples(ref_samples, 1)[: len(resumed)])  # epoch 1 replayed
    pairs = zip(model.state_dict().values(), ref_model.state_dict().values(), strict=True)
    assert not all(torch.equal(a, b) for a, b in pairs)


def test_onecycle_sized_by_estimated_stepping_batches_resumes_exactly(tmp_path):
    """Lightning #20550: reading estimated_stepping_batches in configure_optimizers drops the loader state."""
    ref_model, ref_samples = _fit(tmp_path / "ref", module_cls=OneCycleRegression)
    # stopped by a callback: max_steps would change the estimate and so the schedule itself
    _fit(tmp_path / "run", stop=STOP, stop_callback=True, module_cls=OneCycleRegression)
    model, samples = _fit(tmp_path / "run", resume=True, module_cls=OneCycleRegression)
    assert torch.equal(_epoch_samples(samples, 1), _epoch_samples(ref_samples, 1)[48:])
    _assert_same_weights(model, ref_model)
    # stock Lightning (no lit_gpu callback): the saved position is silently lost, epoch 1 replays
    _fit(tmp_path / "stock", stop=STOP, stop_callback=True, module_cls=OneCycleRegression, rng_callback=False)
    _, stock = _fit(tmp_path / "stock", resume=True, module_cls=OneCycleRegression, rng_callback=False)
    replayed = _epoch_samples(stock, 1)
    assert torch.equal(replayed, _epoch_samples(ref_samples, 1)[: len(replayed)])  # fails once fixed upstream


def test_changed_batch_size_continues_at_the_same_sample(tmp_path, reference):
    _, ref_samples = reference
    _fit(tmp_path, stop=STOP)  # 13 steps of 16: epoch 1 stopped at sample 48
    _, samples = _fit(tmp_path, resume=True, batch_size=8)
    epoch1 = [x for e, x in samples.batches if e == 1]
    assert len(epoch1) == (160 - 48) // 8  # the epoch ends exactly when its samples run out
    assert torch.equal(torch.cat(epoch1), _epoch_samples(ref_samples, 1)[48:])
    # Lightning's counters follow the loader: batch 6..19 of 20, so the epoch end (validation) happens
    assert [i for e, i in samples.batch_idx if e == 1] == list(range(6, 20))
    assert samples.validated == [1]


PLAIN = {
    "random": {"shuffle": True},
    "random_generators": {},  # a RandomSampler with its own generator, and the loader's generator
    "sequential": {"shuffle": False},
    "random_workers": {"shuffle": True, "num_workers": 2},
    "distributed": {},  # a DistributedSampler (what Lightning injects under DDP), shuffled by seed and epoch
}


def _plain_kwargs(kind: str) -> dict:
    """The loader's arguments, generators new (as a new process builds them)."""
    kwargs = dict(PLAIN[kind])
    if kind == "random_generators":
        sampler_generator = torch.Generator().manual_seed(3)
        kwargs["sampler"] = torch.utils.data.RandomSampler(range(160), generator=sampler_generator)
        kwargs["generator"] = torch.Generator().manual_seed(4)
    if kind == "distributed":
        kwargs["sampler"] = torch.utils.data.DistributedSampler(range(160), num_replicas=1, rank=0, seed=5)
    return kwargs


@pytest.mark.parametrize(
    "kind",
    ["random", "random_generators",
     *(pytest.param(k, marks=pytest.mark.full) for k in ("sequential", "random_workers", "distributed"))],
)  # fmt: skip
def test_a_modules_plain_dataloader_resumes_mid_epoch_exactly(kind, tmp_path, capsys):
    """A plain DataLoader of the module's own, stopped mid-epoch and resumed: the samples, their random
    augmentation and the weights of the uninterrupted run; no warning, no line."""
    data = _plain(**_plain_kwargs(kind))
    ref_model, ref_samples = _fit(tmp_path / "ref", module_cls=NoisyRegression, data_cls=data)
    data = _plain(**_plain_kwargs(kind))  # fresh generators, as a new process would build them
    _fit(tmp_path / "run", stop=STOP, module_cls=NoisyRegression, data_cls=data)
    ckpt = torch.load(tmp_path / "run" / "ckpt" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == STOP
    (state,) = ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    generators = 3 if kind == "random_generators" else 1  # global torch (+ the loader's, the sampler's)
    assert state["replay_state"] == 2 and len(state["generators"]) == generators
    data = _plain(**_plain_kwargs(kind))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, samples = _fit(tmp_path / "run", resume=True, module_cls=NoisyRegression, data_cls=data)
    assert not [w for w in caught if UNRELIABLE in str(w.message)]
    assert "cannot continue there" not in capsys.readouterr().err
    assert torch.equal(_epoch_samples(samples, 1), _epoch_samples(ref_samples, 1)[48:])
    _assert_same_weights(model, ref_model)


def test_a_loader_that_cannot_resume_mid_epoch_is_named_once(tmp_path, capsys):
    """A custom sampler without state: Lightning's warning and one lit_gpu line naming why."""
    _fit(tmp_path, stop=STOP, data_cls=CustomSamplerData)
    capsys.readouterr()
    with pytest.warns(UserWarning, match=UNRELIABLE):
        _fit(tmp_path, resume=True, data_cls=CustomSamplerData)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "cannot continue there" in ln]
    assert lines == [
        "lit-gpu: resumed at epoch 1/1 batch 3/10, but the training loader cannot continue there (its "
        "sampler _Every has no state): the rest of the epoch comes from the loader's start, so this run "
        "differs from an uninterrupted one"
    ]


def test_ctrl_c_in_the_middle_of_a_step_resumes_exactly(tmp_path):
    """The interrupted step drew random numbers and took a batch: the save rewinds both to its start."""
    ref_model, ref_samples = _fit(tmp_path / "ref", module_cls=NoisyRegression)
    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit):  # Lightning's graceful shutdown after KeyboardInterrupt
            _fit(tmp_path / "run", module_cls=NoisyRegression, interrupt_at=STOP)
    finally:
        signal.signal(signal.SIGINT, handler)  # Lightning ignores further SIGINTs after one
    ckpt = torch.load(tmp_path / "run" / "ckpt" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == STOP
    assert ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]["position"] == 48  # not 64
    model, samples = _fit(tmp_path / "run", resume=True, module_cls=NoisyRegression)
    assert torch.equal(_epoch_samples(samples, 1), _epoch_samples(ref_samples, 1)[48:])
    _assert_same_weights(model, ref_model)

"""RNGStateCallback's per-step snapshot: public APIs only, plain data, picklable and deep-copyable."""

from __future__ import annotations

import copy
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
from lit_gpu.resume import state as rng_state
from lit_gpu.resume.state import RNGStateCallback, _capture
from tests.helpers.trainers import quiet_trainer


def test_the_snapshot_is_what_each_librarys_getstate_says():
    random.seed(1)
    np.random.seed(1)
    np.random.normal()  # a cached Gaussian in numpy's legacy state
    random.gauss(0, 1)
    taken = rng_state._capture()
    assert taken["python"] == random.getstate()
    numpy_now = np.random.get_state()
    assert taken["numpy"][0] == numpy_now[0] and np.array_equal(taken["numpy"][1], numpy_now[1])
    assert taken["numpy"][2:] == numpy_now[2:]
    assert torch.equal(taken["torch"], torch.get_rng_state())


def test_no_interpreter_memory_is_read():
    source = Path(rng_state.__file__).read_text()
    assert "ctypes" not in source and "id(" not in source


def test_the_callback_pickles_and_deep_copies_before_and_after_a_fit(tmp_path):
    callback = RNGStateCallback()
    for clone in (pickle.loads(pickle.dumps(callback)), copy.deepcopy(callback)):
        assert isinstance(clone, RNGStateCallback)
    trainer = quiet_trainer(tmp_path, callbacks=[callback], max_steps=3)
    trainer.fit(RegressionModule(SimpleModel()), datamodule=SyntheticRegressionDataModule(num_samples=64))
    assert callback._step_state is not None
    clone = pickle.loads(pickle.dumps(callback))
    assert clone._step_state["python"] == callback._step_state["python"]
    copy.deepcopy(callback)


def _fit_and_keep(
    tmp_path, rng: RNGStateCallback, interrupt=None, signal_at: int | None = None
) -> list[set[str]]:
    """The RNG states kept after each step; ``interrupt._signal`` set during step ``signal_at`` only (as a
    first SIGINT leaves it, without the stop it then asks for)."""
    from lightning.pytorch.callbacks import Callback

    kept: list[set[str]] = []

    class Look(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if batch_idx == signal_at:
                interrupt._signal = 2

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            kept.append(set(rng._step_state))
            if interrupt is not None:
                interrupt._signal = None

    callbacks = [rng, Look(), *([interrupt] if interrupt is not None else [])]
    trainer = quiet_trainer(tmp_path, callbacks=callbacks, max_steps=4)
    trainer.fit(RegressionModule(SimpleModel()), datamodule=SyntheticRegressionDataModule(num_samples=256))
    return kept


def test_numpy_and_python_states_are_kept_each_step_where_a_save_can_land_mid_step(tmp_path):
    from lit_gpu.preemption import CheckpointOnInterrupt

    full = {"torch", "numpy", "python"}
    # without the interrupt callback a first Ctrl+C raises mid-step: every step keeps them
    assert _fit_and_keep(tmp_path, RNGStateCallback()) == [full] * 4
    # under it, a mid-step save needs a second signal: they are kept once a first one came (cheap before)
    kept = _fit_and_keep(tmp_path, RNGStateCallback(), CheckpointOnInterrupt(), signal_at=2)
    assert kept == [{"torch"}, {"torch"}, full, {"torch"}]


def test_a_mid_step_save_without_kept_host_states_saves_the_live_ones(tmp_path, monkeypatch):
    callback = RNGStateCallback()
    callback._step_state = rng_state._capture(host=False)
    monkeypatch.setattr(rng_state, "batches_in_flight", lambda trainer: 1)
    monkeypatch.setattr(rng_state, "patch_interrupted_loader_state", lambda *args: None)
    checkpoint = {"callbacks": {callback.state_key: {}}}
    callback.on_save_checkpoint(None, None, checkpoint)
    saved = checkpoint["callbacks"][callback.state_key]
    assert saved["python"] == [random.getstate()[0], list(random.getstate()[1]), random.getstate()[2]]
    assert torch.equal(saved["torch"], callback._step_state["torch"])


def _malformed(name: str) -> dict:
    state = RNGStateCallback().state_dict()
    if name == "python_short":
        state["python"] = (3, (1, 2, 3), None)
    elif name == "python_word_out_of_range":
        state["python"] = [3, [2**32] * 625, None]
    elif name == "python_version":
        state["python"][0] = 7
    elif name == "no_numpy":
        del state["numpy"]
    elif name == "numpy_tuple":
        state["numpy"] = ("MT19937", "keys")
    elif name == "numpy_kind":
        state["numpy"][0] = "PCG64"
    elif name == "numpy_keys_float":
        state["numpy"][1] = torch.zeros(624)
    elif name == "numpy_pos":
        state["numpy"][2] = 10_000
    elif name == "torch_size":
        state["torch"] = torch.zeros(3, dtype=torch.uint8)
    elif name == "torch_dtype":
        state["torch"] = state["torch"].float()
    elif name == "cuda_not_tensors":
        state["cuda"] = ["x"]
    elif name == "not_a_mapping":
        return [1, 2]  # type: ignore[return-value]
    return state


@pytest.mark.parametrize(
    "name",
    [
        "python_short",
        "python_word_out_of_range",
        "python_version",
        "no_numpy",
        "numpy_tuple",
        "numpy_kind",
        "numpy_keys_float",
        "numpy_pos",
        "torch_size",
        "torch_dtype",
        "cuda_not_tensors",
        "not_a_mapping",
    ],
)
def test_a_malformed_rng_state_is_one_line_naming_the_checkpoint_and_sets_nothing(name):
    from types import SimpleNamespace

    from lit_gpu.errors import LitGpuError

    callback = RNGStateCallback()
    callback._trainer = SimpleNamespace(ckpt_path="/runs/v0/checkpoints/last.ckpt")
    before = _capture()
    with pytest.raises(LitGpuError) as err:
        callback.load_state_dict(_malformed(name))
    message = str(err.value)
    assert "\n" not in message and "/runs/v0/checkpoints/last.ckpt" in message and "--ckpt_path" in message
    after = _capture()
    assert torch.equal(before["torch"], after["torch"]) and before["python"] == after["python"]
    assert np.array_equal(before["numpy"][1], after["numpy"][1])


def test_a_well_formed_rng_state_restores_every_generator():
    callback = RNGStateCallback()
    saved = callback.state_dict()
    drawn = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    callback.load_state_dict(saved)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == drawn

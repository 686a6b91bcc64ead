"""RNGStateCallback's per-step snapshot: public APIs only, plain data, picklable and deep-copyable."""

from __future__ import annotations

import copy
import pickle
import random
from pathlib import Path

import numpy as np
import torch

from lit_gpu.callbacks import rng_state
from lit_gpu.callbacks.rng_state import RNGStateCallback
from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
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

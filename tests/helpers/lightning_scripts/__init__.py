"""Lightning's own LightningCLI example scripts as published, with ``LightningCLI`` -> ``LitGpuCLI`` and tiny
offline data (issue 64); each is run as its user runs it: ``python <script>.py fit ...``.

Each keeps its original's LightningCLI usage (positions, its own subclass with ``add_arguments_to_parser``
and ``link_arguments``, ``trainer_defaults`` with callbacks and a progress bar, ``run=False`` then
``cli.trainer.fit``) and its data's shape (an ``IterableDataset``, a ``BaseFinetuning`` callback that adds a
param group at a milestone epoch); the downloads, torchvision backbones and gym environments are replaced by
seeded tensors and a few linear layers, so that a fit takes seconds on a CPU.

* ``fine_tuning.py``: ``examples/pytorch/domain_templates/computer_vision_fine_tuning.py``;
* ``imagenet.py``: ``examples/pytorch/domain_templates/imagenet.py``;
* ``qnet.py``: ``examples/pytorch/domain_templates/reinforce_learn_Qnet.py`` (its ``argparse`` main as a
  ``LightningCLI(DQNLightning, ...)``, as the issue's user wrote it);
* ``backbone_classifier.py``: ``examples/pytorch/basics/backbone_image_classifier.py`` (``run=False``).

:class:`SigtermAtStepFromEnv` is the test's stop: ``kill -TERM`` of the run at a step boundary.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import lightning.pytorch as pl

HERE = Path(__file__).resolve().parent
#: the global step after which the run sends itself SIGTERM (unset or empty: never)
ENV = "LIT_GPU_TEST_SIGTERM_AT"


class SigtermAtStepFromEnv(pl.Callback):
    """SIGTERM to its own process when batch ``step + 1`` is about to start (a cluster's preemption)."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = os.environ.get(ENV, "")
        if step and trainer.global_step == int(step):
            os.kill(os.getpid(), signal.SIGTERM)

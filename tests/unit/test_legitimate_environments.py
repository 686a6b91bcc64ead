"""Real launcher and cluster environments (tests/corpus/environments.py) pass lit_gpu's front door and keep
the meaning their upstream gives them: the Lightning cluster environment that reads them, its ranks and main
address, the GPUs CUDA sees (torch's own ``_parse_visible_devices``)."""

from __future__ import annotations

import os
import socket
from unittest import mock

import pytest
import torch.cuda
from lightning.fabric.plugins.environments import (
    KubeflowEnvironment,
    LightningEnvironment,
    LSFEnvironment,
    MPIEnvironment,
    SLURMEnvironment,
    TorchElasticEnvironment,
)

from lit_gpu import devices
from lit_gpu.cli.main import check_launch_env
from tests.corpus.environments import CASES, EnvCase

#: Lightning's order of detection (its accelerator connector's; Kubeflow is never detected, only given)
DETECTED = (SLURMEnvironment, TorchElasticEnvironment, LSFEnvironment, MPIEnvironment)
LAUNCHER_PREFIXES = (
    "SLURM",
    "RANK",
    "LOCAL_",
    "WORLD_SIZE",
    "GROUP_",
    "MASTER_",
    "TORCHELASTIC",
    "LSB_",
    "JSM_",
    "NODE_RANK",
    "SM_",
    "RAY_",
    "AZ",
)


def _environ(case: EnvCase, tmp_path) -> dict[str, str]:
    for name, text in case.files.items():
        (tmp_path / name).write_text(text)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_PREFIXES)}
    clean.pop("CUDA_VISIBLE_DEVICES", None)
    return {**clean, **{k: v.format(tmp=tmp_path) for k, v in case.env.items()}}


@pytest.mark.parametrize("case", CASES, ids=[case.name.split(",")[0].split(" (")[0] for case in CASES])
def test_a_real_environment_passes_with_its_upstream_meaning(case, tmp_path, monkeypatch):
    environ = _environ(case, tmp_path)
    assert devices.problems(environ) == {}
    assert devices.requeue_problem(environ) is None
    monkeypatch.setattr(socket, "gethostname", lambda: case.host)
    with mock.patch.dict(os.environ, environ, clear=True):
        check_launch_env(["fit"])  # the front door lets it through (no SystemExit)
        cuda = torch.cuda._parse_visible_devices()
        assert devices.visible_entries(os.environ.get("CUDA_VISIBLE_DEVICES")) == case.cuda
        assert cuda == (list(range(64)) if case.cuda is None else case.cuda)
        found = next((cls for cls in DETECTED if cls.detect()), LightningEnvironment)
        if case.cluster == "KubeflowEnvironment":  # given by the user (plugins), read as it reads it
            assert found is LightningEnvironment
            found = KubeflowEnvironment
        assert found.__name__ == case.cluster
        if case.ranks is not None:
            cluster = found()
            ranks = (cluster.global_rank(), cluster.world_size(), cluster.local_rank(), cluster.node_rank())
            assert ranks == case.ranks
            assert cluster.main_address == case.main_address


def test_the_corpus_covers_every_launcher():
    names = " ".join(case.name for case in CASES)
    for launcher in (
        "SLURM CPU",
        "SLURM GPU",
        "array",
        "heterogeneous",
        "torchrun",
        "Kubeflow",
        "LSF",
        "Open MPI",
        "Ray Train",
        "SageMaker",
        "Azure ML",
    ):
        assert launcher in names

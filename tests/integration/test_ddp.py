"""Real multi-process DDP on CPU (gloo): Lightning's launcher, torchrun, and two "nodes" on localhost.

Every run trains the same SimpleModel with SGD+momentum on the same unshuffled synthetic data.
Two processes with per-process batch B must end with the same weights as one process with batch
2B (DDP averages gradients; the mean of two half-batch means is the full-batch mean), and the
ranks must see disjoint halves of each global batch.
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.paths import CONFIGS
from tests.helpers.ports import free_port

B = 8
COMMON = [
    "fit",
    "--config",
    str(CONFIGS / "simple.yaml"),
    "--config",
    str(CONFIGS / "debug.yaml"),
    "--data.shuffle",
    "false",
    "--trainer.accelerator",
    "cpu",
    "--trainer.max_epochs",
    "2",
    "--trainer.limit_train_batches",
    "4",
]


def _recorder_config(tmp_path: Path) -> list[str]:
    cfg = tmp_path / "recorder.yaml"
    cfg.write_text(
        "trainer:\n  callbacks+:\n    - class_path: tests.helpers.recorder.BatchRecorder\n"
        f"      init_args:\n        out_dir: {tmp_path / 'batches'}\n"
    )
    return ["--config", str(cfg)]


def _last_weights(run_root: Path) -> dict[str, torch.Tensor]:
    (ckpt,) = run_root.glob("runs/lit_gpu/version_*/checkpoints/last.ckpt")
    return torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]


def _run(cmd: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    """One process, batch 2B: final weights and the batches it saw."""
    from lit_gpu.cli import LitGpuCLI

    root = tmp_path_factory.mktemp("single")
    import os

    cwd = os.getcwd()
    os.chdir(root)
    try:
        LitGpuCLI(
            args=[*COMMON, "--trainer.devices", "1", "--data.batch_size", str(2 * B), *_recorder_config(root)]
        )
    finally:
        os.chdir(cwd)
    batches = torch.load(root / "batches" / "rank0.pt")["inputs"]
    return _last_weights(root), batches


def _check_equivalent_and_sharded(root: Path, reference) -> None:
    ref_weights, ref_batches = reference
    weights = _last_weights(root)
    assert weights.keys() == ref_weights.keys()
    for key, value in weights.items():
        torch.testing.assert_close(value, ref_weights[key], atol=1e-5, rtol=0)
    ranks = [torch.load(root / "batches" / f"rank{r}.pt") for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    r0, r1 = ranks[0]["inputs"], ranks[1]["inputs"]
    assert len(r0) == len(r1) == len(ref_batches) == 8
    for a, b, full in zip(r0, r1, ref_batches, strict=True):
        assert a.shape[0] == b.shape[0] == B
        rows_a = {tuple(row.tolist()) for row in a}
        rows_b = {tuple(row.tolist()) for row in b}
        assert not rows_a & rows_b  # each rank sees a distinct shard
        assert rows_a | rows_b == {tuple(row.tolist()) for row in full}  # together: the global batch


def test_lightning_launcher_two_processes(tmp_path, cli_env, reference):
    exe = str(Path(sys.executable).parent / "lit-gpu")
    _run(
        [
            exe,
            *COMMON,
            "--trainer.devices",
            "2",
            "--trainer.strategy",
            "ddp",
            "--data.batch_size",
            str(B),
            *_recorder_config(tmp_path),
        ],
        tmp_path,
        cli_env,
    )
    _check_equivalent_and_sharded(tmp_path, reference)


def test_a_forked_run_forks_its_ddp_ranks_too(tmp_path, cli_env):
    """The test helper's fork server starts the ranks of a forked DDP run (no fresh import): proven here
    so the tests that rely on it for speed do not silently pay fresh starts, or test something else."""
    import json

    from tests.helpers.forked_cli import run_cli

    record = ["--trainer.callbacks+=tests.helpers.robustness.RecordRankProcess"]
    argv = [*COMMON[:-2], "--trainer.limit_train_batches", "2", "--trainer.max_epochs", "1", *record]
    done = run_cli([*argv, "--trainer.devices", "2", "--trainer.strategy", "ddp"], tmp_path, cli_env)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / "ranks" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["forked"] for r in ranks] == [True, True]
    assert ranks[1]["ppid"] != ranks[0]["pid"]  # a child of the server's manager, not of rank 0
    out = done.stdout + done.stderr  # rank 1 writes to the run's own stdout/stderr, as a Popen child does
    assert "GLOBAL_RANK: 0, MEMBER: 1/2" in out and "GLOBAL_RANK: 1, MEMBER: 2/2" in out, out[-3000:]


@pytest.mark.full  # torchrun: the full tier (Lightning's launcher: the default tier's sample)
def test_torchrun_two_processes(tmp_path, cli_env, reference):
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={free_port()}",
        "-m",
        "lit_gpu",
        *COMMON,
        "--trainer.devices",
        "2",
        "--trainer.strategy",
        "ddp",
        "--data.batch_size",
        str(B),
        *_recorder_config(tmp_path),
    ]
    _run(cmd, tmp_path, cli_env)
    _check_equivalent_and_sharded(tmp_path, reference)


@pytest.mark.full  # torchrun sampled by test_torchrun_two_processes; two agents: the full tier
def test_torchrun_two_nodes_on_localhost(tmp_path, cli_env, reference):
    port = free_port()
    procs = []
    for node_rank in (0, 1):
        node_dir = tmp_path / f"node{node_rank}"
        node_dir.mkdir()
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            f"--node_rank={node_rank}",
            "--nproc_per_node=1",
            "--master_addr=127.0.0.1",
            f"--master_port={port}",
            "-m",
            "lit_gpu",
            *COMMON,
            "--trainer.num_nodes",
            "2",
            "--trainer.devices",
            "1",
            "--trainer.strategy",
            "ddp",
            "--data.batch_size",
            str(B),
            *_recorder_config(tmp_path),
        ]
        procs.append(
            subprocess.Popen(
                cmd, cwd=node_dir, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    for proc in procs:
        out, err = proc.communicate(timeout=400)
        assert proc.returncode == 0, out[-2000:] + err[-4000:]
    (tmp_path / "runs").symlink_to(tmp_path / "node0" / "runs")
    _check_equivalent_and_sharded(tmp_path, reference)


@pytest.mark.full  # a third launcher (the default tier samples Lightning's and torchrun): the full tier
def test_ddp_spawn_two_processes(tmp_path, cli_env, reference):
    """``--trainer.strategy ddp_spawn`` pickles the Trainer with lit_gpu's callbacks into each process
    (issue 39: the RNG callback's memoryview made it fail before training): the same weights."""
    exe = str(Path(sys.executable).parent / "lit-gpu")
    _run(
        [exe, *COMMON, "--trainer.devices", "2", "--trainer.strategy", "ddp_spawn",
         "--data.batch_size", str(B), *_recorder_config(tmp_path)],
        tmp_path,
        cli_env,
    )  # fmt: skip
    _check_equivalent_and_sharded(tmp_path, reference)

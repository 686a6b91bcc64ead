"""``devices: free:N`` under DDP: one choice of GPUs per job, handed down to every rank (faked NVML)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lit_gpu import devices
from lit_gpu.errors import LitGpuError
from tests.helpers.fake_nvml import FakeGpu, install
from tests.helpers.fake_pynvml.pynvml import STATE_ENV, write_state
from tests.helpers.paths import REPO_ROOT

CONTEXT_GIB = 0.6  # what one CUDA context takes on its GPU
REAL_CUDA_INITIALIZED = devices._cuda_initialized


LAUNCHER_VARS = (
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "TORCHELASTIC_RUN_ID",
    "SLURM_NTASKS",
    "SLURM_JOB_NAME",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
)


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch):
    """Each test plays a fresh launching process: CUDA not initialised (even if the suite's process is),
    no launcher around it (even if the suite runs under torchrun or srun)."""
    monkeypatch.setattr(devices, "_cuda_initialized", lambda: False)
    for key in (*LAUNCHER_VARS, "CUDA_VISIBLE_DEVICES", devices.FREE_CHOICE_ENV):
        monkeypatch.delenv(key, raising=False)


def _setenv(monkeypatch, env: dict[str, str]) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def _gpus(*free_gib: float) -> list[FakeGpu]:
    return [FakeGpu(free_gib=f) for f in free_gib]


def _uuid_of_rank(env: dict[str, str], devices_value: list[int], local_rank: int) -> str:
    """The physical GPU (UUID) that ``cuda:devices[local_rank]`` is in a process with this env."""
    return env["CUDA_VISIBLE_DEVICES"].split(",")[devices_value[local_rank]]


def _fail_if_asked(fake) -> None:
    """From now on an NVML query fails the test: the ranks must not re-query."""

    def refuse() -> None:
        raise AssertionError("a rank asked NVML again instead of using the handed-down choice")

    fake.nvmlInit = refuse


# ---- today's failure: every process picks on its own -----------------------------------------
def test_old_per_process_pick_drifts_and_puts_two_ranks_on_one_gpu(monkeypatch):
    fake = install(monkeypatch, _gpus(80, 80))  # an idle two-GPU machine
    parent = devices.pick_free_gpus(2)  # rank 0 (the launching process)
    assert parent == [0, 1]  # the tie keeps CUDA order
    fake.gpus[parent[0]].free_gib -= CONTEXT_GIB  # rank 0's CUDA context lands on GPU 0
    child = devices.pick_free_gpus(2)  # rank 1 re-runs the same argv a moment later
    assert child == [1, 0]  # GPU 1 now looks more free
    rank0_gpu, rank1_gpu = parent[0], child[1]
    assert rank0_gpu == rank1_gpu == 0  # two ranks on GPU 0: NCCL "Duplicate GPU detected"


# ---- Lightning's launcher: the parent decides, the child inherits the environment -------------
@pytest.mark.parametrize(
    ("free", "n"),
    [
        ((80, 80), 2),  # exact tie
        ((80, 79.999), 2),  # near tie that the parent's context flips
        ((79.999, 80, 80, 12), 2),  # near tie among three
        ((80, 80, 80, 80), 4),
        ((10, 70, 30), 1),
    ],
)
def test_every_rank_gets_its_own_intended_gpu(monkeypatch, free, n):
    fake = install(monkeypatch, _gpus(*free))
    expected = [fake.gpus[i].uuid for i in sorted(range(len(free)), key=lambda i: (-free[i], i))[:n]]
    choice = devices.claim_free_gpus(n)
    parent_env = dict(os.environ)
    assert choice.decided_here and choice.devices == list(range(n))
    assert parent_env["CUDA_VISIBLE_DEVICES"] == ",".join(expected)  # most free first, UUIDs
    fake.gpus[choice.gpus[0].index].free_gib -= CONTEXT_GIB  # rank 0's context, as in the failure above
    _fail_if_asked(fake)
    used = {0: _uuid_of_rank(parent_env, choice.devices, 0)}
    for local_rank in range(1, n):  # what _SubprocessScriptLauncher gives each child
        launched = {"LOCAL_RANK": str(local_rank), "NODE_RANK": "0", "WORLD_SIZE": str(n)}
        _setenv(monkeypatch, launched)  # a copy of the parent's os.environ plus these
        inherited = devices.claim_free_gpus(n)
        assert not inherited.decided_here and inherited.gpus == choice.gpus
        assert dict(os.environ) == {**parent_env, **launched}  # the child changes nothing
        used[local_rank] = _uuid_of_rank(dict(os.environ), inherited.devices, local_rank)
    assert [used[r] for r in range(n)] == expected  # distinct, the intended ones, in rank order
    assert [g.uuid for g in choice.gpus] == expected


def test_choice_maps_through_an_existing_cuda_visible_devices(monkeypatch):
    fake = install(monkeypatch, _gpus(10, 70, 30, 50))
    uuids = [gpu.uuid for gpu in fake.gpus]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{uuids[3]},{uuids[0][:12]},{uuids[2]}")  # UUIDs, a prefix
    choice = devices.claim_free_gpus(2)
    assert [(g.local_rank, g.index) for g in choice.gpus] == [(0, 3), (1, 2)]  # GPU 1 is hidden
    assert os.environ["CUDA_VISIBLE_DEVICES"] == f"{fake.gpus[3].uuid},{fake.gpus[2].uuid}"
    assert json.loads(os.environ[devices.FREE_CHOICE_ENV])["gpus"][0] == {
        "local_rank": 0,
        "index": 3,
        "uuid": fake.gpus[3].uuid,
        "name": fake.gpus[3].name,
    }


@pytest.mark.integration
@pytest.mark.full  # three fresh interpreters; the hand-down through the environment: sampled in-process
def test_lightning_launcher_subprocesses_use_the_parents_choice(tmp_path, cli_env):
    """Real processes: Lightning's _SubprocessScriptLauncher starts the ranks; NVML is a fake module."""
    state = tmp_path / "nvml.json"
    write_state(state, _gpus(80, 80))
    env = {
        **cli_env,
        STATE_ENV: str(state),
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "tests/helpers/fake_pynvml"), cli_env["PYTHONPATH"]]),
    }
    del env["CUDA_VISIBLE_DEVICES"]
    script = REPO_ROOT / "tests/helpers/free_gpu_ranks.py"
    args = [sys.executable, str(script), "free:2", str(tmp_path)]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    uuids = [g["uuid"] for g in json.loads(state.read_text())["gpus"]]
    assert [r["uuid"] for r in ranks] == uuids  # rank 0 -> GPU 0, rank 1 -> GPU 1
    assert all(r["cuda_visible_devices"] == ",".join(uuids) and r["devices"] == [0, 1] for r in ranks)
    callers = [line.split() for line in (tmp_path / "nvml.json.calls").read_text().splitlines()]
    assert len(callers) == 1 and callers[0][1] == "-"  # only the launching process asked NVML, once


# ---- torchrun / srun: ranks start on their own --------------------------------------------------
TORCHRUN = {"TORCHELASTIC_RUN_ID": "x", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "2", "MASTER_PORT": "29500"}


def test_torchrun_ranks_are_refused_with_the_pick_free_recipe(monkeypatch):
    install(monkeypatch, _gpus(80, 80))
    for rank in (0, 1):  # both ranks, started together
        _setenv(monkeypatch, {**TORCHRUN, "LOCAL_RANK": str(rank), "RANK": str(rank)})
        with pytest.raises(LitGpuError) as info:
            devices.claim_free_gpus(2)
        message = str(info.value)
        assert "\n" not in message and "torchrun" in message
        assert "$(lit-gpu env --pick-free 2)" in message and "--trainer.devices 2" in message
        assert "CUDA_VISIBLE_DEVICES" not in os.environ and devices.FREE_CHOICE_ENV not in os.environ


def test_pick_free_before_torchrun_gives_each_rank_a_distinct_gpu(monkeypatch, capsys):
    from lit_gpu.commands import env as env_command

    fake = install(monkeypatch, _gpus(5, 80, 80, 79.999))
    assert env_command.main(["--pick-free", "2"]) == 0  # CUDA_VISIBLE_DEVICES=$(lit-gpu env --pick-free 2)
    out, err = capsys.readouterr()
    value = out.strip()
    assert value == f"{fake.gpus[1].uuid},{fake.gpus[2].uuid}" and out.count("\n") == 1
    assert "local rank 0 -> GPU 1" in err and "local rank 1 -> GPU 2" in err
    fake.gpus[1].free_gib -= CONTEXT_GIB  # rank 0 starts first; nothing re-queries anyway
    _fail_if_asked(fake)
    used = [_uuid_of_rank({"CUDA_VISIBLE_DEVICES": value}, [0, 1], r) for r in (0, 1)]  # --trainer.devices 2
    assert used == [fake.gpus[1].uuid, fake.gpus[2].uuid]


def test_one_process_per_node_may_choose_alone(monkeypatch):
    fake = install(monkeypatch, _gpus(20, 60))
    _setenv(
        monkeypatch, {**TORCHRUN, "LOCAL_WORLD_SIZE": "1", "LOCAL_RANK": "0", "GROUP_RANK": "1"}
    )  # node 1 of 2
    choice = devices.claim_free_gpus(1)
    assert choice.devices == [0] and os.environ["CUDA_VISIBLE_DEVICES"] == fake.gpus[1].uuid


@pytest.mark.parametrize(
    ("env", "launcher", "count"),
    [
        ({}, None, None),
        ({"LOCAL_RANK": "1"}, "LOCAL_RANK", None),
        ({"TORCHELASTIC_RUN_ID": "j", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4"}, "torchrun", 4),
        ({"SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_NTASKS_PER_NODE": "2"}, "srun", 2),
        ({"SLURM_NTASKS": "3", "SLURM_LOCALID": "0", "SLURM_STEP_TASKS_PER_NODE": "1(x3)"}, "srun", 1),
        ({"SLURM_NTASKS": "3", "SLURM_LOCALID": "0", "SLURM_STEP_TASKS_PER_NODE": "2,1"}, "srun", None),
        ({"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "train"}, "srun", 1),
        ({"SLURM_NTASKS": "2", "SLURM_JOB_NAME": "interactive"}, None, None),  # Lightning launches here
    ],
)
def test_external_launcher_detection(monkeypatch, env, launcher, count):
    _setenv(monkeypatch, env)
    assert devices.external_launcher() == launcher
    assert devices.local_process_count() == count


def test_srun_on_the_path_but_unused_adds_no_warning(monkeypatch, tmp_path):
    srun = tmp_path / "srun"
    srun.write_text("#!/bin/sh\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))  # Lightning's SLURM detection would warn here
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert devices.external_launcher() is None


def test_srun_tasks_are_refused(monkeypatch):
    install(monkeypatch, _gpus(80, 80))
    env = {"SLURM_NTASKS": "2", "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "2", "SLURM_JOB_NAME": "train"}
    _setenv(monkeypatch, env)
    with pytest.raises(LitGpuError, match=r"ranks started by srun.*--pick-free 2.*under SLURM"):
        devices.claim_free_gpus(2)


def test_a_rank_whose_inherited_choice_does_not_fit_is_refused(monkeypatch):
    install(monkeypatch, _gpus(80, 80, 80))
    devices.claim_free_gpus(2)
    _setenv(monkeypatch, {"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "0,1"})  # someone reset it
    with pytest.raises(LitGpuError, match="inherited LIT_GPU_FREE_CHOICE"):
        devices.claim_free_gpus(2)


def test_asking_again_in_the_deciding_process_reuses_the_choice(monkeypatch):
    fake = install(monkeypatch, _gpus(80, 80))
    first = devices.claim_free_gpus(2)
    fake.gpus[0].free_gib -= CONTEXT_GIB
    _fail_if_asked(fake)
    again = devices.claim_free_gpus(2)  # e.g. fit then test in one process
    assert again.gpus == first.gpus and again.devices == first.devices


def test_when_cuda_is_already_initialised_the_choice_keeps_cuda_numbering(monkeypatch):
    install(monkeypatch, _gpus(10, 70, 30))
    monkeypatch.setattr(devices, "_cuda_initialized", lambda: True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,1,0")
    choice = devices.claim_free_gpus(2)
    assert choice.devices == [1, 0]  # cuda:1 = GPU 1 (70), cuda:0 = GPU 2 (30)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,1,0"  # too late to narrow it in this process
    monkeypatch.setenv("LOCAL_RANK", "1")
    child = devices.claim_free_gpus(2)
    assert child.devices == [1, 0] and [g.index for g in child.gpus] == [1, 2]


def test_claim_creates_no_cuda_context(monkeypatch):
    import torch

    install(monkeypatch, _gpus(5, 6))
    before = torch.cuda.is_initialized()  # False in a CPU-only run; a GPU run may have used CUDA already
    devices.claim_free_gpus(2)
    assert torch.cuda.is_initialized() == before == REAL_CUDA_INITIALIZED()


def test_record_and_log_line_name_index_and_uuid(monkeypatch):
    fake = install(monkeypatch, _gpus(10, 70))
    choice = devices.claim_free_gpus(2)
    assert choice.record() == [
        {"local_rank": 0, "index": 1, "uuid": fake.gpus[1].uuid, "name": fake.gpus[1].name},
        {"local_rank": 1, "index": 0, "uuid": fake.gpus[0].uuid, "name": fake.gpus[0].name},
    ]
    line = choice.describe()
    assert "\n" not in line
    assert f"local rank 0 -> GPU 1 {fake.gpus[1].name} ({fake.gpus[1].uuid})" in line
    assert f"local rank 1 -> GPU 0 {fake.gpus[0].name} ({fake.gpus[0].uuid})" in line


def test_pick_free_with_too_few_gpus_is_one_line_and_prints_no_value(monkeypatch, capsys):
    from lit_gpu.cli import main

    install(monkeypatch, _gpus(80))
    with pytest.raises(SystemExit) as info:
        main(["env", "--pick-free", "2"])
    out, err = capsys.readouterr()
    assert info.value.code == 2 and out == ""
    (line,) = err.splitlines()
    assert line.startswith("lit-gpu: error: --pick-free 2 asks for 2 GPUs but only 1 is visible")


def test_a_garbled_record_is_one_line(monkeypatch):
    install(monkeypatch, _gpus(80))
    monkeypatch.setenv(devices.FREE_CHOICE_ENV, "GPU-1234")
    with pytest.raises(
        LitGpuError, match=r"LIT_GPU_FREE_CHOICE, line 1: not JSON.*unset LIT_GPU_FREE_CHOICE"
    ):
        devices.claim_free_gpus(1)

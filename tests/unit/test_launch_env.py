"""The launcher's and the cluster's variables read as data (lit_gpu.devices)."""

from __future__ import annotations

import pytest

from lit_gpu import devices

GOOD = {
    "RANK": "3",
    "LOCAL_RANK": "0",
    "WORLD_SIZE": "8",
    "NODE_RANK": "1",
    "MASTER_ADDR": "node-01.cluster",
    "MASTER_PORT": "29500",
    "SLURM_NTASKS": "8",
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "3",
    "SLURM_NODEID": "0",
    "SLURM_JOB_ID": "123456",
    "SLURM_NODELIST": "node[01-04,07],gpu-a",
    "CUDA_VISIBLE_DEVICES": "0,1,GPU-8f1d2a3b-aaaa-bbbb-cccc-0123456789ab",
}


def test_a_real_cluster_environment_passes():
    assert devices.problem(GOOD) is None
    assert devices.problem({"CUDA_VISIBLE_DEVICES": ""}) is None  # no GPU
    assert devices.problem({"MASTER_ADDR": "[::1]"}) is None
    assert devices.requeue_problem(GOOD) is None


@pytest.mark.parametrize(
    ("name", "value", "valid"),
    [
        ("RANK", "abc", "a whole number >= 0, e.g. RANK=0"),
        ("LOCAL_RANK", "-1", "a whole number >= 0"),
        ("WORLD_SIZE", "0", "a whole number >= 1"),
        ("MASTER_PORT", "70000", "a port number 1-65535"),
        ("MASTER_ADDR", "host; rm -rf ~", "a host name or IP address"),
        ("SLURM_NTASKS", "abc", "a whole number >= 1"),
        ("SLURM_JOB_ID", "1;touch x", "a job number"),
        ("SLURM_NODELIST", "$(id)", "host names or a SLURM range"),
    ],
)
def test_a_malformed_variable_is_one_line_naming_it_and_a_valid_value(name, value, valid):
    line = devices.problem({**GOOD, name: value})
    assert line is not None and "\n" not in line
    assert line.startswith(f"environment variable {name}={value!r}: ") and valid in line


@pytest.mark.parametrize("name", ["SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"])
def test_a_job_id_that_is_not_a_number_is_a_requeue_problem(name):
    assert devices.requeue_problem({name: "12 && touch pwned"}) is not None
    assert devices.requeue_problem({name: "12"}) is None


@pytest.mark.parametrize(("name", "value"), [("RANK", "+3"), ("LOCAL_RANK", " 1"), ("WORLD_SIZE", "8\n")])
def test_a_number_lightning_reads_with_int_passes(name, value):
    """Lightning's cluster environments read these numbers with ``int()``: what it reads, lit_gpu accepts."""
    assert int(value) >= 0 and devices.problem({name: value}) is None


def test_every_bad_variable_is_named_once():
    found = devices.problems({"RANK": "x", "MASTER_PORT": "0", "SLURM_NTASKS": "1"})
    assert list(found) == ["RANK", "MASTER_PORT"]
    assert all(line.startswith(f"environment variable {name}=") for name, line in found.items())


@pytest.mark.parametrize("value", ["NoDevFiles", "0,1,", "0;1", "", "-1", "MIG-4b1f/1/0"])
def test_cuda_visible_devices_is_never_refused(value):
    """CUDA reads any value (lit_gpu.devices mirrors torch's parser): lit-gpu env reports it."""
    assert devices.problem({**GOOD, "CUDA_VISIBLE_DEVICES": value}) is None


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("\u00b2", "torch.cuda.device_count() raises ValueError on it"),
        ("0,\u0661", "torch reads it as [0, 1], CUDA as [0]"),
    ],
)
def test_a_cuda_visible_devices_torch_and_cuda_read_differently_is_one_line(value, why, capsys, monkeypatch):
    """torch's ``_parse_visible_devices`` takes any Unicode digit, CUDA 0-9: ``fit`` would end in torch's
    ``ValueError`` (or count a GPU CUDA never shows); the front door says so in one line, exit 2."""
    from lit_gpu.cli.main import check_launch_env

    assert why in devices.problem({**GOOD, "CUDA_VISIBLE_DEVICES": value})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as stop:
        check_launch_env(["fit"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lit-gpu: error: environment variable CUDA_VISIBLE_DEVICES=")


@pytest.mark.parametrize("name", ["PL_SEED_WORKERS", "PL_GLOBAL_SEED"])
def test_lightnings_seed_variables_are_read_as_it_reads_them(name):
    """``PL_SEED_WORKERS=abc`` with ``--seed_everything false`` and DataLoader workers ended in a traceback
    (Lightning's ``_auto_add_worker_init_fn`` and lit_gpu's worker guard read it with ``int()``, as
    ``reset_seed`` reads ``PL_GLOBAL_SEED`` in every DDP rank): one line now; what ``int()`` reads passes."""
    assert f"environment variable {name}='abc'" in devices.problem({**GOOD, name: "abc"})
    for value in ("0", "1", "42", " 7 ", "-1"):
        assert devices.problem({**GOOD, name: value}) is None

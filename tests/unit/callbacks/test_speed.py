"""SpeedLevers.keep_host_memory: glibc keeps freed host memory for the next step (on by default)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from lit_gpu.callbacks import speed
from lit_gpu.callbacks.speed import SpeedLevers
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
from tests.helpers.paths import REPO_ROOT
from tests.helpers.trainers import quiet_trainer

GLIBC = sys.platform == "linux" and __import__("platform").libc_ver()[0] == "glibc"


def test_setup_keeps_host_memory_by_default_and_not_when_switched_off(monkeypatch, tmp_path):
    calls: list[str] = []
    monkeypatch.setattr(speed, "keep_freed_host_memory", lambda: calls.append("kept") or True)
    module = RegressionModule(SimpleModel())
    SpeedLevers().setup(quiet_trainer(tmp_path), module, "fit")
    assert calls == ["kept"]
    SpeedLevers(keep_host_memory=False).setup(quiet_trainer(tmp_path), module, "fit")
    assert calls == ["kept"]


def test_other_c_libraries_are_left_alone(monkeypatch):
    monkeypatch.setattr(speed, "_host_memory_kept", False)
    monkeypatch.setattr(speed.platform, "libc_ver", lambda: ("", ""))
    assert speed.keep_freed_host_memory() is False


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
@pytest.mark.integration  # a fresh interpreter importing torch: not the inner loop
def test_with_glibc_kept_memory_makes_training_steps_fault_in_no_new_pages():
    """In a fresh process: CPU training steps of FastMnistNet (a few MB of activations freed and allocated
    again every step) touch no fresh pages once memory is kept. (With glibc's defaults they touch up to
    ~1,800 a step, depending on its adaptive thresholds: benchmarks/host_memory.py.)"""
    script = textwrap.dedent(
        """
        import resource, sys
        import torch
        from torch.nn import functional as F
        sys.path.insert(0, sys.argv[1])
        from lit_gpu.callbacks.speed import keep_freed_host_memory
        from lit_gpu.nets import FastMnistNet

        assert keep_freed_host_memory() is True and keep_freed_host_memory() is True  # once per process
        torch.manual_seed(0)
        net = FastMnistNet(12, 24, kernel_size=5)
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        x, y = torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))

        def faults():
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            loss = F.cross_entropy(net(x.clone()), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

        torch.set_num_threads(1)
        per_step = [faults() for _ in range(25)][5:]  # the first steps grow the heap
        print(sorted(per_step)[len(per_step) // 2])
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(REPO_ROOT)], capture_output=True, text=True, check=True
    )
    assert int(out.stdout.split()[-1]) < 5  # the median step: none


def _nvml_loads() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def test_a_failing_nvml_probe_is_dropped_and_cuda_availability_is_unchanged(monkeypatch, tmp_path):
    import torch

    monkeypatch.setenv(speed.NVML_CHECK, "1")  # as `import lightning` sets it
    answer = torch.cuda.is_available(), torch.cuda.device_count()
    SpeedLevers(keep_host_memory=False).setup(quiet_trainer(tmp_path), RegressionModule(SimpleModel()), "fit")
    dropped = speed.NVML_CHECK not in os.environ
    assert dropped is (sys.platform == "linux" and not _nvml_loads())
    assert (torch.cuda.is_available(), torch.cuda.device_count()) == answer  # the same answer, cheaper


def test_the_nvml_variable_is_kept_where_nvml_loads_or_it_was_not_set(monkeypatch):
    monkeypatch.setattr(speed.ctypes, "CDLL", lambda name: object())  # NVML loads
    monkeypatch.setenv(speed.NVML_CHECK, "1")
    assert speed.skip_failing_nvml_probe() is False and os.environ[speed.NVML_CHECK] == "1"
    monkeypatch.delenv(speed.NVML_CHECK)
    assert speed.skip_failing_nvml_probe() is False

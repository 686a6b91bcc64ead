"""A fake ``pynvml`` for tests: a list of GPUs with free/total memory, capability and UUID."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

GIB = 2**30


class NVMLError(Exception):
    """Stands in for ``pynvml.NVMLError``."""


@dataclass
class FakeGpu:
    name: str = "NVIDIA A100-SXM4-80GB"
    total_gib: float = 80
    free_gib: float = 80
    capability: tuple[int, int] = (8, 0)
    uuid: str = ""


class FakeNVML:
    """Implements the pynvml calls lit_gpu uses; counts init/shutdown calls."""

    def __init__(
        self,
        gpus: list[FakeGpu],
        driver: str = "550.54.15",
        cuda_driver: int = 12040,
        fail_init: bool = False,
    ) -> None:
        self.gpus = gpus
        for i, gpu in enumerate(gpus):
            if not gpu.uuid:
                gpu.uuid = f"GPU-{i:08x}-aaaa-bbbb-cccc-{i:012x}"
        self.driver, self.cuda_driver, self.fail_init = driver, cuda_driver, fail_init
        self.inits = self.shutdowns = 0

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise NVMLError("NVML Shared Library Not Found")
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:
        return self.gpus[i]

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> SimpleNamespace:
        total, free = int(gpu.total_gib * GIB), int(gpu.free_gib * GIB)
        return SimpleNamespace(total=total, free=free, used=total - free)

    def nvmlDeviceGetCudaComputeCapability(self, gpu: FakeGpu) -> tuple[int, int]:
        return gpu.capability

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        return gpu.uuid

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> bytes:
        return gpu.name.encode()  # old pynvml versions return bytes

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda_driver


def install(monkeypatch, gpus: list[FakeGpu], **kwargs) -> FakeNVML:
    """Make lit_gpu.devices use a FakeNVML with these GPUs; returns it."""
    from lit_gpu import devices

    fake = FakeNVML(gpus, **kwargs)
    monkeypatch.setattr(devices, "_load_nvml", lambda: fake)
    return fake

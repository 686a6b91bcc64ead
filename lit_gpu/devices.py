"""GPU facts without a CUDA context: the GPUs NVML reports, which ones CUDA sees, ``precision: auto``.

Device facts only: the CLI applies them to a parsed config in :mod:`lit_gpu.cli.trainer`.

Everything here asks NVML (nvidia-ml-py), never ``torch.cuda``, so the parent process keeps CUDA
uninitialised and ``strategy: ddp_notebook``/``ddp_fork`` still work afterwards.

NVML numbers GPUs by PCI bus; CUDA numbers the GPUs that ``CUDA_VISIBLE_DEVICES`` leaves visible,
in the order it lists them. :func:`visible_gpus` maps one onto the other (indices and ``GPU-`` UUIDs).

Choosing GPUs by free memory (``devices: "free:N"``) is :mod:`lit_gpu.free_gpus`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from lit_gpu import visible_devices
from lit_gpu.errors import LitGpuError

# Measured in docs/benchmarks.md ("precision: auto on CPU"): see auto_precision().
CPU_BF16_IS_FASTER = True


class NvmlUnavailable(LitGpuError):
    """NVML (the NVIDIA driver's management library) cannot be loaded or initialised."""


@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU as NVML reports it.

    Attributes:
        index: NVML (PCI-bus) index, the numbering ``nvidia-smi`` shows.
        uuid: ``GPU-...`` UUID.
        name: Product name.
        total_bytes: Total memory.
        free_bytes: Free memory now.
        capability: CUDA compute capability ``(major, minor)``, ``None`` if unknown.
    """

    index: int
    uuid: str
    name: str
    total_bytes: int
    free_bytes: int
    capability: tuple[int, int] | None = None

    @property
    def bf16(self) -> bool:
        """bfloat16 tensor-core support (compute capability 8.0, Ampere, or newer)."""
        return self.capability is not None and self.capability >= (8, 0)

    def as_dict(self) -> dict[str, Any]:
        """The fields, capability as ``"8.0"``, plus ``bf16``."""
        data = asdict(self)
        data["capability"] = None if self.capability is None else f"{self.capability[0]}.{self.capability[1]}"
        data["bf16"] = self.bf16
        return data


def _load_nvml() -> ModuleType:
    import pynvml

    return pynvml


def nvml_text(value: Any) -> str:
    """An NVML string (``bytes`` in older nvidia-ml-py releases) as ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)


@contextmanager
def nvml_session() -> Iterator[ModuleType]:
    """``nvmlInit``/``nvmlShutdown`` around a block; raises :class:`NvmlUnavailable` on failure."""
    try:
        nvml = _load_nvml()
        nvml.nvmlInit()
    except Exception as err:  # ImportError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded...
        raise NvmlUnavailable(f"NVML is not available ({type(err).__name__}: {err})") from err
    try:
        yield nvml
    finally:
        with suppress(Exception):  # a failed shutdown changes nothing for the caller
            nvml.nvmlShutdown()


def query_gpus() -> list[GpuInfo]:
    """All physical GPUs in NVML order. Raises :class:`NvmlUnavailable` without a working driver."""
    gpus = []
    with nvml_session() as nvml:
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            try:
                capability = tuple(int(v) for v in nvml.nvmlDeviceGetCudaComputeCapability(handle))
            except Exception:
                capability = None
            gpus.append(
                GpuInfo(
                    index=i,
                    uuid=nvml_text(nvml.nvmlDeviceGetUUID(handle)),
                    name=nvml_text(nvml.nvmlDeviceGetName(handle)),
                    total_bytes=int(mem.total),
                    free_bytes=int(mem.free),
                    capability=capability,  # type: ignore[arg-type]
                )
            )
    return gpus


def parse_visible_devices(value: str | None, gpus: Sequence[GpuInfo]) -> list[int]:
    """NVML indices of the GPUs CUDA sees, in CUDA's order, for a ``CUDA_VISIBLE_DEVICES`` value.

    Read as CUDA and torch read it (:mod:`lit_gpu.visible_devices`, torch's ``_parse_visible_devices``):
    ``None`` (unset) shows every GPU; the list ends at the first entry that is not a device (``"0,1,"``
    is GPUs 0 and 1; ``""``, ``"-1"``, ``"NoDevFiles"`` none); ``GPU-`` UUIDs (a unique prefix is enough)
    are mapped as torch's ``_transform_uuid_to_ordinals`` maps them; an index past the GPUs present ends
    the list too (torch's ``_device_count_nvml``).

    Raises:
        LitGpuError: for ``MIG-`` entries (NVML reports the parent GPU's memory, not the slice's).
    """
    listed = visible_devices.entries(value)
    if listed is None:
        return [g.index for g in gpus]
    if listed and isinstance(listed[0], str):
        if listed[0].startswith("MIG-"):
            raise LitGpuError(
                f"CUDA_VISIBLE_DEVICES lists a MIG instance ({listed[0]}); 'free:N' cannot rank MIG slices: "
                "give trainer.devices explicitly"
            )
        return [gpus[i].index for i in visible_devices.uuid_ordinals(listed, [g.uuid for g in gpus])]
    picked: list[int] = []
    for ordinal in listed:
        if not isinstance(ordinal, int) or ordinal >= len(gpus):
            break
        picked.append(gpus[ordinal].index)
    return picked


def visible_gpus() -> list[GpuInfo]:
    """GPUs visible to CUDA in this process; position in the list = CUDA ordinal (``cuda:i``)."""
    gpus = query_gpus()
    by_index = {g.index: g for g in gpus}
    visible = [by_index[i] for i in parse_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), gpus)]
    if len({g.name for g in visible}) > 1 and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        warnings.warn(
            "GPUs of different models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA may number them "
            "differently from NVML/nvidia-smi; export CUDA_DEVICE_ORDER=PCI_BUS_ID",
            stacklevel=2,
        )
    return visible


# ---- precision: auto ---------------------------------------------------------------------------
def cpu_has_bf16(cpuinfo: str | Path = "/proc/cpuinfo") -> bool:
    """Whether the CPU has native bf16 instructions (``avx512_bf16`` or ``amx_bf16``)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return False
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def _cuda_available() -> bool:
    # Lightning sets PYTORCH_NVML_BASED_CUDA_CHECK=1: this query creates no CUDA context.
    from lightning.fabric.accelerators.cuda import CUDAAccelerator

    return CUDAAccelerator.is_available()


def device_ordinals(devices: Any, count: int) -> list[int]:
    """The ordinals below ``count`` that a ``Trainer(devices=...)`` value (not ``free:N``) selects.

    Unlike Lightning's ``CUDAAccelerator.parse_devices`` it does not check them against the GPUs
    present: it works without one, and the Trainer refuses what the machine lacks with its own error.
    """
    if devices is None or devices in ("auto", -1, "-1"):
        return list(range(count))
    if isinstance(devices, str):
        if "," not in devices and devices.strip().isdigit():
            devices = int(devices)  # "2": a count, as for 2
        else:
            devices = [int(p) for p in devices.split(",") if p.strip().isdigit()]
    if isinstance(devices, int):
        return list(range(min(devices, count)))
    return [int(d) for d in devices if int(d) < count]


def cpu_precision() -> str:
    """``bf16-mixed`` on CPUs with native bf16 (measured faster, same accuracy), else ``32-true``."""
    return "bf16-mixed" if CPU_BF16_IS_FASTER and cpu_has_bf16() else "32-true"


def auto_precision(accelerator: Any = "auto", devices: Any = "auto") -> str:
    """What ``precision: auto`` means for this machine and these Trainer settings.

    ``bf16-mixed`` when every selected GPU supports bf16 (compute capability >= 8.0), ``16-mixed``
    (float16 + GradScaler) on older GPUs, and on CPU :func:`cpu_precision`. Other accelerators
    (MPS, TPU...) get ``32-true``. Reads NVML only: no CUDA context is created.
    """
    acc = accelerator.lower() if isinstance(accelerator, str) else "auto"
    if acc == "cpu":
        return cpu_precision()
    if acc not in ("auto", "gpu", "cuda"):
        return "32-true"
    if not _cuda_available():
        if acc == "auto":
            from lightning.fabric.accelerators import MPSAccelerator, XLAAccelerator

            # what Trainer(accelerator="auto") picks when CUDA is absent: TPU, then MPS, then CPU
            other = XLAAccelerator.is_available() or MPSAccelerator.is_available()
            return "32-true" if other else cpu_precision()
        return cpu_precision()  # the Trainer will refuse the GPU request with its own error
    try:
        gpus = visible_gpus()
    except NvmlUnavailable:
        return "16-mixed"  # works on every CUDA GPU
    selected = [gpus[i] for i in device_ordinals(devices, len(gpus))] or gpus
    return "bf16-mixed" if selected and all(g.bf16 for g in selected) else "16-mixed"


def on_cuda(trainer: Any) -> bool:
    """Whether ``trainer`` (a ``Trainer`` or ``None``) runs this process on a CUDA device."""
    return trainer is not None and trainer.strategy.root_device.type == "cuda"

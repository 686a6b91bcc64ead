"""Devices, read without a CUDA context: the GPUs NVML reports, which ones ``CUDA_VISIBLE_DEVICES`` leaves
visible, ``devices: "free:N"``, ``precision: auto``, the launcher's variables, and device errors in one line.

Everything asks NVML, never ``torch.cuda``, so the parent process keeps CUDA uninitialised (``ddp_notebook``,
``ddp_fork`` still work). NVML numbers GPUs by PCI bus, CUDA the visible ones in ``CUDA_VISIBLE_DEVICES``
order: :func:`visible_gpus` maps one onto the other. ``CUDA_VISIBLE_DEVICES`` is read as CUDA and torch
read any value (up to the first entry that is not a device; ``""``, ``-1``, slurmd's ``NoDevFiles``: none;
``0,1,``: 0, 1; ``GPU-``/``MIG-`` UUID prefixes; a repeat: none): :func:`visible_entries` and
:func:`uuid_ordinals` are a declared mirror of torch's private ``torch.cuda._parse_visible_devices`` and
``_transform_uuid_to_ordinals`` (torch 2.14, pinned by ``tests/unit/test_visible_devices.py``). Only a value
the two read differently (a non-ASCII digit) is a problem (:func:`torch_disagrees`).

Lightning and torchmetrics read the launcher variables (``RANK``, ``SLURM_*``...) with ``int()`` on import:
the front door calls :func:`problems` first. This module imports lit_gpu's leaves only (torch lazily).
"""

from __future__ import annotations

import json
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from lit_gpu import messages
from lit_gpu.errors import LitGpuError
from lit_gpu.messages import CPU_FIX
from lit_gpu.textfiles import BadFileError, parse_json, read_yaml


# ---- CUDA_VISIBLE_DEVICES: a declared mirror of torch.cuda._parse_visible_devices ------------------
def _ascii_digit(char: str) -> bool:
    """A digit as C's ``strtoul`` reads one in the C locale (CUDA's reading): ``0``-``9`` only."""
    return "0" <= char <= "9"


def _strtoul(text: str, is_digit: Callable[[str], bool] = _ascii_digit) -> int:
    """The number ``text`` starts with, or -1 (torch's ``_strtoul``; ``is_digit=str.isdigit`` is torch's)."""
    if not text:
        return -1
    end = 0
    for end, char in enumerate(text):
        if not (is_digit(char) or (end == 0 and char in "+-")):
            break
        if end + 1 == len(text):
            end += 1
    return int(text[:end]) if end > 0 else -1


def _with_prefix(value: str, prefix: str) -> list[str]:
    """torch's ``parse_list_with_prefix``: entries up to the first without ``prefix``; a repeat: none."""
    found: list[str] = []
    for entry in value.split(","):
        if entry in found:  # a repeated id: CUDA shows no device at all
            return []
        if not entry.startswith(prefix):
            break
        found.append(entry)
    return found


def visible_entries(
    value: str | None, is_digit: Callable[[str], bool] = _ascii_digit
) -> list[int] | list[str] | None:
    """The devices a ``CUDA_VISIBLE_DEVICES`` value lists: ordinals, or ``GPU-``/``MIG-`` UUID prefixes;
    ``None`` when unset (every GPU). torch's ``_parse_visible_devices`` with CUDA's digits."""
    if value is None:
        return None
    if value.startswith("GPU-"):
        return _with_prefix(value, "GPU-")
    if value.startswith("MIG-"):
        return _with_prefix(value, "MIG-")
    ordinals: list[int] = []
    for entry in value.split(","):
        number = _strtoul(entry.strip(), is_digit)
        if number in ordinals:  # a repeated ordinal: CUDA shows no device at all
            return []
        if number < 0:  # not a number, empty or negative: the list ends here
            break
        ordinals.append(number)
    return ordinals


def uuid_ordinals(candidates: Sequence[str], uuids: Sequence[str]) -> list[int]:
    """The positions in ``uuids`` of UUID prefixes ``candidates``: up to the first unknown or ambiguous one;
    a repeat: none. Mirrors ``torch.cuda._transform_uuid_to_ordinals``."""
    found: list[int] = []
    for candidate in candidates:
        matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(candidate)]
        if len(matches) != 1:  # unknown or ambiguous: the list ends here
            break
        if matches[0] in found:
            return []
        found.append(matches[0])
    return found


def torch_disagrees(value: str | None) -> str | None:
    """Why torch (its NVML count, Lightning's ``num_cuda_devices``) and CUDA would not see the same GPUs
    for ``value``, or None (equal on every ASCII value)."""
    if value is None or value.isascii():
        return None
    try:
        torch_reads = visible_entries(value, str.isdigit)
    except ValueError:
        return "torch.cuda.device_count() raises ValueError on it (a digit int() cannot read)"
    cuda_reads = visible_entries(value)
    if torch_reads != cuda_reads:
        return f"torch reads it as {torch_reads}, CUDA as {cuda_reads} (CUDA reads the digits 0-9 only)"
    return None


def hides_all(value: str | None) -> bool:
    """Whether CUDA sees no GPU at all whatever the machine has (``""``, ``-1``, ``NoDevFiles``, ``0,0``)."""
    return value is not None and not visible_entries(value)


def read_whole(value: str | None) -> bool:
    """Whether CUDA reads every entry of ``value`` (a trailing comma and spaces aside): ``"0;1"`` (read as
    ``0``) or ``"0,x,1"`` (read as ``0``) is not, ``"0,1,"`` and ``"NoDevFiles"``'s intent ("none") are."""
    if value is None or value.strip() in ("", "-1", "NoDevFiles"):
        return True
    listed = visible_entries(value) or []
    typed = ",".join(part.strip() for part in value.split(",")).strip(",")
    return ",".join(str(item) for item in listed) == typed


# ---- NVML facts ----------------------------------------------------------------------------------
CPU_BF16_IS_FASTER = True  # measured: docs/benchmarks.md ("precision: auto on CPU")


class NvmlUnavailable(LitGpuError):
    """NVML (the NVIDIA driver's management library) cannot be loaded or initialised."""


@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU as NVML reports it (``index``: NVML's PCI-bus numbering, as ``nvidia-smi`` shows)."""

    index: int
    uuid: str  # GPU-...
    name: str
    total_bytes: int
    free_bytes: int  # free memory now
    capability: tuple[int, int] | None = None  # CUDA compute capability (major, minor), None if unknown

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
            uuid, name = nvml_text(nvml.nvmlDeviceGetUUID(handle)), nvml_text(nvml.nvmlDeviceGetName(handle))
            gpus.append(GpuInfo(i, uuid, name, int(mem.total), int(mem.free), capability))  # type: ignore[arg-type]
    return gpus


def parse_visible_devices(value: str | None, gpus: Sequence[GpuInfo]) -> list[int]:
    """NVML indices of the GPUs CUDA sees, in CUDA's order, for a ``CUDA_VISIBLE_DEVICES`` value, read as
    :func:`visible_entries` reads it; an index past the GPUs present ends the list (torch's
    ``_device_count_nvml``). ``MIG-`` entries raise LitGpuError (NVML reports the parent GPU's memory)."""
    listed = visible_entries(value)
    if listed is None:
        return [g.index for g in gpus]
    if listed and isinstance(listed[0], str):
        if listed[0].startswith("MIG-"):
            raise LitGpuError(
                f"CUDA_VISIBLE_DEVICES lists a MIG instance ({listed[0]}); 'free:N' cannot rank MIG slices: "
                "give trainer.devices explicitly"
            )
        return [gpus[i].index for i in uuid_ordinals(listed, [g.uuid for g in gpus])]
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
    """The ordinals below ``count`` that a ``Trainer(devices=...)`` value (not ``free:N``) selects; unlike
    Lightning's ``parse_devices`` it works without a GPU (the Trainer refuses what the machine lacks)."""
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
    """What ``precision: auto`` means here: ``bf16-mixed`` when every selected GPU supports bf16 (compute
    capability >= 8.0), ``16-mixed`` on older GPUs, :func:`cpu_precision` on CPU, ``32-true`` on MPS/TPU.
    Reads NVML only: no CUDA context is created."""
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


# ---- free:N: the visible GPUs with the most free memory, decided once per job ----------------------
FREE_PATTERN = re.compile(r"^\s*free\s*:\s*(\d+)\s*$", re.IGNORECASE)
FREE_UNDER_LAUNCHER = (
    "devices 'free:{n}' cannot be chosen inside ranks started by {launcher}: each rank would pick on its own "
    "and two could land on one GPU; pick once before launching, e.g. GPUS=$(lit-gpu env --pick-free {n}) "
    "&& CUDA_VISIBLE_DEVICES=$GPUS torchrun ... --trainer.devices {n} "
    "(under SLURM use the GPUs it allocates: --trainer.devices {n})"
)
FREE_RECORD_MISMATCH = (
    "devices 'free:{n}': this rank inherited {var} for free:{recorded_n} with CUDA_VISIBLE_DEVICES="
    "{recorded_visible!r}, but runs with free:{n} and CUDA_VISIBLE_DEVICES={visible!r}; unset {var} "
    "or start every rank with the same settings"
)
FREE_RECORD_GARBLED = "{var} is set but is not a record lit-gpu wrote ({reason}); unset it"
FREE_GPUS_CHOSEN = "free:{n} chose {ranks}; CUDA_VISIBLE_DEVICES={visible}, devices={devices}"


def parse_free_request(devices: Any) -> int | None:
    """``N`` for ``"free:N"``, else ``None``."""
    match = FREE_PATTERN.match(devices) if isinstance(devices, str) else None
    return int(match.group(1)) if match else None


def most_free_gpus(n: int, request: str | None = None) -> list[tuple[int, GpuInfo]]:
    """The ``n`` visible GPUs with the most free memory as ``(CUDA ordinal, GPU)``, most free first (ties
    keep CUDA order); LitGpuError for ``n < 1``, no NVML or too few GPUs, naming ``request``."""
    request = request or f"devices 'free:{n}'"
    if n < 1:
        raise LitGpuError(f"{request}: ask for at least one GPU")
    try:
        gpus = visible_gpus()
    except NvmlUnavailable as err:
        raise LitGpuError(
            f"{request} needs NVIDIA's driver to read free memory, but {err}; {CPU_FIX}"
        ) from err
    if len(gpus) < n:
        have = f"only {len(gpus)} {'is' if len(gpus) == 1 else 'are'} visible" if gpus else "none is visible"
        visibility = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = "" if visibility is None else f" (CUDA_VISIBLE_DEVICES={visibility!r})"
        raise LitGpuError(
            f"{request} asks for {n} GPU{'s' if n > 1 else ''} but {have}{where}; "
            f"ask for fewer{', or ' + CPU_FIX if not gpus else ''}"
        )
    ranked = sorted(range(len(gpus)), key=lambda pos: (-gpus[pos].free_bytes, pos))
    return [(pos, gpus[pos]) for pos in ranked[:n]]


def pick_free_gpus(n: int) -> list[int]:
    """CUDA ordinals of the ``n`` visible GPUs with the most free memory, most free first, asked now in this
    process: right for one process or ``ddp_notebook``/``ddp_spawn``; under ``ddp`` every rank would pick
    again: use :func:`claim_free_gpus` there."""
    return [ordinal for ordinal, _ in most_free_gpus(n)]


# free:N for a whole job: the launching process sets CUDA_VISIBLE_DEVICES to the chosen UUIDs and records the
# choice in LIT_GPU_FREE_CHOICE (JSON); the ranks Lightning starts inherit both and never ask NVML.
FREE_CHOICE_ENV = "LIT_GPU_FREE_CHOICE"
ENV_FIX = f"unset {FREE_CHOICE_ENV} (a parent lit-gpu sets it for the ranks it starts)"


@dataclass(frozen=True)
class ChosenGpu:
    """One GPU of a ``free:N`` choice (``index``: NVML's numbering)."""

    local_rank: int  # the process on this node that uses it (cuda:<local_rank> after the hand-down)
    index: int
    uuid: str
    name: str


@dataclass(frozen=True)
class FreeChoice:
    """The GPUs a job's ``free:N`` stands for, and how this process uses them."""

    n: int
    gpus: tuple[ChosenGpu, ...]  # in local-rank order (most free first when decided)
    devices: list[int]  # the Trainer(devices=...) value for this process
    cuda_visible_devices: str | None  # what every local rank runs with (None: unset)
    decided_here: bool = True  # False where the choice was inherited

    def to_env(self) -> str:
        """The JSON text stored in :data:`FREE_CHOICE_ENV`."""
        data = {"n": self.n, "gpus": self.record(), "devices": self.devices}
        return json.dumps({**data, "cuda_visible_devices": self.cuda_visible_devices}, separators=(",", ":"))

    @classmethod
    def from_env(cls, text: str) -> FreeChoice:
        """Parse a :data:`FREE_CHOICE_ENV` value (``decided_here`` is ``False``)."""
        data = parse_json(text, f"${FREE_CHOICE_ENV}", fix=ENV_FIX)
        return cls(
            n=int(data["n"]),
            gpus=tuple(ChosenGpu(**g) for g in data["gpus"]),
            devices=[int(d) for d in data["devices"]],
            cuda_visible_devices=data["cuda_visible_devices"],
            decided_here=False,
        )

    def record(self) -> list[dict[str, Any]]:
        """One entry per local rank (``local_rank``, ``index``, ``uuid``, ``name``) for the saved config."""
        return [asdict(g) for g in self.gpus]

    def describe(self) -> str:
        """One log line: which physical GPU each local rank uses."""
        ranks = ", ".join(
            messages.FREE_GPU_OF_RANK.format(rank=g.local_rank, index=g.index, name=g.name, uuid=g.uuid)
            for g in self.gpus
        )
        visible = "unchanged" if self.cuda_visible_devices is None else repr(self.cuda_visible_devices)
        return FREE_GPUS_CHOSEN.format(n=self.n, ranks=ranks, visible=visible, devices=self.devices)


def external_launcher() -> str | None:
    """``"torchrun"``, ``"srun"`` or ``"LOCAL_RANK"`` when ranks were started outside lit_gpu, else ``None``,
    as Lightning's cluster environments decide (torchelastic, SLURM, a set ``LOCAL_RANK``)."""
    from lightning.fabric.plugins import environments as cluster
    from lightning.fabric.utilities.warnings import PossibleUserWarning

    if cluster.TorchElasticEnvironment.detect():
        return "torchrun"
    with warnings.catch_warnings():  # "srun is available but not used": the Trainer's own detection says it
        warnings.simplefilter("ignore", PossibleUserWarning)
        if cluster.SLURMEnvironment.detect():
            return "srun"
    return "LOCAL_RANK" if cluster.LightningEnvironment().creates_processes_externally else None


def local_process_count() -> int | None:
    """How many processes an external launcher started on this node, ``None`` when unknown: torchrun's
    ``LOCAL_WORLD_SIZE``, SLURM's per-node task counts (``"2"``, ``"2(x3),1"``); Lightning reads neither."""
    env = os.environ
    if env.get("LOCAL_WORLD_SIZE", "").isdigit():
        return int(env["LOCAL_WORLD_SIZE"])
    if env.get("SLURM_NTASKS") == "1":
        return 1
    for key in ("SLURM_NTASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        if value := env.get(key):
            counts = {int(m) for m in re.findall(r"(\d+)(?:\(x\d+\))?", value)}
            return counts.pop() if len(counts) == 1 else None
    return None


def _cuda_initialized() -> bool:
    torch = sys.modules.get("torch")  # never import torch just to ask
    return bool(torch is not None and torch.cuda.is_initialized())


def claim_free_gpus(n: int) -> FreeChoice:
    """Resolve ``free:N`` once per job: the launching process asks NVML, sets ``CUDA_VISIBLE_DEVICES`` to the
    chosen UUIDs, records the choice in :data:`FREE_CHOICE_ENV` (Lightning's launcher copies both into its
    ranks, which reuse the record) and returns ``devices=[0, ..., N-1]``; ranks of torchrun/srun without a
    record are refused (unless one per node). With CUDA initialised here: the ordinals as they are."""
    env = os.environ
    if n < 1:
        raise LitGpuError(f"devices 'free:{n}': ask for at least one GPU, e.g. 'free:1'")
    launcher = external_launcher()
    if recorded := env.get(FREE_CHOICE_ENV):
        try:
            choice = FreeChoice.from_env(recorded)
        except (ValueError, KeyError, TypeError) as err:
            reason = messages.shown(f"{type(err).__name__}: {err}", limit=120)
            raise LitGpuError(FREE_RECORD_GARBLED.format(var=FREE_CHOICE_ENV, reason=reason)) from err
        if choice.n == n and env.get("CUDA_VISIBLE_DEVICES") == choice.cuda_visible_devices:
            return choice
        if launcher is not None:
            visible, recorded_visible = env.get("CUDA_VISIBLE_DEVICES"), choice.cuda_visible_devices
            raise LitGpuError(
                FREE_RECORD_MISMATCH.format(
                    n=n,
                    var=FREE_CHOICE_ENV,
                    recorded_n=choice.n,
                    recorded_visible=recorded_visible,
                    visible=visible,
                )
            )
    if launcher is not None and local_process_count() != 1:
        who = "a launcher (LOCAL_RANK is set)" if launcher == "LOCAL_RANK" else launcher
        raise LitGpuError(FREE_UNDER_LAUNCHER.format(n=n, launcher=who))
    picked = most_free_gpus(n)
    chosen = tuple(ChosenGpu(rank, gpu.index, gpu.uuid, gpu.name) for rank, (_, gpu) in enumerate(picked))
    if _cuda_initialized():  # too late to narrow this process's visibility: keep its numbering
        choice = FreeChoice(n, chosen, [ordinal for ordinal, _ in picked], env.get("CUDA_VISIBLE_DEVICES"))
    else:
        choice = FreeChoice(n, chosen, list(range(n)), ",".join(g.uuid for g in chosen))
        env["CUDA_VISIBLE_DEVICES"] = choice.cuda_visible_devices  # type: ignore[assignment]
    env[FREE_CHOICE_ENV] = choice.to_env()
    return choice


# ---- the launcher's and the cluster's variables, read as data -----------------------------------
# A SLURM job id is also a word Lightning's requeue handler puts in `scontrol requeue <id>` through a shell:
# requeue_problem keeps any id that is not a number (123, or an array job's 123_4) from reaching it.
_JOB = re.compile(r"[0-9]+")  # a SLURM job or task number: the word scontrol gets, digits only
# MASTER_ADDR: what torch.distributed's TCPStore resolves (a host name, an IPv4 or a bracketed or bare IPv6
# address with its %zone), never shell words
_HOST = re.compile(r"[A-Za-z0-9._:%\[\]-]+")
# SLURM_NODELIST: hostlist syntax as Lightning's SLURMEnvironment.resolve_root_node_address reads it
# (node[01-04,07],gpu-a; hetero jobs' lists joined by commas)
_NODELIST = re.compile(r"[A-Za-z0-9._,\[\] -]+")

_WHOLE_NUMBER = "a whole number >= 0, e.g. {name}=0"
_COUNT = "a whole number >= 1, e.g. {name}=2"

# Each accepted set is the upstream reader's: Lightning's cluster environments (lightning.fabric.plugins.
# environments: torchelastic, kubeflow, slurm, lightning) and rank_zero._get_rank read these numbers with
# int(), torchrun and Kubeflow's PyTorchJob write them; lit_gpu's bound on top: not negative (a count >= 1).
# CUDA_VISIBLE_DEVICES: CUDA reads any value; only one torch reads differently is a problem (torch_disagrees).
RULES: dict[str, tuple[str, str]] = {
    "RANK": ("whole", _WHOLE_NUMBER),
    "LOCAL_RANK": ("whole", _WHOLE_NUMBER),
    "NODE_RANK": ("whole", _WHOLE_NUMBER),
    "GROUP_RANK": ("whole", _WHOLE_NUMBER),
    "WORLD_SIZE": ("count", _COUNT),
    "LOCAL_WORLD_SIZE": ("count", _COUNT),
    "MASTER_PORT": ("port", "a port number 1-65535, e.g. MASTER_PORT=29500"),
    "MASTER_ADDR": ("host", "a host name or IP address, e.g. MASTER_ADDR=127.0.0.1"),
    "SLURM_NTASKS": ("count", _COUNT),
    "SLURM_NNODES": ("count", _COUNT),
    "SLURM_NTASKS_PER_NODE": ("count", _COUNT),
    "SLURM_PROCID": ("whole", _WHOLE_NUMBER),
    "SLURM_LOCALID": ("whole", _WHOLE_NUMBER),
    "SLURM_NODEID": ("whole", _WHOLE_NUMBER),
    "SLURM_JOB_ID": ("job", "a job number, e.g. SLURM_JOB_ID=123456"),
    "SLURM_ARRAY_JOB_ID": ("job", "a job number, e.g. SLURM_ARRAY_JOB_ID=123456"),
    "SLURM_ARRAY_TASK_ID": ("job", "a task number, e.g. SLURM_ARRAY_TASK_ID=3"),
    "SLURM_NODELIST": ("nodes", "host names or a SLURM range, e.g. SLURM_NODELIST=node[1-4]"),
    # written by Lightning's seed_everything, read back with int() by its reset_seed and worker init
    "PL_GLOBAL_SEED": ("int", "a whole number, e.g. PL_GLOBAL_SEED=42 (Lightning's seed_everything sets it)"),
    "PL_SEED_WORKERS": ("int", "0 or 1, e.g. PL_SEED_WORKERS=1 (Lightning's seed_everything writes it)"),
    "CUDA_VISIBLE_DEVICES": ("cuda", "{why}; give GPU indices in the digits 0-9 or UUIDs, e.g. {name}=0,1"),
}

BAD_VARIABLE = "environment variable {name}={value}: {valid}; fix or unset it (set by you or the launcher)"


def _number(value: str) -> int | None:
    """``value`` as Lightning reads it (``int()``), or None when that raises."""
    try:
        return int(value)
    except ValueError:
        return None


def _valid(kind: str, value: str) -> bool:
    if kind == "cuda":
        return torch_disagrees(value) is None
    if kind in ("whole", "count", "port"):
        number = _number(value)
        low, high = {"whole": (0, None), "count": (1, None), "port": (1, 65535)}[kind]
        return number is not None and number >= low and (high is None or number <= high)
    if kind == "int":
        return _number(value) is not None
    if kind == "job":
        return _JOB.fullmatch(value) is not None
    if kind == "host":
        return _HOST.fullmatch(value) is not None
    if kind == "nodes":
        return _NODELIST.fullmatch(value) is not None and value.strip() != ""
    raise ValueError(kind)


def problems(environ: Mapping[str, str]) -> dict[str, str]:
    """Every malformed launcher or cluster variable: its name -> one line (what it is, a valid example)."""
    found = {}
    for name, (kind, valid) in RULES.items():
        value = environ.get(name)
        if value is not None and not _valid(kind, value):
            why = torch_disagrees(value) if kind == "cuda" else None
            found[name] = BAD_VARIABLE.format(
                name=name, value=repr(value)[:80], valid=valid.format(name=name, why=why)
            )
    return found


def problem(environ: Mapping[str, str]) -> str | None:
    """The first malformed launcher or cluster variable, as one line (what it is, a valid example); None."""
    return next(iter(problems(environ).values()), None)


def requeue_problem(environ: Mapping[str, str]) -> str | None:
    """Why the SLURM job id Lightning's requeue handler would pass to ``scontrol`` is unsafe, or None."""
    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        value = environ.get(name)
        if value is not None and _JOB.fullmatch(value) is None:
            return BAD_VARIABLE.format(name=name, value=repr(value)[:80], valid=RULES[name][1])
    return None


# ---- the CLI's trainer settings: resolution before the Trainer is built, its errors as one line -----
def allow_auto_precision(parser: Any) -> None:
    """Let ``--trainer.precision`` accept ``auto`` (the CLI resolves it); jsonargparse has no public way to
    widen a signature argument's type: :func:`lit_gpu.upstream.widen_type` (pinned) edits it."""
    from lit_gpu.upstream import widen_type

    widen_type(parser, "trainer.precision", lambda typehint: typehint | Literal["auto"] | None)


def resolve_trainer_config(trainer: Any) -> FreeChoice | None:
    """Rewrite ``devices: "free:N"`` (:func:`claim_free_gpus`; the deciding process says which GPUs it chose)
    and ``precision: auto`` in a parsed ``trainer`` config, in place; returns the choice or ``None``."""
    devices = trainer.get("devices", "auto")
    choice = None
    n = parse_free_request(devices)
    if n is not None:
        choice = claim_free_gpus(n)
        trainer["devices"] = devices = choice.devices
        if choice.decided_here:  # one deciding process per node: every node logs its own choice
            print(messages.PREFIX + messages.one_line(choice.describe()), file=sys.stderr, flush=True)
    precision = trainer.get("precision")
    if isinstance(precision, str) and precision.strip().lower() == "auto":
        trainer["precision"] = auto_precision(trainer.get("accelerator", "auto"), devices)
    return choice


def as_argv(args: Any) -> list[str]:
    """The command-line list the CLI was given (``[]`` for a dict or Namespace of settings)."""
    return [str(a) for a in args] if isinstance(args, list | tuple) else []


def _yaml_lookup(path: str, dotted: str) -> Any:
    try:
        data = read_yaml(path)
    except (OSError, BadFileError):
        return None
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def setting_source(key: str, argv: Sequence[str]) -> str | None:
    """Which argument set ``key`` last, as the user wrote it (``"--trainer.accelerator gpu"``,
    ``"configs/trainer/gpu.yaml (trainer.accelerator: gpu)"``), or ``None``."""
    args = list(argv)
    flag = f"--{key}"
    found = None
    i = 0
    while i < len(args):
        arg = args[i]
        value: str | None = None
        if arg == flag or arg in ("--config", "-c"):
            value = args[i + 1] if i + 1 < len(args) else None
            i += 1
        elif arg.startswith(flag + "=") or arg.startswith("--config="):
            value = arg.split("=", 1)[1]
        if value is not None:
            if arg.startswith(flag):
                found = f"{flag} {value}"
            else:
                setting = _yaml_lookup(value, key)
                if setting is not None:
                    found = f"{value} ({key}: {setting})"
        i += 1
    return found


def _why_no_gpu() -> str:
    import torch

    if torch.version.cuda is None:
        return " (this torch is a CPU-only build)"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hides_all(visible):  # read as CUDA reads it: "", "-1", "NoDevFiles", "0,0"
        return f" (CUDA_VISIBLE_DEVICES={visible!r} hides all GPUs)"
    return ""


_NO_GPU = ("No supported gpu backend found", "`CUDAAccelerator` can not run on your system")
_NO_GPU += ("GPUs requested but none are available",)
_TOO_FEW = re.compile(r"You requested gpu: (\[.*?\])\s*But your machine only has: (\[.*?\])", re.S)


def explain_device_error(err: BaseException, argv: Sequence[str]) -> str | None:
    """One line for Lightning's no-GPU / too-few-GPUs errors, naming the setting in ``argv``, or None."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    if not isinstance(err, MisconfigurationException):
        return None
    message = str(err)
    if any(pattern in message for pattern in _NO_GPU):
        source = setting_source("trainer.accelerator", argv)
        if "GPUs requested" in message:
            source = setting_source("trainer.devices", argv) or source
        return messages.NO_GPU.format(source=source or "the trainer settings", why=_why_no_gpu())
    match = _TOO_FEW.search(message)
    if match:
        requested, available = match.groups()
        count = len([x for x in available.strip("[]").split(",") if x.strip()])
        return messages.TOO_FEW_GPUS.format(
            source=setting_source("trainer.devices", argv) or "trainer.devices",
            requested=requested,
            count=count,
            verb="is" if count == 1 else "are",
            available=available,
        )
    return None


_NAMED = re.compile(r"`(?:Trainer\()?(\w+)")
_JOINED = re.compile(r"[a-z0-9]+(?:_[a-z0-9]+)+")  # limit_train_batches: never an ordinary word


def _trainer_params() -> set[str]:
    import inspect

    import lightning.pytorch as pl

    return set(inspect.signature(pl.Trainer.__init__).parameters) - {"self"}


def explain_trainer_error(err: BaseException, argv: Sequence[str]) -> str | None:
    """One line naming the source in ``argv`` of a ``trainer`` setting the Trainer refused (Lightning's
    ``MisconfigurationException``; a ``ValueError``/``ImportError`` naming a Trainer argument or a missing
    requirement), or None."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    device = explain_device_error(err, argv)
    if device is not None:
        return device
    if not isinstance(err, MisconfigurationException | ValueError | TypeError | ImportError):
        return None
    reason = messages.first_line(err).rstrip(".")
    params = _trainer_params()
    named = [n for n in _NAMED.findall(reason) if n in params]
    named += [p for p in sorted(params) if re.search(rf"\b{p}=", reason) and p not in named]
    # Lightning's _determine_batch_limits names a setting bare ("invalid value nan for limit_train_batches"):
    # a Trainer argument with an underscore is never an ordinary word
    bare = [p for p in sorted(params) if _JOINED.fullmatch(p) and re.search(rf"\b{p}\b", reason)]
    named += [p for p in bare if p not in named]
    requirement = "Requirement '" in reason
    if not isinstance(err, MisconfigurationException) and not named and not requirement:
        return None
    keys = named or ["accelerator", "strategy", "precision", "plugins"]
    sources = [setting_source(f"trainer.{key}", argv) for key in keys]
    source = next((s for s in sources if s), f"trainer.{named[0]}" if named else "the trainer settings")
    return messages.BAD_TRAINER_SETTING.format(source=source, reason=reason)

"""Choosing GPUs by free memory: ``devices: "free:N"`` and ``lit-gpu env --pick-free N``.

The facts come from :mod:`lit_gpu.devices` (NVML, never ``torch.cuda``, so the parent process keeps CUDA
uninitialised and ``strategy: ddp_notebook``/``ddp_fork`` still work afterwards); this room ranks the visible
GPUs by free memory and decides which ones a run uses.

``free:N`` for a multi-process job is decided once and handed down (:func:`claim_free_gpus`): the
launching process sets ``CUDA_VISIBLE_DEVICES`` to the chosen UUIDs and records the choice in
``LIT_GPU_FREE_CHOICE``; the ranks Lightning starts inherit both and never ask NVML. Who started a
process (torchrun, srun, Lightning) is Lightning's cluster environments' answer.
"""

from __future__ import annotations

import json
import os
import re
import sys
import warnings
from dataclasses import asdict, dataclass
from typing import Any

from lit_gpu import messages
from lit_gpu.devices import GpuInfo, NvmlUnavailable, visible_gpus
from lit_gpu.errors import LitGpuError
from lit_gpu.files.text import parse_json
from lit_gpu.messages import CPU_FIX

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
    """The ``n`` visible GPUs with the most free memory as ``(CUDA ordinal, GPU)``, most free first.

    Ties keep CUDA order. ``request`` names the asking setting in errors (default ``devices 'free:N'``).

    Raises:
        LitGpuError: ``n < 1``, NVML unavailable, or fewer than ``n`` GPUs visible.
    """
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
    """CUDA ordinals of the ``n`` visible GPUs with the most free memory, most free first.

    Asks NVML now, in this process: right for one process, or for launchers that pass the list
    to their workers (``ddp_notebook``, ``ddp_spawn``). Under ``strategy: ddp`` every rank re-runs
    the script and would pick again; use :func:`claim_free_gpus` there. Raises as :func:`most_free_gpus`.
    """
    return [ordinal for ordinal, _ in most_free_gpus(n)]


# ---- free:N for a whole job: decide once, hand down through the environment -------------------
FREE_CHOICE_ENV = "LIT_GPU_FREE_CHOICE"
ENV_FIX = f"unset {FREE_CHOICE_ENV} (a parent lit-gpu sets it for the ranks it starts)"
"""Environment variable with the JSON record of a job's ``free:N`` choice (set by the deciding process)."""


@dataclass(frozen=True)
class ChosenGpu:
    """One GPU of a ``free:N`` choice.

    Attributes:
        local_rank: The process on this node that uses it (``cuda:<local_rank>`` after the hand-down).
        index: NVML (PCI-bus, ``nvidia-smi``) index.
        uuid: ``GPU-...`` UUID.
        name: Product name.
    """

    local_rank: int
    index: int
    uuid: str
    name: str


@dataclass(frozen=True)
class FreeChoice:
    """The GPUs a job's ``free:N`` stands for, and how this process uses them.

    Attributes:
        n: The ``N`` of ``free:N``.
        gpus: The chosen physical GPUs, in local-rank order (most free first when decided).
        devices: The ``Trainer(devices=...)`` value for this process.
        cuda_visible_devices: The ``CUDA_VISIBLE_DEVICES`` every local rank runs with (``None``: unset).
        decided_here: ``True`` in the process that asked NVML, ``False`` where the choice was inherited.
    """

    n: int
    gpus: tuple[ChosenGpu, ...]
    devices: list[int]
    cuda_visible_devices: str | None
    decided_here: bool = True

    def to_env(self) -> str:
        """The JSON text stored in :data:`FREE_CHOICE_ENV`."""
        return json.dumps(
            {
                "n": self.n,
                "gpus": self.record(),
                "devices": self.devices,
                "cuda_visible_devices": self.cuda_visible_devices,
            },
            separators=(",", ":"),
        )

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
    """``"torchrun"``, ``"srun"`` or ``"LOCAL_RANK"`` when ranks were started outside lit_gpu, else ``None``.

    Lightning's cluster environments decide: torchelastic, SLURM (not for jobs named
    ``bash``/``interactive``), and a set ``LOCAL_RANK`` (someone else, Lightning's DDP launcher
    included, started this process).
    """
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
    """How many processes an external launcher started on this node, ``None`` when unknown.

    Lightning has no public reader for these: torchrun's ``LOCAL_WORLD_SIZE``, SLURM's per-node
    task counts (``"2"``, or per node ``"2(x3),1"``).
    """
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
    """Resolve ``free:N`` once per job and hand the choice down to every rank through ``os.environ``.

    * The launching process (no ``LOCAL_RANK``, no torchrun/srun) asks NVML once, sets
      ``CUDA_VISIBLE_DEVICES`` to the chosen GPUs' UUIDs (most free first, mapped through an
      existing ``CUDA_VISIBLE_DEVICES``), records the choice in :data:`FREE_CHOICE_ENV` and returns
      ``devices=[0, ..., N-1]``. Lightning's DDP launcher copies ``os.environ`` into the ranks it
      starts, so they see exactly these GPUs in this order.
    * A process whose environment holds a matching record (a Lightning child, or the launching process
      asked again) reuses it without NVML.
    * Ranks started by torchrun/srun without a record cannot agree on a choice: refused, unless the
      launcher started only one process on this node.

    If CUDA is already initialised here, ``CUDA_VISIBLE_DEVICES`` can no longer change this
    process's GPUs: the choice is then the CUDA ordinals under the current visibility (recorded too).

    Raises:
        LitGpuError: the refusal above, a record that does not fit, or :func:`most_free_gpus`'s errors.
    """
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
            raise LitGpuError(
                FREE_RECORD_MISMATCH.format(
                    n=n,
                    var=FREE_CHOICE_ENV,
                    recorded_n=choice.n,
                    recorded_visible=choice.cuda_visible_devices,
                    visible=env.get("CUDA_VISIBLE_DEVICES"),
                )
            )
    if launcher is not None and local_process_count() != 1:
        who = "a launcher (LOCAL_RANK is set)" if launcher == "LOCAL_RANK" else launcher
        raise LitGpuError(FREE_UNDER_LAUNCHER.format(n=n, launcher=who))
    picked = most_free_gpus(n)
    chosen = tuple(
        ChosenGpu(local_rank=rank, index=gpu.index, uuid=gpu.uuid, name=gpu.name)
        for rank, (_, gpu) in enumerate(picked)
    )
    if _cuda_initialized():  # too late to narrow this process's visibility: keep its numbering
        choice = FreeChoice(n, chosen, [ordinal for ordinal, _ in picked], env.get("CUDA_VISIBLE_DEVICES"))
    else:
        choice = FreeChoice(n, chosen, list(range(n)), ",".join(g.uuid for g in chosen))
        env["CUDA_VISIBLE_DEVICES"] = choice.cuda_visible_devices  # type: ignore[assignment]
    env[FREE_CHOICE_ENV] = choice.to_env()
    return choice

"""Where a trial runs: in the sweep process or a child, and on which GPUs (claims per machine)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lit_gpu import devices as lit_devices
from lit_gpu.devices import parse_free_request
from lit_gpu.textfiles import JSON_LIMITS, BadFileError, read_json

LEASE_LIMITS = dataclasses.replace(JSON_LIMITS, max_bytes=4096, max_depth=2)  # a list of GPU ordinals

_MANY = 1 << 16  # "as many as asked": counts an explicit device list without a GPU query


def device_count(devices: Any, accelerator: Any) -> int:
    """How many processes ``trainer.devices`` starts (``0``: unknown, treat as several).

    Reads the request as :mod:`lit_gpu.devices` does (``free:N``, :func:`~lit_gpu.devices.device_ordinals`).
    """
    free = parse_free_request(devices)
    if free is not None:
        return free
    if isinstance(devices, bool) or devices in (-1, "-1"):
        return 0
    if devices in (None, "auto"):
        if str(accelerator).lower() == "cpu":
            return 1
        from lightning.fabric.accelerators.cuda import num_cuda_devices

        return max(1, num_cuda_devices())
    try:
        return len(lit_devices.device_ordinals(devices, _MANY))
    except (TypeError, ValueError):
        return 0


def needs_child_process(trainer_config: Any, gpus_per_trial: int) -> bool:
    """Whether a trial starts several processes (DDP & co.), so must not run inside the sweep."""
    get = trainer_config.get
    strategy = str(get("strategy", "auto") or "auto").lower()
    if gpus_per_trial > 1 or int(get("num_nodes", 1) or 1) > 1:
        return True
    if any(name in strategy for name in ("ddp", "fsdp", "deepspeed", "spawn", "fork")):
        return True
    if gpus_per_trial == 1:
        return False
    return device_count(get("devices", "auto"), get("accelerator", "auto")) != 1


class GpuClaims:
    """Spreads the workers of one machine over its GPUs: claims in ``<folder>/gpu_claims/``.

    Each trial takes the ``k`` GPUs that the fewest live workers on this host hold, most free memory
    first (:func:`lit_gpu.devices.pick_free_gpus`), under a file lock.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder / "gpu_claims"
        self.host = socket.gethostname()
        self.mine = self.folder / f"{self.host}@{os.getpid()}.json"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        import fcntl

        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _held_by_others(self) -> dict[int, int]:
        held: dict[int, int] = {}
        for path in self.folder.glob(f"{self.host}@*.json"):
            if path == self.mine:
                continue
            tail = path.stem.rsplit("@", 1)[1]
            if not (tail.isascii() and tail.isdigit() and 0 < len(tail) <= 10 and 0 < int(tail) < 2**31):
                continue  # not a lease this module wrote (a pid is a positive C int)
            pid = int(tail)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                path.unlink(missing_ok=True)  # a worker that died without releasing
                continue
            except PermissionError:
                pass
            with contextlib.suppress(OSError, BadFileError):
                ordinals = read_json(path, LEASE_LIMITS)
                for ordinal in ordinals if isinstance(ordinals, list) else ():
                    if isinstance(ordinal, int) and 0 <= ordinal < 1024:
                        held[ordinal] = held.get(ordinal, 0) + 1
        return held

    def claim(self, k: int) -> list[int]:
        """CUDA ordinals for the next trial of this worker."""
        from lit_gpu.devices import pick_free_gpus, visible_gpus

        with self._locked():
            pick_free_gpus(k)  # the usual one-line error when fewer than k GPUs are visible
            by_free = pick_free_gpus(len(visible_gpus()))
            held = self._held_by_others()
            chosen = sorted(by_free, key=lambda o: (held.get(o, 0), by_free.index(o)))[:k]
            self.mine.write_text(json.dumps(chosen))
        return chosen

    def release(self) -> None:
        """Drop this worker's claim."""
        self.mine.unlink(missing_ok=True)

"""A stand-in ``pynvml`` for subprocess tests (put this folder first on ``PYTHONPATH``).

The GPUs come from the JSON file named by ``LIT_GPU_FAKE_NVML`` (``{"gpus": [FakeGpu fields...]}``),
read again at every ``nvmlInit`` so a test can change free memory while processes run. Every
``nvmlInit`` appends ``<pid> <LOCAL_RANK>`` to ``<that file>.calls``: a test sees who queried NVML.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tests.helpers.fake_nvml import FakeGpu, FakeNVML, NVMLError

STATE_ENV = "LIT_GPU_FAKE_NVML"
_fake: FakeNVML | None = None


def write_state(path: str | os.PathLike[str], gpus: list[FakeGpu]) -> None:
    """Write the fake machine's GPUs for the processes that import this module."""
    state = [{**vars(g), "capability": list(g.capability)} for g in FakeNVML(gpus).gpus]
    with open(path, "w") as f:
        json.dump({"gpus": state}, f)


def nvmlInit() -> None:
    global _fake
    path = os.environ[STATE_ENV]
    with open(path) as f:
        gpus = [FakeGpu(**{**g, "capability": tuple(g["capability"])}) for g in json.load(f)["gpus"]]
    with open(f"{path}.calls", "a") as f:
        f.write(f"{os.getpid()} {os.environ.get('LOCAL_RANK', '-')}\n")
    _fake = FakeNVML(gpus)
    _fake.nvmlInit()


def __getattr__(name: str) -> Any:
    if not name.startswith("nvml") and name != "NVMLError":
        raise AttributeError(name)
    if name == "NVMLError":
        return NVMLError
    if _fake is None:
        raise NVMLError("nvmlInit was not called")
    return getattr(_fake, name)

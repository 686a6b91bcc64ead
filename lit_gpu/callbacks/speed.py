"""Speed levers as one callback: ``--speed.channels_last``, ``--speed.compile``, ``--speed.num_threads``..."""

from __future__ import annotations

import ctypes
import os
import platform
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info
from torch import nn
from typing_extensions import override

from lit_gpu import messages

MATMUL_PRECISIONS = ("highest", "high", "medium")

# glibc's mallopt parameters (malloc.h) and the values keep_host_memory sets
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: blocks up to this size come from the heap, not from a fresh mmap (glibc's largest allowed on 64-bit)
MMAP_THRESHOLD = 32 * 1024 * 1024
#: free memory at the top of the heap kept up to this size instead of returned to the OS
TRIM_THRESHOLD = 512 * 1024 * 1024
_host_memory_kept = False


def keep_freed_host_memory() -> bool:
    """Keep freed host memory for reuse instead of handing it back to the OS (glibc ``mallopt``).

    CPU tensors are ``malloc``-ed. glibc hands tensors of more than its (adaptive) mmap threshold
    their own ``mmap`` and returns heap space above its trim threshold to the OS on ``free``, so a
    training step that frees and re-allocates a few MB of activations touches fresh pages every time:
    about 1,300 page faults a step for ``FastMnistNet`` at batch 128 on CPU, 10-25 % of the step
    (``benchmarks/host_memory.py``). Fixed thresholds (32 MB, 512 MB) make those blocks come from, and
    go back to, the heap. PyTorch's CPU tuning guide suggests jemalloc or tcmalloc for the same reason;
    this needs no preloaded library. Once per process; returns whether glibc took the settings (False
    on other C libraries, e.g. macOS, Windows, musl).
    """
    global _host_memory_kept
    if _host_memory_kept:
        return True
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _host_memory_kept = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
    return _host_memory_kept


#: set by ``import lightning``: ``torch.cuda.is_available()`` asks NVML first, so it creates no CUDA context
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"


def skip_failing_nvml_probe() -> bool:
    """Drop ``PYTORCH_NVML_BASED_CUDA_CHECK`` where NVML cannot be loaded: the probe fails at every call.

    With the variable set and CUDA not initialised (every CPU run), each ``torch.cuda.is_available()``
    tries to ``dlopen`` NVML again before asking the CUDA runtime: ~40 us, and Adam, AdamW, RMSprop and
    friends ask at every ``step()`` (``_accelerator_graph_capture_health_check``). Where the library is
    missing, torch falls back to the CUDA runtime's count, which is what it asks without the variable:
    dropping it changes no answer, only the cost. Where NVML loads, nothing changes. Returns whether
    it was dropped.
    """
    if os.environ.get(NVML_CHECK) != "1" or platform.system() != "Linux":
        return False
    try:
        ctypes.CDLL("libnvidia-ml.so.1")  # torch's own probe (torch.cuda._raw_device_count_nvml)
    except OSError:
        del os.environ[NVML_CHECK]
        return True
    return False


def _to_channels_last(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    x = args[0]
    if isinstance(x, torch.Tensor) and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    return (x, *args[1:])


class SpeedLevers(Callback):
    """Speed settings applied when fitting/evaluating starts; all but ``keep_host_memory`` off by default.

    Measured on MNIST in ``docs/benchmarks.md`` (``## Speed levers``).

    Args:
        channels_last: Store conv weights and feed 4-D inputs as NHWC (``torch.channels_last``):
            oneDNN (CPU) and cuDNN (tensor cores) pick faster kernels for it.
        compile: ``torch.compile`` the module's ``net`` in place (state-dict keys unchanged).
            The first steps pay the compile time.
        compile_mode: ``mode`` passed to ``torch.compile`` (``default``, ``reduce-overhead``,
            ``max-autotune``).
        matmul_precision: ``torch.set_float32_matmul_precision``: ``"high"`` lets Ampere+ GPUs
            use TF32 for float32 matmuls/convs; ``None`` keeps PyTorch's setting.
        num_threads: ``torch.set_num_threads`` for CPU ops (``None`` keeps PyTorch's default,
            one per core). On a busy shared CPU, fewer threads than cores can be faster.
        cuda_graph: Whole-step capture: each training step's forward, backward and optimizer step
            replayed as one CUDA graph (:mod:`lit_gpu.fastpath.graph`), for GPU steps bound by
            kernel launches and Python. Needs static batch shapes (``drop_last``); it stands aside with
            one printed line for what it cannot capture.
        cuda_graph_warmup: Ordinary steps before the capture.
        keep_host_memory: Keep freed host memory for reuse instead of returning it to the OS at every
            step (glibc only; :func:`keep_freed_host_memory`). The process keeps up to 512 MB of freed
            heap; ``false`` leaves glibc's defaults.

    Always, as it changes no answer: where NVML cannot be loaded, Lightning's NVML-first CUDA check is
    switched off (:func:`skip_failing_nvml_probe`), which every Adam step paid for on a CPU.
    """

    def __init__(
        self,
        channels_last: bool = False,
        compile: bool = False,
        compile_mode: str | None = None,
        matmul_precision: str | None = None,
        num_threads: int | None = None,
        cuda_graph: bool = False,
        cuda_graph_warmup: int = 3,
        keep_host_memory: bool = True,
    ) -> None:
        super().__init__()
        if matmul_precision is not None and matmul_precision not in MATMUL_PRECISIONS:
            raise ValueError(f"matmul_precision must be one of {MATMUL_PRECISIONS}, got {matmul_precision!r}")
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        self.channels_last = channels_last
        self.compile = compile
        self.compile_mode = compile_mode
        self.matmul_precision = matmul_precision
        self.num_threads = num_threads
        if cuda_graph_warmup < 1:
            raise ValueError(f"cuda_graph_warmup must be >= 1, got {cuda_graph_warmup}")
        self.cuda_graph = cuda_graph
        self.cuda_graph_warmup = cuda_graph_warmup
        self.keep_host_memory = keep_host_memory
        self._applied: set[int] = set()

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.keep_host_memory:
            keep_freed_host_memory()
        skip_failing_nvml_probe()  # changes no answer (see there): always
        if self.matmul_precision is not None:
            torch.set_float32_matmul_precision(self.matmul_precision)
        if self.num_threads is not None:
            torch.set_num_threads(self.num_threads)
        net = getattr(pl_module, "net", pl_module)
        if id(net) in self._applied:
            return
        self._applied.add(id(net))
        if self.channels_last:
            net.to(memory_format=torch.channels_last)
            net.register_forward_pre_hook(_to_channels_last)
        if self.compile:
            net.compile(mode=self.compile_mode)
        if self.channels_last or self.compile or self.matmul_precision or self.num_threads or self.cuda_graph:
            rank_zero_info(messages.one_line(f"Speed levers: {self.describe()}"))

    def describe(self) -> str:
        """The levers that are on, as one line (``"none"`` when all are off)."""
        on = []
        if self.channels_last:
            on.append("channels_last")
        if self.compile:
            on.append(f"compile({self.compile_mode or 'default'})")
        if self.matmul_precision:
            on.append(f"matmul_precision={self.matmul_precision}")
        if self.num_threads:
            on.append(f"num_threads={self.num_threads}")
        if self.cuda_graph:
            on.append("cuda_graph")
        return ", ".join(on) or "none"

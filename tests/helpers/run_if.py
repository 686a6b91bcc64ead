"""``RunIf``: one skip gate for the hardware a test needs, as in Lightning's own test suite.

@RunIf(min_cuda_gpus=2)      # skipped unless at least two CUDA GPUs are visible
@RunIf(max_cuda_gpus=0)      # the no-GPU behaviour: skipped where a GPU is present
"""

from __future__ import annotations

import pytest
import torch


def cuda_gpu_count() -> int:
    """CUDA GPUs this process sees."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def RunIf(min_cuda_gpus: int = 0, max_cuda_gpus: int | None = None) -> pytest.MarkDecorator:  # noqa: N802
    """A ``skipif`` mark for tests that need between ``min_cuda_gpus`` and ``max_cuda_gpus`` GPUs."""
    count = cuda_gpu_count()
    reasons = []
    if count < min_cuda_gpus:
        reasons.append(f"needs >= {min_cuda_gpus} CUDA GPU{'s' if min_cuda_gpus > 1 else ''} (found {count})")
    if max_cuda_gpus is not None and count > max_cuda_gpus:
        reasons.append(f"needs <= {max_cuda_gpus} CUDA GPUs (found {count})")
    return pytest.mark.skipif(bool(reasons), reason="; ".join(reasons) or "runs here")
